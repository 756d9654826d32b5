"""Node base power and Slurm's power saving in the simulator: when a node goes down, what it draws, when a
job placed on it starts, and that the energy parts add up to the power integral."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from easlurm.model import Oracle
from easlurm.model.node_power import PowerSaving, default_idle_w
from easlurm.priority.policies import POLICY_NAMES, get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.sim.cluster import ClusterSpec, NodeSpec
from easlurm.sim.engine import Truth
from easlurm.sim.job import JobSpec
from easlurm.sim.runner import SimSpec, make_oracles, run_simulation, simulate
from easlurm.sim.scenarios import get_scenario
from easlurm.sim.workload import poisson_jobs

GPU = "h100-sxm"
BATCH = 16
BASE_W, OFF_W = 200.0, 20.0
SAVING = PowerSaving(suspend_time_s=600.0, resume_timeout_s=300.0, suspend_timeout_s=30.0, boot_s=100.0)


class Script:
    """A policy that starts named jobs at given instants and logs (time, job) tuples."""

    name = "script"
    time_sensitive = False

    def __init__(self, actions: dict[float, Callable[[ClusterSnapshot], Decision]]) -> None:
        self.actions = actions
        self.log: list[tuple[float, str]] = []

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        act = self.actions.get(snapshot.time_s)
        if act is None:
            return Decision()
        decision = act(snapshot)
        self.log.extend((snapshot.time_s, s.job_id) for s in decision.starts)
        return decision


def start(job_id: str, node: str = "h0") -> Callable[[ClusterSnapshot], Decision]:
    return lambda snap: Decision(starts=(StartJob(job_id, node, 1, BATCH, GPU),))


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth(Oracle())


def job(job_id: str, alone_s: float, truth: Truth, submit_s: float) -> JobSpec:
    """A one-GPU job sized to run `alone_s` seconds on one H100."""
    probe = JobSpec(job_id, "u", submit_s, "resnet50", 1, (BATCH,), (1,), malleable=False)
    sps = truth.rate(probe, 1, BATCH, GPU, None)[0]
    return JobSpec(
        job_id, "u", submit_s, "resnet50", round(alone_s * sps / BATCH), (BATCH,), (1,), malleable=False
    )


def node_cluster(saving: PowerSaving | None = SAVING, n: int = 1) -> ClusterSpec:
    nodes = tuple(NodeSpec(f"h{i}", GPU, 1, "none", BASE_W, OFF_W) for i in range(n))
    return ClusterSpec(nodes, "one", saving)


def gpu_idle_w(truth: Truth) -> float:
    return float(truth.oracle.catalogue.get(GPU).idle_w)


def integral_j(res: Any) -> float:
    t, p = res.power_times_s, res.power_w
    return float(np.sum(p * np.diff(np.append(t, res.metrics["simulated_s"]))))


def parts_j(m: dict[str, float]) -> float:
    return m["busy_energy_j"] + m["idle_energy_j"] + m["off_energy_j"] + m["cycle_energy_j"]


def test_a_node_idle_for_suspend_time_goes_down_and_draws_its_off_power(truth: Truth) -> None:
    """On at idle power (base + GPU) for SuspendTime, shutting down at idle power for SuspendTimeout
    (cycle energy), then off power until the end; one power cycle."""
    res = simulate(node_cluster(), [], Script({}), noise_sigma=0.0, truth_oracle=truth, horizon_s=2000.0)
    on_w = BASE_W + gpu_idle_w(truth)
    assert res.power_times_s.tolist() == [0.0, 600.0, 630.0]
    assert res.power_w.tolist() == pytest.approx([on_w, on_w, OFF_W])
    m = res.metrics
    assert m["idle_energy_j"] == pytest.approx(on_w * 600.0)
    assert m["cycle_energy_j"] == pytest.approx(on_w * 30.0)
    assert m["off_energy_j"] == pytest.approx(OFF_W * (2000.0 - 630.0))
    assert m["power_cycles"] == 1 and m["off_node_h"] == pytest.approx((2000.0 - 630.0) / 3600.0)
    assert res.nodes == [
        {
            "node": "h0",
            "power_cycles": 1,
            "min_cycle_gap_s": None,
            "off_s": pytest.approx(1370.0),
            "on_w": pytest.approx(on_w),
            "off_w": OFF_W,
            "suspend_at_s": 600.0,
            "off_at_s": 630.0,
        }
    ]


def test_a_job_placed_on_a_powered_down_node_starts_after_the_boot_time(truth: Truth) -> None:
    """The policy places the job at 1000 s on the node that is off since 630 s: the node boots at idle
    power until 1100 s and the job starts then; a run without horizon ends with the last job, not with
    the power-down timers that follow it (SuspendTime later)."""
    j = job("a", 500.0, truth, 1000.0)
    policy = Script({1000.0: start("a")})
    res = simulate(node_cluster(), [j], policy, noise_sigma=0.0, truth_oracle=truth)
    row = res.jobs[0]
    assert policy.log == [(1000.0, "a")]
    assert row["start_s"] == pytest.approx(1100.0) and row["resume_wait_s"] == pytest.approx(100.0)
    assert row["end_s"] <= res.metrics["simulated_s"] <= row["end_s"] + 1.0  # the scheduler's next tick
    on_w = BASE_W + gpu_idle_w(truth)
    assert res.metrics["cycle_energy_j"] == pytest.approx(on_w * (30.0 + 100.0))
    assert res.metrics["off_energy_j"] == pytest.approx(OFF_W * (1000.0 - 630.0))
    assert res.metrics["resume_waits"] == 1


def test_a_job_placed_while_the_node_shuts_down_waits_for_the_shutdown_and_the_boot(truth: Truth) -> None:
    """Placed at 610 s, during the shutdown (600-630 s): it starts at 630 + 100 s."""
    res = simulate(
        node_cluster(),
        [job("a", 300.0, truth, 610.0)],
        Script({610.0: start("a")}),
        noise_sigma=0.0,
        truth_oracle=truth,
    )
    assert res.jobs[0]["start_s"] == pytest.approx(730.0)
    assert res.metrics["off_energy_j"] == 0.0


def test_cycles_are_counted_per_node_with_the_shortest_time_between_two(truth: Truth) -> None:
    """Down at 600 s, up for a job at 1000 s, down again SuspendTime after the job ends: two cycles,
    the gap between the two power-downs recorded."""
    j = job("a", 200.0, truth, 1000.0)
    res = simulate(
        node_cluster(),
        [j],
        Script({1000.0: start("a")}),
        noise_sigma=0.0,
        truth_oracle=truth,
        horizon_s=3000.0,
    )
    end = res.jobs[0]["end_s"]
    assert res.metrics["power_cycles"] == 2
    assert res.metrics["min_cycle_gap_s"] == pytest.approx(end + 600.0 - 600.0)
    assert res.nodes[0]["power_cycles"] == 2


def test_energies_add_up_to_the_ledger_total_and_the_power_integral(truth: Truth) -> None:
    """busy + idle + off + cycle = energy_j = the integral of the power series, with nodes cycling."""
    jobs = [job("a", 400.0, truth, 1000.0), job("b", 900.0, truth, 1000.0), job("c", 300.0, truth, 2500.0)]
    policy = Script(
        {
            1000.0: lambda s: Decision(
                starts=(StartJob("a", "h0", 1, BATCH, GPU), StartJob("b", "h1", 1, BATCH, GPU))
            ),
            2500.0: start("c", "h2"),
        }
    )
    res = simulate(node_cluster(n=3), jobs, policy, noise_sigma=0.0, truth_oracle=truth, horizon_s=5000.0)
    m = res.metrics
    assert m["power_cycles"] >= 3 and m["off_energy_j"] > 0 and m["cycle_energy_j"] > 0
    assert parts_j(m) == pytest.approx(m["energy_j"])
    assert integral_j(res) == pytest.approx(m["energy_j"])


def test_without_power_saving_energy_is_the_old_one_plus_the_node_base_power(truth: Truth) -> None:
    """Nodes always on: same schedule and busy energy as nodes without base power, and the idle energy
    grows by exactly base power x nodes x span; no off or cycle energy."""
    jobs = [job("a", 400.0, truth, 0.0), job("b", 900.0, truth, 50.0)]

    def run(base_w: float) -> Any:
        nodes = tuple(NodeSpec(f"h{i}", GPU, 1, "none", base_w, 0.0) for i in range(2))
        policy = Script({0.0: start("a"), 50.0: start("b", "h1")})
        return simulate(
            ClusterSpec(nodes, "two"), jobs, policy, noise_sigma=0.0, truth_oracle=truth, horizon_s=2000.0
        )

    bare, based = run(0.0), run(BASE_W)
    assert based.jobs == bare.jobs
    assert based.metrics["busy_energy_j"] == pytest.approx(bare.metrics["busy_energy_j"])
    assert based.metrics["idle_energy_j"] - bare.metrics["idle_energy_j"] == pytest.approx(
        BASE_W * 2 * 2000.0
    )
    assert (
        based.metrics["off_energy_j"] == based.metrics["cycle_energy_j"] == based.metrics["power_cycles"] == 0
    )
    assert based.metrics["max_power_w"] == pytest.approx(bare.metrics["max_power_w"])  # the GPUs' own


def test_a_node_without_idle_w_gets_the_default_for_its_gpu_count() -> None:
    """The default base power depends on GPUs per node (model/node_power.py) and counts in the cluster's."""
    cluster = ClusterSpec.default()
    assert cluster.base_w == pytest.approx(2 * default_idle_w(8))
    assert default_idle_w(1) <= default_idle_w(4) <= default_idle_w(8)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_runs_with_power_saving_and_loses_no_job(policy: str) -> None:
    """Every registered policy sees powered-down nodes as free GPUs and every job it starts finishes:
    a quiet hour (nodes go down between jobs) then the run goes on until no job is left."""
    seen, real = make_oracles(0.1, 3)
    truth = Truth(real)
    cluster = dataclasses.replace(
        ClusterSpec.default().resolved(real.catalogue), power_saving=PowerSaving(suspend_time_s=120.0)
    )
    settings = dataclasses.replace(get_scenario("B").workload, load_jobs_per_h=4.0)
    jobs = list(
        poisson_jobs(
            settings,
            truth,
            {"a100-40gb": 8, "h100-sxm": 8},
            seed=3,
            horizon_s=3600.0,
            nodes_per_type={"a100-40gb": 1, "h100-sxm": 1},
        )
    )
    res = simulate(cluster, jobs, get_policy(policy), seed=3, oracle=seen, truth_oracle=truth)
    m = res.metrics
    assert m["completed_jobs"] == len(jobs) > 0
    assert m["power_cycles"] >= 1 and m["resume_waits"] >= 1
    assert parts_j(m) == pytest.approx(m["energy_j"])


def test_power_saving_flag_reaches_a_scenario_run() -> None:
    """`SimSpec.power_saving` (the --suspend-time flag, a plan's power_saving) turns it on for the run."""
    spec = SimSpec(
        policy="zeus",
        scenario="B",
        seed=0,
        hours=1.0,
        load_jobs_per_h=2.0,
        power_saving=(("suspend_time_s", 60.0),),
    )
    m = run_simulation(spec).metrics
    assert m["suspend_time_s"] == 60.0 and m["power_cycles"] >= 1
    assert parts_j(m) == pytest.approx(m["energy_j"])


def test_a_node_measured_below_the_default_off_power_draws_at_most_its_idle_power_off() -> None:
    """Only idle_w given, below the default off power: off power is the idle power, not an error."""
    cluster = ClusterSpec.from_dict({"nodes": [{"gpu_type": "a100-40gb", "gpus": 8, "idle_w": 10}]})
    (node,) = cluster.nodes
    assert node.base_w == 10.0 and node.powered_off_w == 10.0
