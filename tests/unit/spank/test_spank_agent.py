"""The node agent: node records, bounded gathering on node 0, spool safety, AdminComment publication,
and the plugin's stop protocol; no Slurm, GPU or root needed (profiler and client are injected)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from easlurm.accounting.agent import (
    NodeAgent,
    StepContext,
    expand_hostlist,
    job_lock,
    leave_step_cgroup,
    node_name_from_list,
    publish_from_spool,
    watch_stop,
)
from easlurm.accounting.step_record import StepRecord, decode_admin_comment
from easlurm.energy.result import DeviceEnergy, ProfileResult
from easlurm.errors import EaslurmError, SlurmError

REPO = Path(__file__).resolve().parents[3]


class FakeProfiler:
    """Stands in for EnergyProfiler: constant power per GPU over a fixed window."""

    instances: list[FakeProfiler] = []  # noqa: RUF012

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.started = False
        FakeProfiler.instances.append(self)

    def start(self) -> None:
        self.started = True

    def stop(self) -> ProfileResult:
        gpus = self.kwargs["gpus"]
        devs = [
            DeviceEnergy(f"gpu{g}", "gpu", 300.0 * 2.0, 300.0, 300.0, 20, False, "nvml-energy") for g in gpus
        ]
        devs.append(DeviceEnergy("dram-0", "dram", 10.0, 5.0, 5.0, 20, True, "dram-model"))
        return ProfileResult(host="box", start_time=1.7e9, duration_s=2.0, devices=devs)


class BrokenProfiler(FakeProfiler):
    def start(self) -> None:
        raise RuntimeError("NVML exploded")


class FakeClient:
    def __init__(self, finished: bool = False) -> None:
        self.finished = finished
        self.published: list[tuple[str, int, str]] = []
        self.timeout_s = 60.0

    def set_admin_comment(self, job_id: int, text: str) -> None:
        if self.finished:
            raise SlurmError("scontrol failed: Job has already finished")
        self.published.append(("scontrol", job_id, text))

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        self.published.append(("sacctmgr", job_id, text))

    def show_job(self, job_id: int) -> dict[str, str]:
        return {"JobId": str(job_id), "AdminComment": self.published[-1][2] if self.published else ""}


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    d = tmp_path / "spool"
    d.mkdir(mode=0o755)
    return d


def ctx(spool: Path, node_id: int = 0, nnodes: int = 2, step: str = "0", **kw: Any) -> StepContext:
    base: dict[str, Any] = {"gid": os.getgid(), "timeout_s": 1.0, "spec": "all", "gpus": ["0", "1"]}
    base.update(kw)
    return StepContext(job_id=42, step=step, nnodes=nnodes, node_id=node_id, spool=spool, **base)


def run_node(c: StepContext, client: Any = None, factory: Any = FakeProfiler) -> StepRecord | None:
    agent = NodeAgent(c, client=client, profiler_factory=factory)
    agent.start()
    agent.request_stop(time.time())
    return agent.finish()


def test_two_nodes_meet_in_the_spool_and_node0_publishes(spool: Path) -> None:
    client = FakeClient()
    assert run_node(ctx(spool, node_id=1), client) is None  # other nodes only write their record
    assert client.published == []
    step = run_node(ctx(spool, node_id=0), client)
    assert step is not None and not step.partial
    assert [n.node_id for n in step.nodes] == [0, 1]
    assert step.gpu_energy_j == pytest.approx(2 * 2 * 600.0)
    on_disk = StepRecord.from_dict(json.loads((spool / "42" / "step-0.json").read_text()))
    assert on_disk.to_dict() == step.to_dict()
    ((how, job, text),) = client.published
    assert how == "scontrol" and job == 42
    assert [s.to_dict() for s in decode_admin_comment(text)] == [step.to_dict()]


def test_profiler_gets_only_the_step_gpus_and_spec(spool: Path) -> None:
    FakeProfiler.instances.clear()
    run_node(ctx(spool, nnodes=1, spec="gpu,interval=250ms", gpus=["3", "5"]), FakeClient())
    kw = FakeProfiler.instances[-1].kwargs
    assert kw["gpus"] == ["3", "5"] and kw["devices"] == "gpu" and kw["interval_s"] == pytest.approx(0.25)
    run_node(ctx(spool, nnodes=1, step="1", gpus=None), FakeClient())
    assert FakeProfiler.instances[-1].kwargs["gpus"] == []  # no GRES: no GPU is measured


def test_missing_node_makes_a_partial_record_within_the_bound(spool: Path) -> None:
    client = FakeClient()
    t0 = time.monotonic()
    step = run_node(ctx(spool, node_id=0, nnodes=3, timeout_s=0.4), client)
    assert time.monotonic() - t0 < 1.0
    assert step is not None and step.partial and step.missing_nodes == [1, 2]
    assert decode_admin_comment(client.published[0][2])[0].missing_nodes == [1, 2]


def test_profiler_failure_is_flagged_not_raised(spool: Path) -> None:
    client = FakeClient()
    step = run_node(ctx(spool, nnodes=1), client, factory=BrokenProfiler)
    assert step is not None and step.partial
    assert "NVML exploded" in (step.nodes[0].error or "")
    assert step.total_energy_j is None
    assert client.published


def test_each_publication_carries_every_step_of_the_job(spool: Path) -> None:
    client = FakeClient()
    run_node(ctx(spool, nnodes=1, step="0"), client)
    run_node(ctx(spool, nnodes=1, step="1"), client)
    run_node(ctx(spool, nnodes=5, step="batch"), client)  # batch: one node whatever the job size
    last = decode_admin_comment(client.published[-1][2])
    assert sorted(s.step for s in last) == ["0", "1", "batch"]
    assert not any(s.partial for s in last)


def test_finished_job_goes_to_the_database(spool: Path) -> None:
    client = FakeClient(finished=True)
    run_node(ctx(spool, nnodes=1), client)
    assert [p[0] for p in client.published] == ["sacctmgr"]


def test_a_late_node_fills_itself_into_the_partial_step_record(spool: Path) -> None:
    """Node 0 gave up waiting for node 1 (overloaded); node 1's record, when it comes, is added and
    republished, so the step ends up complete instead of partial for good."""
    client = FakeClient()
    early = run_node(ctx(spool, node_id=0, timeout_s=0.2), client)
    assert early is not None and early.missing_nodes == [1]
    assert run_node(ctx(spool, node_id=1, timeout_s=0.2), client) is None
    on_disk = StepRecord.from_dict(json.loads((spool / "42" / "step-0.json").read_text()))
    assert not on_disk.partial and [n.node_id for n in on_disk.nodes] == [0, 1]
    (last,) = decode_admin_comment(client.published[-1][2])
    assert not last.partial and last.gpu_energy_j == pytest.approx(2 * 2 * 600.0)
    assert len(client.published) == 2


def test_a_node_on_time_publishes_nothing_itself(spool: Path) -> None:
    client = FakeClient()
    run_node(ctx(spool, node_id=1), client)
    run_node(ctx(spool, node_id=0), client)
    run_node(ctx(spool, node_id=1), client)  # record again after node 0 had it: nothing to add
    assert len(client.published) == 1


def test_steps_ending_together_share_one_publication(spool: Path) -> None:
    """Step files written while another agent held the lock: the first publisher carries them all, and
    the others find their file already published instead of calling scontrol once each."""
    for step in "01234":
        run_node(ctx(spool, nnodes=1, step=step))  # records written, nothing published yet
    client = FakeClient()
    for step in "01234":
        assert publish_from_spool(ctx(spool, nnodes=1, step=step), client)
    assert len(client.published) == 1
    assert sorted(s.step for s in decode_admin_comment(client.published[0][2])) == list("01234")
    run_node(ctx(spool, nnodes=1, step="2"), client)  # a changed file is published again
    assert len(client.published) == 2


def test_a_failed_publication_is_retried_by_the_next_agent(spool: Path) -> None:
    run_node(ctx(spool, nnodes=1, step="0"))
    broken = FakeClient()
    broken.set_admin_comment = lambda *_: (_ for _ in ()).throw(SlurmError("slurmctld unreachable"))  # type: ignore[method-assign]
    assert not publish_from_spool(ctx(spool, nnodes=1, step="0"), broken)
    client = FakeClient()
    assert publish_from_spool(ctx(spool, nnodes=1, step="0"), client)
    assert len(client.published) == 1


def test_a_held_lock_keeps_the_record_and_never_publishes_unlocked(spool: Path) -> None:
    """Publishing without the lock could overwrite a newer document with an older one: the agent keeps
    its step file for `easlurm accounting republish` instead."""
    client = FakeClient()
    (spool / "42").mkdir(mode=0o750)
    with job_lock(spool / "42", 1.0) as locked:
        assert locked
        step = run_node(ctx(spool, nnodes=1, late_limit_s=0.3), client)
    assert step is not None and client.published == []
    assert (
        StepRecord.from_dict(json.loads((spool / "42" / "step-0.json").read_text())).to_dict()
        == step.to_dict()
    )


def test_unsafe_spool_is_not_used_but_records_are_still_published(spool: Path) -> None:
    """Without a spool, each step merges into what slurmctld already holds for the job."""
    spool.chmod(0o777)
    client = FakeClient()
    step = run_node(ctx(spool, nnodes=1), client)
    assert step is not None and step.nodes[0].total_energy_j is not None
    run_node(ctx(spool, nnodes=1, step="batch"), client)
    assert not (spool / "42").exists()
    assert sorted(s.step for s in decode_admin_comment(client.published[-1][2])) == ["0", "batch"]


def test_symlinked_job_dir_is_refused(spool: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    (spool / "42").symlink_to(elsewhere)
    run_node(ctx(spool, nnodes=1), FakeClient())
    assert list(elsewhere.iterdir()) == []


def test_records_are_not_writable_by_others(spool: Path) -> None:
    run_node(ctx(spool, nnodes=1), FakeClient())
    for p in (
        spool / "42",
        spool / "42" / "0",
        spool / "42" / "step-0.json",
        spool / "42" / "0" / "node-0.json",
    ):
        assert p.stat().st_mode & 0o022 == 0, p


@pytest.mark.parametrize("bad", [{"step": "../x"}, {"step": "extern"}, {"node_id": 2}, {"node_name": "a b"}])
def test_context_rejects_bad_ids(spool: Path, bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"node_id": 0, "nnodes": 2, "step": "0"}
    args.update(bad)
    with pytest.raises(EaslurmError):
        StepContext(job_id=1, spool=spool, **args)


def test_stop_line_carries_the_stop_time(spool: Path) -> None:
    agent = NodeAgent(ctx(spool, nnodes=1))
    watch_stop(io.BytesIO(b"noise\nstop 1700000000.5\n"), agent)
    assert agent.wait(0) and agent.stop_time == pytest.approx(1700000000.5)
    other = NodeAgent(ctx(spool, nnodes=1))
    watch_stop(io.BytesIO(b""), other)  # plugin gone: EOF alone stops
    assert other.wait(0) and other.stop_time is None


def test_hostlist_expansion() -> None:
    assert expand_hostlist("a100-[1-2,5],cpu-1") == ["a100-1", "a100-2", "a100-5", "cpu-1"]
    assert expand_hostlist("gpu[08-10]") == ["gpu08", "gpu09", "gpu10"]
    assert node_name_from_list("h100-[1-2]", 1) == "h100-2"
    assert node_name_from_list("h100-[1-2]", 5) is None
    assert node_name_from_list(None, 0) is None


def test_agent_process_end_to_end_with_fake_nvml(spool: Path) -> None:
    """The agent as the plugin runs it: argv, stop line on stdin, fake NVML at 250 W per GPU."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'tests' / 'fakes'}",
        "EASLURM_PROFILER__NVML_MODULE": "easlurm_fakes.fake_nvml",
        "EASLURM_PROFILER__POWERCAP_ROOT": str(spool / "no-powercap"),
        "EASLURM_FAKE_NVML_COUNT": "4",
        "EASLURM_FAKE_NVML_POWER_W": "250",
        "SLURM_CONF": "/nonexistent/slurm.conf",  # scontrol then takes ~60 s to fail
        "EASLURM_SPANK__LATE_LIMIT_S": "4",  # so this bounds the publication attempt
        "HOME": str(spool),
    }
    argv = [
        sys.executable,
        "-m",
        "easlurm.accounting.agent",
        "--job",
        "7",
        "--step",
        "3",
        "--nnodes",
        "1",
        "--node-id",
        "0",
        "--gid",
        str(os.getgid()),
        "--spool",
        str(spool),
        "--timeout-ms",
        "3000",
        "--step-start",
        str(time.time()),
        "--spec=gpu,interval=50ms",
        "--gpus",
        "1,2",
        "--nodelist",
        "a100-[1-2]",
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    time.sleep(2.0)
    assert proc.stdin is not None
    proc.stdin.write(f"stop {time.time()}\n".encode())
    proc.stdin.close()
    proc.wait(timeout=30)
    assert proc.stderr is not None
    err = proc.stderr.read()
    step = StepRecord.from_dict(json.loads((spool / "7" / "step-3.json").read_text()))
    # slurmctld is unreachable here: the failed publication is in the agent's log next to its record
    assert "cannot publish AdminComment" in (spool / "7" / "3" / "node-0.log").read_text()
    node = step.nodes[0]
    assert node.host == "a100-1"
    assert sorted(d.name for d in node.devices) == ["gpu1", "gpu2"]
    assert node.duration_s is not None
    for dev in node.devices:
        assert dev.energy_j is not None and dev.mean_power_w == pytest.approx(250.0, rel=0.01)
        # the device's window (first to last counter read) covers most of the step, however loaded the
        # machine is when the agent starts, and its energy is the fake's power over that window
        assert (
            dev.duration_s is not None and 0.7 * node.duration_s <= dev.duration_s <= node.duration_s + 0.05
        )
        assert dev.energy_j == pytest.approx(250.0 * dev.duration_s, rel=0.01)
    assert step.gpu_energy_j == pytest.approx(sum(d.energy_j or 0.0 for d in node.devices))
    assert b"cannot publish AdminComment" in err  # no Slurm here: logged on stderr for the plugin


def test_agent_leaves_the_step_cgroup_v2_that_proctrack_kills(tmp_path: Path) -> None:
    """cgroup v2 + proctrack/cgroup: the agent moves itself to slurmstepd's `system` leaf (a fake
    cgroupfs here: the same paths, cgroup.procs takes a pid)."""
    scope = "/system.slice/slurmstepd.scope"
    root = tmp_path / "cgroup"
    (root / scope.lstrip("/") / "system").mkdir(parents=True)
    (root / scope.lstrip("/") / "system" / "cgroup.procs").write_text("")
    proc = tmp_path / "proc-cgroup"
    proc.write_text(f"0::{scope}/job_42/step_0/slurm\n")
    moved = leave_step_cgroup(42, proc, root)
    assert moved == root / scope.lstrip("/") / "system"
    assert (moved / "cgroup.procs").read_text().strip() == str(os.getpid())
    proc.write_text(f"0::{scope}/job_7/step_batch/slurm\n")  # another job's cgroup is never touched
    assert leave_step_cgroup(42, proc, root) is None
    proc.write_text("12:freezer:/slurm/uid_0/job_42/step_0\n0::/\n")  # v1: proctrack spares the agent
    assert leave_step_cgroup(42, proc, root) is None
    proc.write_text(f"0::{scope}/job_42/step_0/slurm\n")
    assert leave_step_cgroup(42, proc, tmp_path / "nowhere") is None  # cannot move: stays, logged


class StubWatcher:
    """Stands in for easlurm.energy.gpu_share.ShareWatcher: GPU 1 was shared, a third of it ours."""

    fail = False

    def __init__(self, gpus: list[int], own_root: int | None, module: str) -> None:
        self.gpus = gpus

    def start(self) -> bool:
        return True

    def stop(self) -> dict[int, Any]:
        from easlurm.energy.gpu_share import GpuShare

        if self.fail:
            raise RuntimeError("NVML went away")
        return {1: GpuShare(1, total_j=900.0, own_j=300.0, others={"job7"}, by_utilisation_j=900.0)}


def test_a_shared_gpu_is_apportioned_in_the_record(spool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 1 shared with job 7: the record keeps a third of it, flagged; GPU 0 (not shared) stays whole."""
    import easlurm.energy.gpu_share as gpu_share

    monkeypatch.setattr(gpu_share, "ShareWatcher", StubWatcher)
    step = run_node(ctx(spool, nnodes=1, shards=2), FakeClient())
    assert step is not None and not step.partial
    devs = {d.name: d for d in step.nodes[0].devices}
    assert devs["gpu0"].energy_j == pytest.approx(600.0) and devs["gpu0"].apportioned is None
    assert devs["gpu1"].energy_j == pytest.approx(200.0) and devs["gpu1"].apportioned == "utilisation"
    assert devs["gpu1"].whole_gpu_energy_j == pytest.approx(600.0)
    assert step.apportioned_devices == ["gpu1:utilisation"]
    StubWatcher.fail = True
    try:
        step = run_node(ctx(spool, nnodes=1, step="1"), FakeClient())
    finally:
        StubWatcher.fail = False
    assert step is not None and not step.partial and step.gpu_energy_j == pytest.approx(1200.0)


def test_only_a_step_on_shards_watches_its_gpus(spool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step with whole GPUs (no gres/shard) never meets another job there: no watcher, no NVML calls
    for it, its GPUs' energy whole."""
    import easlurm.energy.gpu_share as gpu_share

    started: list[list[int]] = []

    class Recording(StubWatcher):
        def start(self) -> bool:
            started.append(self.gpus)
            return True

    monkeypatch.setattr(gpu_share, "ShareWatcher", Recording)
    step = run_node(ctx(spool, nnodes=1), FakeClient())
    assert step is not None and started == [] and step.apportioned_devices == []
    step = run_node(ctx(spool, nnodes=1, step="1", shards=1), FakeClient())
    assert step is not None and started == [[0, 1]] and step.apportioned_devices == ["gpu1:utilisation"]
