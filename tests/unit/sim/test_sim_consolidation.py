"""The simulator tells policies each node's power state (on, powering down, off, powering up), when it was
powered down and since when it is idle; consolidation changes nothing without power saving."""

from __future__ import annotations

from typing import Any

import pytest

from easlurm.cli import main
from easlurm.model import Oracle
from easlurm.model.node_power import PowerSaving
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.sim.cluster import ClusterSpec, NodeSpec
from easlurm.sim.engine import Truth
from easlurm.sim.job import JobSpec
from easlurm.sim.runner import SimSpec, run_simulation, simulate

GPU = "h100-sxm"
SAVING = PowerSaving(suspend_time_s=600.0, resume_timeout_s=300.0, suspend_timeout_s=30.0, boot_s=100.0)


class Recorder:
    """Starts job "a" on h0 at 1000 s and logs (time, node, power state, idle since, powered down at)."""

    name = "recorder"
    time_sensitive = False

    def __init__(self) -> None:
        self.log: list[tuple[float, str, str, float | None, float | None]] = []

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        for n in snapshot.nodes:
            self.log.append((snapshot.time_s, n.name, n.power_state, n.idle_since_s, n.powered_down_s))
        if snapshot.time_s == 1000.0:
            return Decision(starts=(StartJob("a", "h0", 1, 16, GPU),))
        return Decision()


def test_the_snapshot_carries_each_nodes_power_state() -> None:
    """Both nodes idle since 0 s are powered down at 600 s (off from 630 s); at 1000 s the policy sees
    them off, powered down at 600 s, and its job's node boots ("powering_up") while the other stays off."""
    truth = Truth(Oracle())
    nodes = tuple(NodeSpec(f"h{i}", GPU, 1, "none", 200.0, 20.0) for i in range(2))
    jobs = [
        JobSpec("a", "u", 1000.0, "resnet50", 5000, (16,), (1,), malleable=False),
        JobSpec("b", "u", 1050.0, "resnet50", 5000, (16,), (1,), malleable=False),
    ]
    policy = Recorder()
    simulate(ClusterSpec(nodes, "two", SAVING), jobs, policy, noise_sigma=0.0, truth_oracle=truth)
    assert (1000.0, "h0", "off", None, 600.0) in policy.log
    assert (1050.0, "h0", "powering_up", None, 600.0) in policy.log
    assert (1050.0, "h1", "off", None, 600.0) in policy.log


def test_without_power_saving_the_snapshot_says_on_and_idle_since() -> None:
    truth = Truth(Oracle())
    nodes = (NodeSpec("h0", GPU, 1, "none", 200.0, 20.0),)
    jobs = [JobSpec("a", "u", 1000.0, "resnet50", 5000, (16,), (1,), malleable=False)]
    policy = Recorder()
    simulate(ClusterSpec(nodes, "one", None), jobs, policy, noise_sigma=0.0, truth_oracle=truth)
    assert (1000.0, "h0", "on", 0.0, None) in policy.log


def _metrics(**kw: Any) -> dict[str, float]:
    spec = SimSpec(policy="zeus", scenario="B", seed=1, hours=2.0, load_jobs_per_h=8.0, **kw)
    return run_simulation(spec).metrics


def test_consolidation_changes_nothing_without_power_saving() -> None:
    on = _metrics()
    off = _metrics(policy_params=(("consolidate", False),))
    for key in ("energy_j", "mean_jct_s", "completed_jobs"):
        assert on[key] == pytest.approx(off[key]), key


@pytest.mark.parametrize(
    "param", ["consolidation_slack=-1", "min_off_s=-5", "max_wake_wait_s=-1", "consolidate=maybe"]
)
def test_a_bad_consolidation_setting_is_one_line_and_exit_2(
    param: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["sim", "run", "--policy", "zeus", "--hours", "0.5", "--param", param])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and param.split("=")[0] in err


def test_a_bad_sched_setting_in_a_config_file_is_exit_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sched:\n  min_off_s: -10\n")
    rc = main(["-c", str(cfg), "sim", "run", "--policy", "zeus", "--hours", "0.5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "sched.min_off_s" in err
