"""Simulator invariants: determinism, no over-allocation, energy = integral of power, budgets, preemption."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from easlurm.model import Oracle
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine.core import CountingEnvironment
from easlurm.sim.job import JobSpec
from easlurm.sim.runner import SimSpec, run_simulation, simulate


def step_integral_j(times: np.ndarray, power: np.ndarray, end_s: float) -> float:
    return float(np.sum(power * np.diff(np.append(times, end_s))))


@pytest.mark.parametrize("policy", ["zeus", "aurachronos"])
def test_same_seed_same_result_other_seed_other_result(policy: str) -> None:
    a = run_simulation(SimSpec(policy=policy, scenario="C", seed=3, hours=3.0))
    b = run_simulation(SimSpec(policy=policy, scenario="C", seed=3, hours=3.0))
    c = run_simulation(SimSpec(policy=policy, scenario="C", seed=4, hours=3.0))
    drop = {"wall_s", "events_per_s"}
    assert {k: v for k, v in a.metrics.items() if k not in drop} == pytest.approx(
        {k: v for k, v in b.metrics.items() if k not in drop}, nan_ok=True
    )
    assert a.jobs == b.jobs
    assert a.jobs != c.jobs


@pytest.mark.parametrize("policy", ["pollux", "zeus", "themis", "chronos", "charon-pl"])
def test_gpus_are_never_over_allocated(policy: str) -> None:
    """Replays every job's interval on its node: concurrent GPUs never exceed the node's."""
    res = run_simulation(SimSpec(policy=policy, scenario="charon-budget", seed=2, hours=4.0))
    capacity = {n.name: n.n_gpus for n in ClusterSpec.default().nodes}
    events: list[tuple[float, int, str]] = []
    for j in res.jobs:
        if j["start_s"] is None:
            continue
        end = j["end_s"] if j["end_s"] is not None else res.metrics["simulated_s"]
        events += [(j["start_s"], j["n_gpus"], j["node"]), (end, -j["n_gpus"], j["node"])]
    used = dict.fromkeys(capacity, 0)
    for _, delta, node in sorted(events, key=lambda e: (e[0], e[1])):
        used[node] += delta
        assert 0 <= used[node] <= capacity[node]
    assert res.metrics["completed_jobs"] > 10


class Greedy:
    """A broken policy that asks for more GPUs than exist; the simulator must refuse."""

    name = "greedy"
    time_sensitive = False

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        node = snapshot.nodes[0]
        return Decision(
            starts=tuple(
                StartJob(p.job_id, node.name, 8, p.batch_options[0], node.gpu_type) for p in snapshot.pending
            )
        )


def test_simulator_rejects_starts_that_do_not_fit() -> None:
    jobs = [_job(f"j{i}", submit_s=0.0) for i in range(3)]
    res = simulate(ClusterSpec.uniform(1, 8, "a100-40gb"), jobs, Greedy(), noise_sigma=0.0)
    assert res.metrics["completed_jobs"] == 3
    assert res.metrics["rejected_starts"] >= 2
    starts = sorted((j["start_s"], j["end_s"]) for j in res.jobs)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(starts))


@pytest.mark.parametrize("policy", ["pollux", "aurachronos"])
def test_energy_is_the_integral_of_the_power_series(policy: str) -> None:
    res = run_simulation(SimSpec(policy=policy, scenario="C", seed=5, hours=4.0))
    end = res.metrics["simulated_s"]
    assert end == 4 * 3600.0
    integral_j = step_integral_j(res.power_times_s, res.power_w, end)
    assert res.metrics["energy_j"] == pytest.approx(integral_j, rel=1e-9)
    busy_j = sum(j["energy_j"] for j in res.jobs)
    assert res.metrics["busy_energy_j"] == pytest.approx(busy_j, rel=1e-9)
    assert res.metrics["energy_j"] == pytest.approx(
        res.metrics["busy_energy_j"] + res.metrics["idle_energy_j"]
    )
    idle_floor_w = 8 * 55.0 + 8 * 70.0
    assert res.power_w.min() >= idle_floor_w - 1e-6


def test_charon_never_exceeds_its_budget_with_exact_predictions() -> None:
    for seed in (0, 1):
        res = run_simulation(
            SimSpec(policy="charon", scenario="charon-budget", seed=seed, hours=5.0, noise_sigma=0.0)
        )
        assert res.metrics["max_power_w"] <= 4500.0 + 1e-6
        assert res.metrics["time_over_budget_s"] == 0.0
        assert res.metrics["completed_jobs"] > 0
    free = run_simulation(
        SimSpec(policy="zeus", scenario="charon-budget", seed=0, hours=5.0, noise_sigma=0.0)
    )
    assert free.metrics["max_power_w"] > 4500.0  # the budget binds


def test_charon_keeps_its_budget_under_noisy_predictions_at_the_thesis_charons_throughput() -> None:
    """Every seed: the thesis's Charon breaks the budget under noise (its peak over it by more than 5 %),
    Charon keeps it. Over the seeds (one seed's job count, and how long the thesis's Charon stays over,
    move by a tenth and more with the noise and the parameters' refits: 2.6 to 23 % of one seed's time):
    the thesis's Charon is over the budget more than 5 % of the time, and Charon completes as many jobs."""
    completed = {"charon": 0.0, "charon-thesis": 0.0}
    over_s = 0.0
    for seed in (0, 1, 2, 3):
        spec = SimSpec(policy="charon", scenario="charon-budget", seed=seed, hours=5.0)
        now = run_simulation(spec)
        thesis = run_simulation(dataclasses.replace(spec, policy="charon-thesis"))
        assert thesis.metrics["max_power_w"] > 1.05 * 4500.0  # noise breaks the thesis's budget
        over_s += thesis.metrics["time_over_budget_s"]
        assert now.metrics["time_over_budget_s"] <= 0.01 * 5 * 3600
        assert now.metrics["max_power_w"] < thesis.metrics["max_power_w"]
        completed["charon"] += now.metrics["completed_jobs"]
        completed["charon-thesis"] += thesis.metrics["completed_jobs"]
        # the running jobs carry what the policy predicted for them, and the engine drew the truth
        assert any(j["power_limit_w"] is not None for j in now.jobs)
    assert completed["charon"] >= 0.95 * completed["charon-thesis"]
    assert over_s > 0.05 * 4 * 5 * 3600


def test_charon_pl_keeps_the_budget_even_with_noisy_predictions_and_does_more_work() -> None:
    pl = run_simulation(SimSpec(policy="charon-pl", scenario="charon-budget", seed=1, hours=5.0))
    plain = run_simulation(
        SimSpec(policy="charon", scenario="charon-budget", seed=1, hours=5.0, noise_sigma=0.0)
    )
    assert pl.metrics["max_power_w"] <= 4500.0 + 1e-6
    assert pl.metrics["completed_jobs"] > plain.metrics["completed_jobs"]
    assert any(j["power_limit_w"] is not None for j in pl.jobs)


def _job(job_id: str, **kw: Any) -> JobSpec:
    base: dict[str, Any] = dict(
        job_id=job_id,
        user="u0",
        submit_s=0.0,
        model="resnet50",
        total_steps=3000,
        batch_options=(256,),
        gpu_options=(8,),
        precision="fp32-strict",
    )
    base.update(kw)
    return JobSpec(**base)


def urgent_heavy_jobs() -> list[JobSpec]:
    """Long best-effort jobs fill both nodes; then urgent jobs with tight deadlines arrive."""
    jobs = [_job(f"be{i}", submit_s=float(i), total_steps=200_000, user="batch") for i in range(4)]
    for i in range(6):
        t = 900.0 + 1200.0 * i
        jobs.append(
            _job(
                f"ur{i}",
                submit_s=t,
                total_steps=4000,
                gpu_options=(4, 8),
                urgent=True,
                deadline_s=t + 1500.0,
                user="ops",
            )
        )
    return sorted(jobs, key=lambda j: j.submit_s)


def test_aurachronos_misses_fewer_deadlines_than_non_preemptive_policies() -> None:
    cluster = ClusterSpec.default()
    results = {
        name: simulate(cluster, urgent_heavy_jobs(), name, noise_sigma=0.0, horizon_s=4 * 3600.0)
        for name in ("aurachronos", "chronos-malleable", "pollux", "zeus")
    }
    aura = results.pop("aurachronos").metrics
    assert aura["preemptions"] > 0
    for name, res in results.items():
        assert aura["deadline_miss_rate"] < res.metrics["deadline_miss_rate"], name
        assert res.metrics["preemptions"] == 0


def test_checkpoints_reduce_the_work_lost_to_preemption() -> None:
    cluster = ClusterSpec.default()
    lost = {}
    for ckpt in (None, 120.0):
        res = simulate(
            cluster,
            urgent_heavy_jobs(),
            "aurachronos",
            noise_sigma=0.0,
            horizon_s=4 * 3600.0,
            checkpoint_interval_s=ckpt,
        )
        assert res.metrics["preemptions"] > 0
        lost[ckpt] = res.metrics["preempted_energy_j"]
    assert 0 <= lost[120.0] < lost[None]


class Recorder:
    """Wraps a policy and keeps every (snapshot, decision) the simulator produced."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.time_sensitive = inner.time_sensitive
        self.log: list[tuple[ClusterSnapshot, Decision]] = []

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        d = self.inner.decide(snapshot, oracle)
        self.log.append((snapshot, d))
        return d

    def wake_at_s(self, snapshot: ClusterSnapshot, oracle: Any) -> float | None:
        return self.inner.wake_at_s(snapshot, oracle)


@pytest.mark.parametrize("name", ["zeus", "aurachronos", "charon", "hades"])
def test_policy_decides_the_same_called_directly_or_by_the_simulator(name: str) -> None:
    oracle = Oracle()
    rec = Recorder(get_policy(name, power_budget_w=4500.0))
    jobs = urgent_heavy_jobs() + [
        _job(f"x{i}", submit_s=60.0 * i, gpu_options=(1, 2, 4), total_steps=500) for i in range(20)
    ]
    jobs.sort(key=lambda j: j.submit_s)
    simulate(ClusterSpec.default(), jobs, rec, oracle=oracle, truth_oracle=oracle, horizon_s=3 * 3600.0)
    assert len(rec.log) > 5
    fresh = get_policy(name, power_budget_w=4500.0)
    for snapshot, decision in rec.log:
        assert fresh.decide(snapshot, oracle) == decision
        assert fresh.decide(ClusterSnapshot.from_dict(snapshot.to_dict()), oracle) == decision


def test_simulate_consumes_an_endless_stream_lazily_up_to_the_horizon() -> None:
    pulled = []

    def stream():
        for i in itertools.count():
            pulled.append(i)
            yield _job(f"s{i}", submit_s=300.0 * i, total_steps=200, gpu_options=(1,))

    res = simulate(ClusterSpec.default(), stream(), "pollux", horizon_s=3600.0)
    assert res.metrics["submitted_jobs"] == 12
    assert len(pulled) == 13  # one look-ahead past the horizon, no more


def test_preempted_job_resumes_and_keeps_its_identity() -> None:
    res = simulate(
        ClusterSpec.default(), urgent_heavy_jobs(), "aurachronos", noise_sigma=0.0, horizon_s=8 * 3600.0
    )
    victims = [j for j in res.jobs if j["preemptions"] > 0]
    assert victims and all(not j["urgent"] for j in victims)
    assert all(j["start_s"] is not None for j in victims)
    assert dataclasses.asdict(SimSpec("zeus"))["scenario"] == "B"


def test_an_abandoned_event_does_not_end_a_run_on_its_time() -> None:
    """A completion abandoned before it fires (a job's old rate) does not keep a run without horizon going:
    the run ends at the last event that matters, and what waited on the abandoned event never runs."""
    env = CountingEnvironment()
    log: list[tuple[str, float]] = []
    stale = env.timeout(50.0)

    def waiter() -> Generator[simpy.Event, Any, None]:
        yield stale
        log.append(("stale", env.now))

    def worker() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(10.0)
        env.abandon(stale)
        log.append(("worker", env.now))

    env.process(waiter())
    env.process(worker())
    env.run_active()
    assert log == [("worker", 10.0)]
    assert env.now == 10.0
