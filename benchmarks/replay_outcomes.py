"""Every replayed outcome of bench_replay's trace under each policy, as one JSON document, to compare two trees.

    python benchmarks/replay_outcomes.py > after.json
    PYTHONPATH=/tmp/before/src python benchmarks/replay_outcomes.py > before.json
    cmp before.json after.json

Two replays of Philly-shaped traces (benchmarks/bench_replay.py's generator, seed 0 and 1): 10,000 jobs on
the 1,024-GPU cluster under recorded, pollux, zeus, hades, aurachronos and charon, and 2,000 jobs under zeus
on 256 GPUs (the undersized cluster, whose queue passes the depth a decision sees). Printed per run: the
outcome digest (every job's start, end and energy) and every metric except those of time taken (wall
seconds, jobs and events per second) and the event count (`events`, which says how the simulator got there,
not where). See docs/replay.md, "Replay at scale".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import write_trace

from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.identical import DIGEST_KEY
from easlurm.sim.replay import ReplayRequest, replay

#: metrics of the time a run took or of how it got there, not of its outcome
_NOT_OUTCOME = ("wall_s", "replay_wall_s", "jobs_per_s", "events_per_s", "events")


def _outcome(result: dict[str, Any]) -> dict[str, Any]:
    metrics = {k: v for k, v in sorted(result.get("metrics", {}).items()) if k not in _NOT_OUTCOME}
    return {"digest": result.get(DIGEST_KEY), "metrics": metrics}


def outcomes(trace: Path, gpus: int, policies: list[str]) -> dict[str, Any]:
    """The recorded row and each policy's outcome of one replay of `trace` on `gpus` GPUs."""
    n = gpus // 8
    cluster = ClusterSpec.mixed([(n // 2, 8, "a100-40gb"), (n - n // 2, 8, "h100-sxm")])
    res = replay(ReplayRequest(str(trace), cluster, policies, noise_sigma=0.10))
    out = {"jobs": res.mapping.mapped, "recorded": _outcome(res.baseline)}
    for policy in policies:
        out[policy] = _outcome(res.run(policy))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policies", default="pollux,zeus,hades,aurachronos,charon")
    ap.add_argument("--undersized", type=int, default=2_000, help="Jobs of the undersized run (0: none).")
    args = ap.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    doc: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.psv"
        write_trace(trace, args.jobs, 1024, seed=0, shape="philly")
        doc["full"] = outcomes(trace, 1024, policies)
        if args.undersized:
            small = Path(tmp) / "undersized.psv"
            write_trace(small, args.undersized, 1024, seed=1, shape="philly")
            doc["undersized"] = outcomes(small, 256, ["zeus"])
    print(json.dumps(doc, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
