"""A small deterministic stand-in for the simulator, injected into the campaign executor in tests."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from easlurm.sim.spec import SimSpec

#: Mean energy per policy (J): the fake makes "zeus" cheaper than "pollux" by construction.
ENERGY_J = {"pollux": 205e6, "zeus": 184e6, "themis": 198e6}


def fake_runner(spec: SimSpec) -> dict[str, Any]:
    """Metrics drawn from a generator seeded by the spec alone, as the real simulator must be."""
    key = [spec.seed, zlib.crc32(spec.policy.encode()), zlib.crc32(spec.scenario.encode())]
    rng = np.random.default_rng(key)
    load = spec.load_jobs_per_h or 18.0
    t = np.linspace(0.0, spec.hours * 3600.0, 40)
    p = 4000.0 + 800.0 * np.sin(t / 2000.0) + rng.normal(0.0, 50.0, t.size)
    if spec.power_budget_w is not None:
        p = np.minimum(p, spec.power_budget_w)
    shares = rng.dirichlet(np.ones(5))
    metrics = {
        "throughput_jobs_per_h": 10.0 + load / 18.0 + rng.normal(0.0, 0.3),
        "energy_j": ENERGY_J.get(spec.policy, 216e6) + rng.normal(0.0, 3.6e6),
        "mean_jct_s": 3600.0 * load / 18.0 + rng.normal(0.0, 60.0),
        "deadline_miss_rate": float(rng.uniform(0.0, 0.2)),
        "jain_index": float(rng.uniform(0.8, 1.0)),
        "max_power_w": float(p.max()),
        "preemptions": float(rng.integers(0, 5)),
        "completed_jobs": float(rng.integers(50, 100)),
        "util_a100-40gb": float("nan"),  # a missing value must stay missing
        "util_h100_sxm": float(rng.uniform(0.5, 0.9)),
        # only zeus-share shares GPUs, and only outside experiment B
        "colocated_jobs": float(rng.integers(5, 20)) if spec.policy == "zeus-share" else 0.0,
    }
    return {
        "metrics": metrics,
        "power_times_s": t,
        "power_w": p,
        "user_gpu_share": {f"u{i}": float(s) for i, s in enumerate(shares)},
        "jobs": [],
    }


def failing_runner(spec: SimSpec) -> dict[str, Any]:
    """Fails for policy 'broken' only, to check that one bad run does not stop a campaign."""
    if spec.policy == "broken":
        raise RuntimeError("simulated crash")
    return fake_runner(spec)
