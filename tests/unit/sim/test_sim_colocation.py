"""Two jobs on one GPU in the simulator: rates on join and leave, the shared power, preemption, YAML keys."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from easlurm.errors import ConfigError
from easlurm.model import Oracle
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.sim.cluster import ClusterSpec, NodeSpec
from easlurm.sim.engine import Truth
from easlurm.sim.job import JobSpec
from easlurm.sim.jobs_yaml import load_jobs
from easlurm.sim.runner import SimSpec, run_simulation, simulate

GPU = "h100-sxm"
BATCH = 16


class Script:
    """A policy that does what it is told at given instants and logs (time, what) tuples."""

    name = "script"
    time_sensitive = False

    def __init__(
        self,
        actions: dict[float, Callable[[ClusterSnapshot], Decision]],
        otherwise: Callable[[ClusterSnapshot], Decision] | None = None,
    ) -> None:
        self.actions = actions
        self.otherwise = otherwise
        self.log: list[tuple[float, str]] = []

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        act = self.actions.get(snapshot.time_s, self.otherwise)
        if act is None:
            return Decision()
        decision = act(snapshot)
        self.log.extend((snapshot.time_s, s.job_id) for s in decision.starts)
        self.log.extend((snapshot.time_s, "preempt " + j) for j in decision.preempt)
        return decision

    def wake_at_s(self, snapshot: ClusterSnapshot, oracle: Any) -> float | None:
        return None


def job(
    job_id: str, model: str, alone_s: float, truth: Truth, submit_s: float, share: bool = True
) -> JobSpec:
    """A one-GPU job sized to run `alone_s` seconds alone on one H100."""
    probe = JobSpec(job_id, "u", submit_s, model, 1, (BATCH,), (1,), malleable=False)
    sps = truth.rate(probe, 1, BATCH, GPU, None)[0]
    steps = round(alone_s * sps / BATCH)
    return JobSpec(job_id, "u", submit_s, model, steps, (BATCH,), (1,), malleable=False, shareable=share)


def start(job_id: str, node: str = "h0", with_: str | None = None) -> Callable[[ClusterSnapshot], Decision]:
    return lambda snap: Decision(starts=(StartJob(job_id, node, 1, BATCH, GPU, colocate_with=with_),))


def one_gpu(sharing: str = "time-slice") -> ClusterSpec:
    return ClusterSpec((NodeSpec("h0", GPU, 1, sharing),), "one")


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth(Oracle())


def rows(res: Any) -> dict[str, dict[str, Any]]:
    return {r["job_id"]: r for r in res.jobs}


def test_rates_change_on_join_and_back_on_leave_and_energy_adds_up(truth: Truth) -> None:
    """A runs alone, B joins its GPU at 100 s: both run at the rule's shared speeds until B ends, then A
    runs alone again with the work it has done. The GPU's power while shared is the rule's shared power,
    split between the two, so the jobs' energies add up to the power integral (nothing counted twice)."""
    a = job("a", "bert-base", 1000.0, truth, 0.0)
    b = job("b", "distilbert", 200.0, truth, 100.0)
    policy = Script({0.0: start("a"), 100.0: start("b", with_="a")})
    res = simulate(one_gpu(), [a, b], policy, noise_sigma=0.0, truth_oracle=truth)
    assert policy.log == [(0.0, "a"), (100.0, "b")]
    co = truth.corun(a, BATCH, b, BATCH, GPU, "time-slice")
    sps_a, p_a = truth.rate(a, 1, BATCH, GPU, None)
    sps_b, _ = truth.rate(b, 1, BATCH, GPU, None)
    t_b = 100.0 + b.total_samples / (sps_b * co.speed[1])
    done_a = 100.0 * sps_a + (t_b - 100.0) * sps_a * co.speed[0]
    t_a = t_b + (a.total_samples - done_a) / sps_a
    got = rows(res)
    assert got["b"]["end_s"] == pytest.approx(t_b)
    assert got["a"]["end_s"] == pytest.approx(t_a)
    assert got["b"]["shared_s"] == pytest.approx(t_b - 100.0)
    times, power = res.power_times_s, res.power_w - res.metrics["node_base_w"]  # the GPU's own power
    shared = power[(times >= 100.0) & (times < t_b)]
    assert shared.tolist() == pytest.approx([co.power_w])
    assert power[times == t_b][0] == pytest.approx(p_a)
    energy_a = p_a * (100.0 + t_a - t_b) + co.job_power_w(0) * (t_b - 100.0)
    assert got["a"]["energy_j"] == pytest.approx(energy_a)
    assert got["b"]["energy_j"] == pytest.approx(co.job_power_w(1) * (t_b - 100.0))
    integral = float(np.sum(res.power_w * np.diff(np.append(times, res.metrics["simulated_s"]))))
    assert got["a"]["energy_j"] + got["b"]["energy_j"] == pytest.approx(res.metrics["busy_energy_j"])
    assert integral == pytest.approx(res.metrics["energy_j"])
    assert res.metrics["simulated_s"] - t_a < 1.0  # old completion times, abandoned, do not extend the run
    assert res.metrics["colocated_jobs"] == 2
    # the shared GPU counts once: busy GPU-seconds are the run up to the last end
    assert res.metrics["util_h100_sxm"] * res.metrics["simulated_s"] == pytest.approx(t_a)


def test_preempting_one_partner_restores_the_other(truth: Truth) -> None:
    """B shares A's GPU from 100 s and is preempted at 300 s (no checkpoint: its work is lost): A goes back
    to its alone rate at 300 s, keeping the work done while shared; B's shared energy is wasted."""
    a = job("a", "bert-base", 1000.0, truth, 0.0)
    b = job("b", "vit-b16", 800.0, truth, 100.0)
    c = job("c", "resnet50", 50.0, truth, 300.0, share=False)  # an arrival that calls the policy at 300 s
    policy = Script(
        {0.0: start("a"), 100.0: start("b", with_="a"), 300.0: lambda s: Decision(preempt=("b",))}
    )
    res = simulate(one_gpu(), [a, b, c], policy, noise_sigma=0.0, truth_oracle=truth)
    assert policy.log == [(0.0, "a"), (100.0, "b"), (300.0, "preempt b")]
    co = truth.corun(a, BATCH, b, BATCH, GPU, "time-slice")
    sps_a, p_a = truth.rate(a, 1, BATCH, GPU, None)
    t_a = 300.0 + (a.total_samples - 100.0 * sps_a - 200.0 * sps_a * co.speed[0]) / sps_a
    got = rows(res)
    assert got["a"]["end_s"] == pytest.approx(t_a)
    assert got["b"]["end_s"] is None and got["b"]["preemptions"] == 1
    assert got["b"]["wasted_energy_j"] == pytest.approx(co.job_power_w(1) * 200.0)
    times, power = res.power_times_s, res.power_w - res.metrics["node_base_w"]  # the GPU's own power
    # A alone from 300 s to its end (which the engine reaches to within rounding of t_a)
    assert power[(times >= 300.0) & (times < t_a - 1e-6)].tolist() == pytest.approx([p_a])


def restart_on_free_gpu(snap: ClusterSnapshot) -> Decision:
    """Start the first waiting job alone when the GPU is free."""
    if snap.nodes[0].free_gpus and snap.pending:
        return start(snap.pending[0].job_id)(snap)
    return Decision()


def test_preempted_partner_keeps_the_work_of_its_last_checkpoint_at_the_shared_rate(truth: Truth) -> None:
    """B shares A's GPU from 100 s, checkpoints every 150 s and is preempted at 300 s: it keeps the work of
    its first 150 s, done at its shared speed, and finishes that much earlier when it runs again alone.
    Its wasted energy is its share of the GPU's power over the last 50 s."""
    a = job("a", "bert-base", 600.0, truth, 0.0)
    b = job("b", "vit-b16", 800.0, truth, 100.0)
    c = job("c", "resnet50", 50.0, truth, 300.0, share=False)
    policy = Script(
        {0.0: start("a"), 100.0: start("b", with_="a"), 300.0: lambda s: Decision(preempt=("b",))},
        otherwise=restart_on_free_gpu,
    )
    res = simulate(
        one_gpu(), [a, b, c], policy, noise_sigma=0.0, truth_oracle=truth, checkpoint_interval_s=150.0
    )
    co = truth.corun(a, BATCH, b, BATCH, GPU, "time-slice")
    sps_b, _ = truth.rate(b, 1, BATCH, GPU, None)
    got = rows(res)
    restart = next(t for t, what in policy.log if what == "b" and t > 300.0)
    kept = 150.0 * sps_b * co.speed[1]
    assert got["b"]["end_s"] == pytest.approx(restart + (b.total_samples - kept) / sps_b)
    assert got["b"]["wasted_energy_j"] == pytest.approx(co.job_power_w(1) * 50.0)
    assert got["b"]["preemptions"] == 1


@pytest.mark.parametrize(
    ("sharing", "b_share", "why"),
    [("none", True, "node does not share"), ("time-slice", False, "not shareable")],
)
def test_simulator_refuses_a_join_the_rules_forbid(
    truth: Truth, sharing: str, b_share: bool, why: str
) -> None:
    """A node without sharing, or a job that did not declare `share`, never holds two jobs on one GPU."""
    a = job("a", "bert-base", 300.0, truth, 0.0)
    b = job("b", "distilbert", 100.0, truth, 10.0, share=b_share)
    policy = Script({0.0: start("a"), 10.0: start("b", with_="a")})
    res = simulate(one_gpu(sharing), [a, b], policy, noise_sigma=0.0, truth_oracle=truth)
    assert res.metrics["rejected_starts"] == 1, why
    assert rows(res)["b"]["start_s"] is None
    assert res.metrics["colocated_jobs"] == 0


def test_other_policies_ignore_sharing_and_zeus_share_keeps_energy_exact() -> None:
    """On shared nodes only zeus-share co-locates; its jobs' energy plus idle energy is the power integral."""
    for policy in ("zeus", "pollux", "charon"):
        res = run_simulation(SimSpec(policy=policy, scenario="coloc-small", seed=1, hours=3.0))
        assert res.metrics["colocated_jobs"] == 0
    res = run_simulation(SimSpec(policy="zeus-share", scenario="coloc-small", seed=1, hours=3.0))
    assert res.metrics["colocated_jobs"] > 10
    end = res.metrics["simulated_s"]
    integral = float(np.sum(res.power_w * np.diff(np.append(res.power_times_s, end))))
    jobs_j = sum(r["energy_j"] for r in res.jobs)
    assert integral == pytest.approx(res.metrics["energy_j"])
    assert jobs_j == pytest.approx(res.metrics["busy_energy_j"])


def test_cluster_yaml_sharing_key() -> None:
    doc = {"nodes": [{"name": "h", "gpu_type": GPU, "gpus": 4, "count": 2, "sharing": "mps"}]}
    spec = ClusterSpec.from_dict(doc, "c.yaml")
    assert [n.sharing for n in spec.nodes] == ["mps", "mps"]
    assert ClusterSpec.from_dict({"nodes": [{"gpu_type": GPU, "gpus": 1}]}).nodes[0].sharing == "none"
    bad = {"nodes": [{"gpu_type": GPU, "gpus": 4, "sharing": "shard"}]}
    with pytest.raises(
        ConfigError, match=r"^c\.yaml: nodes\[0\]\.sharing: sharing must be one of none, time-slice, mps"
    ):
        ClusterSpec.from_dict(bad, "c.yaml")


def test_job_share_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match=r"^job j1: share must be true or false, got 'yes'$"):
        JobSpec("j1", "u", 0.0, "bert-base", 10, (16,), (1,), shareable="yes")  # type: ignore[arg-type]


def test_job_list_yaml_sets_share_and_runs(tmp_path: Path) -> None:
    """A job list with `share: true` on a one-GPU MPS node: zeus-share runs the two jobs together."""
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        "  - {id: a, model: bert-base, steps: 20000, batch: 16, share: true}\n"
        "  - {id: b, submit: 1min, model: distilbert, steps: 20000, batch: 16, share: true, deadline: 2h}\n"
    )
    specs = load_jobs(jobs)
    assert [(j.job_id, j.submit_s, j.shareable, j.urgent, j.deadline_s) for j in specs] == [
        ("a", 0.0, True, False, None),
        ("b", 60.0, True, True, 7260.0),
    ]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: h, gpu_type: h100-sxm, gpus: 1, sharing: mps}]\n")
    res = run_simulation(
        SimSpec(policy="zeus-share", hours=1.0, cluster=str(cluster), noise_sigma=0.0), specs
    )
    assert res.metrics["completed_jobs"] == 2 and res.metrics["colocated_jobs"] == 2
    # the same from the command line
    from easlurm.cli import main

    argv = ["sim", "run", "--policy", "zeus-share", "--job-list", str(jobs), "--cluster", str(cluster)]
    assert main([*argv, "--hours", "1", "--noise-sigma", "0", "--json"]) == 0


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{model: bert-base, steps: 10, batch: 16, share: yes please}",
            r"jobs\[0\]\.share: must be true or false",
        ),
        ("{model: bert-base, steps: 10, batch: 16, shared: true}", r"jobs\[0\]\.shared: unknown field"),
        ("{model: bert-base, steps: 0, batch: 16}", r"jobs\[0\]\.steps: must be an integer > 0"),
    ],
)
def test_job_list_yaml_errors_name_file_and_field(tmp_path: Path, entry: str, message: str) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text(f"jobs:\n  - {entry}\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_jobs(f)
    assert str(info.value).startswith(str(f)) and "\n" not in str(info.value)


def capped(job_id: str, limit_w: float, with_: str | None = None) -> Callable[[ClusterSnapshot], Decision]:
    return lambda snap: Decision(
        starts=(StartJob(job_id, "h0", 1, BATCH, GPU, power_limit_w=limit_w, colocate_with=with_),)
    )


def test_a_join_sets_the_shared_gpus_limit_and_the_host_gets_its_own_back(truth: Truth) -> None:
    """A runs alone at its own limit (300 W); B joins at 100 s with 245 W: the GPU has one limit, so the
    pair runs at the rule's co-run under 245 W (speeds against each job alone at the default limit) and
    draws exactly that. When B ends, A runs again at its own limit's rate."""
    a = job("a", "bert-base", 1000.0, truth, 0.0)
    b = job("b", "distilbert", 200.0, truth, 100.0)
    policy = Script({0.0: capped("a", 300.0), 100.0: capped("b", 245.0, with_="a")})
    res = simulate(one_gpu(), [a, b], policy, noise_sigma=0.0, truth_oracle=truth)
    co = truth.corun(a, BATCH, b, BATCH, GPU, "time-slice", 245.0)
    assert co.power_w == pytest.approx(245.0)
    sps_a, _ = truth.rate(a, 1, BATCH, GPU, None)
    own_a, p_own_a = truth.rate(a, 1, BATCH, GPU, 300.0)
    sps_b, _ = truth.rate(b, 1, BATCH, GPU, None)
    t_b = 100.0 + b.total_samples / (sps_b * co.speed[1])
    done_a = 100.0 * own_a + (t_b - 100.0) * sps_a * co.speed[0]
    t_a = t_b + (a.total_samples - done_a) / own_a
    got = rows(res)
    assert res.metrics["rejected_starts"] == 0
    assert (got["a"]["power_limit_w"], got["b"]["power_limit_w"]) == (300.0, 245.0)
    assert got["b"]["end_s"] == pytest.approx(t_b)
    assert got["a"]["end_s"] == pytest.approx(t_a)
    times, power = res.power_times_s, res.power_w - res.metrics["node_base_w"]
    assert power[(times >= 100.0) & (times < t_b)].tolist() == pytest.approx([245.0])
    assert power[times == t_b][0] == pytest.approx(p_own_a)


def test_a_joiner_keeps_the_shared_limit_once_its_host_has_left(truth: Truth) -> None:
    """The host ends first: the joiner runs on alone at the limit it set on the GPU (as the daemon leaves
    it: the host's step never restores a limit it did not set)."""
    a = job("a", "bert-base", 150.0, truth, 0.0)
    b = job("b", "distilbert", 1000.0, truth, 100.0)
    policy = Script({0.0: start("a"), 100.0: capped("b", 245.0, with_="a")})
    res = simulate(one_gpu(), [a, b], policy, noise_sigma=0.0, truth_oracle=truth)
    co = truth.corun(a, BATCH, b, BATCH, GPU, "time-slice", 245.0)
    sps_a, _ = truth.rate(a, 1, BATCH, GPU, None)
    sps_b, _ = truth.rate(b, 1, BATCH, GPU, None)
    own_b, p_own_b = truth.rate(b, 1, BATCH, GPU, 245.0)
    t_a = 100.0 + (a.total_samples - 100.0 * sps_a) / (sps_a * co.speed[0])
    t_b = t_a + (b.total_samples - (t_a - 100.0) * sps_b * co.speed[1]) / own_b
    got = rows(res)
    assert got["a"]["end_s"] == pytest.approx(t_a)
    assert got["b"]["end_s"] == pytest.approx(t_b)
    times, power = res.power_times_s, res.power_w - res.metrics["node_base_w"]
    assert power[(times >= t_a) & (times < t_b - 1e-6)].tolist() == pytest.approx([p_own_b])


def test_zeus_share_caps_shared_gpus_and_never_costs_energy_per_job_against_zeus() -> None:
    """coloc-small, 3 h: zeus-share caps what it shares (as Zeus caps jobs alone) and completes more jobs at
    no more energy per job than Zeus (idle and node base power included, same window)."""
    zeus = run_simulation(SimSpec(policy="zeus", scenario="coloc-small", seed=1, hours=3.0)).metrics
    res = run_simulation(SimSpec(policy="zeus-share", scenario="coloc-small", seed=1, hours=3.0))
    shared_limits = {r["power_limit_w"] for r in res.jobs if r["shared_s"] > 0}
    assert any(limit is not None for limit in shared_limits)
    assert res.metrics["completed_jobs"] >= zeus["completed_jobs"]
    assert res.metrics["energy_per_job_j"] <= zeus["energy_per_job_j"]
