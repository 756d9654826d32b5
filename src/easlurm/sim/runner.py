"""Run one simulation: from a SimSpec (scenario workload) or from any job stream (trace replay)."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easlurm.config import load_config
from easlurm.errors import ConfigError
from easlurm.model.build import catalogue, hardware_setting, oracle_params, params_setting
from easlurm.model.node_power import PowerSaving, apply_power_saving
from easlurm.model.oracle import NoisyOracle, Oracle
from easlurm.priority.policies import get_policy
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine import SimConfig, Simulator, Truth
from easlurm.sim.engine.pending import DEFAULT_QUEUE_DEPTH
from easlurm.sim.job import JobSpec
from easlurm.sim.metrics import compute, job_rows
from easlurm.sim.scenarios import get_scenario
from easlurm.sim.spec import SimSpec
from easlurm.sim.workload import poisson_jobs

log = logging.getLogger(__name__)


@dataclass
class SimResult:
    """Metrics (flat, units in names) plus the power time series, user shares and per-job rows."""

    spec: SimSpec | None
    metrics: dict[str, float]
    power_times_s: np.ndarray
    power_w: np.ndarray
    user_gpu_share: dict[str, float]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    #: per node: power cycles, the shortest time between two of them, time powered down
    nodes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN becomes null."""
        return {
            "schema_version": 1,
            "spec": self.spec.to_dict() if self.spec is not None else None,
            "metrics": {k: _json_float(v) for k, v in self.metrics.items()},
            "power_times_s": [float(t) for t in self.power_times_s],
            "power_w": [float(p) for p in self.power_w],
            "user_gpu_share": dict(self.user_gpu_share),
            "jobs": _json_rows(self.jobs),
            "nodes": [{k: _json_float(v) for k, v in row.items()} for row in self.nodes],
        }


def _json_float(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _json_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-job rows with NaN as null, changed in place: a million-job replay holds one copy."""
    for row in rows:
        for k, v in row.items():
            if isinstance(v, float) and not math.isfinite(v):
                row[k] = None
    return rows


def _configured_model() -> tuple[Any, Any]:
    """The configured parameters and GPU catalogue (user files included; each parsed once per version),
    from one read of the configuration (this runs once per simulation)."""
    cfg = load_config()
    return oracle_params(params_setting(cfg)), catalogue(hardware_setting(cfg))


def make_oracles(noise_sigma: float, seed: int) -> tuple[Any, Any]:
    """(what the policy sees, what really happens): a seeded noisy oracle over the analytical one."""
    params, catalogue = _configured_model()
    truth = Oracle(params=params, catalogue=catalogue)
    if noise_sigma <= 0:
        return truth, truth
    return NoisyOracle(sigma=noise_sigma, seed=seed, params=params, catalogue=catalogue), truth


def simulate(
    cluster: ClusterSpec,
    jobs: Iterable[JobSpec],
    policy: Any,
    *,
    seed: int = 0,
    oracle: Any = None,
    power_budget_w: float | None = None,
    horizon_s: float | None = None,
    checkpoint_interval_s: float | None = None,
    noise_sigma: float = 0.10,
    interval_s: float = 1.0,
    truth_oracle: Any = None,
    spec: SimSpec | None = None,
    power_saving: PowerSaving | None = None,
    queue_depth: int | None = DEFAULT_QUEUE_DEPTH,
) -> SimResult:
    """Simulate `jobs` (consumed lazily, in submit order) under `policy` (a name or a Policy object).

    Without a horizon the run lasts until every job has finished (or can never start). `power_saving`
    (default: the cluster's own) powers idle nodes down as Slurm's SuspendTime does. Each decision sees
    the first `queue_depth` pending jobs in queue order (None: all; sim/engine/pending.py)."""
    if isinstance(policy, str):
        policy = get_policy(policy)
    if oracle is None or truth_oracle is None:
        seen, real = make_oracles(noise_sigma, seed)
        oracle = seen if oracle is None else oracle
        truth_oracle = real if truth_oracle is None else truth_oracle
    truth = truth_oracle if isinstance(truth_oracle, Truth) else Truth(truth_oracle)
    catalogue = truth.oracle.catalogue
    cluster = cluster.resolved(catalogue)
    facts: dict[str, tuple[float, float, float | None]] = {}
    for t in cluster.gpu_types:
        g = catalogue.get(t)
        facts[t] = (float(g.idle_w), float(g.tdp_w), float(g.min_power_limit_w))
    if checkpoint_interval_s is not None and checkpoint_interval_s <= 0:
        raise ConfigError("checkpoint_interval_s must be > 0")
    sim = Simulator(
        cluster,
        jobs,
        policy,
        oracle=oracle,
        truth=truth,
        config=SimConfig(
            interval_s=interval_s,
            horizon_s=horizon_s,
            power_budget_w=power_budget_w,
            checkpoint_interval_s=checkpoint_interval_s,
            power_saving=power_saving,
            type_facts=facts,
            queue_depth=queue_depth,
        ),
    )
    sim.run()
    end_s = sim.ledger.end_s or 0.0
    records = list(sim.records.values())
    metrics, shares = compute(
        records, sim.ledger, end_s, sim.busy_gpu_s_by_type, cluster.gpus_by_type(), power_budget_w
    )
    metrics.update(
        {
            "simulated_s": end_s,
            "events": float(sim.env.n_events),
            "decisions": float(sim.decisions),
            "rejected_starts": float(sim.rejected),
            "wall_s": sim.wall_s,
            "events_per_s": sim.env.n_events / sim.wall_s if sim.wall_s > 0 else math.nan,
            "node_base_w": cluster.base_w,
            "resume_waits": float(sim.resume_waits),
            **sim.power.summary(),
        }
    )
    times, power = sim.ledger.series()
    return SimResult(spec, metrics, times, power, shares, job_rows(records), sim.power.per_node())


def load_cluster(path: str | None) -> ClusterSpec:
    return ClusterSpec.default() if path is None else ClusterSpec.from_yaml(path)


def run_simulation(spec: SimSpec, jobs: list[JobSpec] | None = None) -> SimResult:
    """One scenario run: the scenario's Poisson workload for `spec.seed` (or the given jobs, e.g. a job
    list YAML), `spec.hours` simulated."""
    scenario = get_scenario(spec.scenario)
    if spec.hours <= 0:
        raise ConfigError("hours must be > 0")
    settings = scenario.workload
    load = spec.load_jobs_per_h if spec.load_jobs_per_h is not None else scenario.load_jobs_per_h
    settings = dataclasses.replace(settings, load_jobs_per_h=load)
    budget = spec.power_budget_w if spec.power_budget_w is not None else scenario.power_budget_w
    cluster = (
        scenario.cluster
        if spec.cluster is None and scenario.cluster is not None
        else load_cluster(spec.cluster)
    )
    seen, real = make_oracles(spec.noise_sigma, spec.seed)
    truth = Truth(real)
    cluster = cluster.resolved(real.catalogue)
    saving = apply_power_saving(cluster.power_saving, spec.power_saving, "power_saving")
    cluster = dataclasses.replace(cluster, power_saving=saving)
    max_per_type: dict[str, int] = {}
    nodes_per_type: dict[str, int] = {}
    for n in cluster.nodes:
        max_per_type[n.gpu_type] = max(max_per_type.get(n.gpu_type, 0), n.n_gpus)
        nodes_per_type[n.gpu_type] = nodes_per_type.get(n.gpu_type, 0) + 1
    horizon_s = spec.hours * 3600.0
    stream = (
        poisson_jobs(
            settings, truth, max_per_type, seed=spec.seed, horizon_s=horizon_s, nodes_per_type=nodes_per_type
        )
        if jobs is None
        else jobs
    )
    policy = get_policy(spec.policy, **dict(spec.policy_params))
    return simulate(
        cluster,
        stream,
        policy,
        seed=spec.seed,
        oracle=seen,
        truth_oracle=truth,
        power_budget_w=budget,
        horizon_s=horizon_s,
        checkpoint_interval_s=spec.checkpoint_interval_s,
        spec=spec,
    )
