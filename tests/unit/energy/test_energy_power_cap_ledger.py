"""A job's power cap on a node is owned by its steps there: the first sets it, the last to end restores
it, a dead step's reference is dropped, and a crash is repaired with no next job (the agent's start,
`easlurm power restore-caps`). Every limit change is in the fake NVML's log, so each test checks the
cap held for the job's whole life: one cap and one restore per GPU, nothing between."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from easlurm_fakes import fake_nvml

from easlurm import cli
from easlurm.energy.power_limits import (
    LEDGER_DIR,
    Ledger,
    StepCap,
    StepRef,
    apply_limit,
    ledger_path,
    proc_start,
    read_ledger,
    restore_stale,
    this_host,
)

FAKE = "easlurm_fakes.fake_nvml"


@pytest.fixture
def gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """4 fake GPUs (limits 100-700 W, default 700 W) whose limits live in a file, as a driver's outlive a
    process; every change is logged beside it."""
    limits = tmp_path / "limits.json"
    monkeypatch.setenv("EASLURM_FAKE_NVML_COUNT", "4")
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMITS_FILE", str(limits))
    fake_nvml.nvmlInit()
    yield limits
    # the killed agents never shut NVML down: forget their handles with the test
    fake_nvml._state, fake_nvml._init_count = None, 0


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Stand-ins for node agents: real processes (their PIDs live and die as an agent's would)."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def agent(procs: list[subprocess.Popen[bytes]]) -> int:
    procs.append(subprocess.Popen(["sleep", "600"]))
    return procs[-1].pid


def kill(procs: list[subprocess.Popen[bytes]], pid: int) -> None:
    proc = next(p for p in procs if p.pid == pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def limits_w() -> list[float]:
    return [
        fake_nvml.nvmlDeviceGetPowerManagementLimit(fake_nvml.nvmlDeviceGetHandleByIndex(i)) / 1000
        for i in range(4)
    ]


def sched_env(spool: Path, job: int, limit_w: float) -> None:
    (spool / "sched").mkdir(parents=True, exist_ok=True)
    (spool / "sched" / f"job-{job}.env").write_text(f"EASLURM_POWER_LIMIT_W={limit_w:g}\n")


def as_agent(monkeypatch: pytest.MonkeyPatch, pid: int, call: object) -> None:
    """Run a StepCap hook as the agent whose PID is `pid` (each step's agent is its own process)."""
    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: pid)
        call()  # type: ignore[operator]


def history(index: int) -> list[tuple[int, int]]:
    """(pid, mW) of every limit set on GPU `index`, in order."""
    return [(e["pid"], e["to_mw"]) for e in fake_nvml.limit_log() if e["index"] == index]


def test_fake_nvml_logs_every_limit_set(gpus: Path) -> None:
    h = fake_nvml.nvmlDeviceGetHandleByIndex(2)
    fake_nvml.nvmlDeviceSetPowerManagementLimit(h, 300_000)
    fake_nvml.nvmlDeviceSetPowerManagementLimit(h, 700_000)
    with pytest.raises(fake_nvml.NVMLError):
        fake_nvml.nvmlDeviceSetPowerManagementLimit(h, 5)  # refused: not a change, not logged
    log = [json.loads(line) for line in Path(f"{gpus}.log").read_text().splitlines()]
    assert [(e["index"], e["from_mw"], e["to_mw"], e["pid"]) for e in log] == [
        (2, 700_000, 300_000, os.getpid()),
        (2, 300_000, 700_000, os.getpid()),
    ]
    assert fake_nvml.limit_log() == log


def test_the_cap_holds_until_the_jobs_last_step_on_the_node_ends(
    gpus: Path, tmp_path: Path, agents: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 26.05 failure: the srun step's agent capped first (the batch agent's Python starts later),
    then restored the default at its end while the batch step ran on."""
    spool = tmp_path / "spool"
    sched_env(spool, 40, 250)
    batch_pid, srun_pid, srun2_pid = agent(agents), agent(agents), agent(agents)
    srun = StepCap(spool, 40, "0", "h100-1", [0], FAKE)
    batch = StepCap(spool, 40, "batch", "h100-1", [0, 1], FAKE)
    srun2 = StepCap(spool, 40, "1", "h100-1", [1], FAKE)
    as_agent(monkeypatch, srun_pid, srun.start)
    as_agent(monkeypatch, batch_pid, batch.start)
    as_agent(monkeypatch, srun2_pid, srun2.start)
    assert limits_w() == [250.0, 250.0, 700.0, 700.0]
    ledger = read_ledger(ledger_path(spool, 40, "h100-1"))
    assert ledger is not None and [r.step for r in ledger.refs] == ["0", "batch", "1"]
    assert ledger.host == this_host() and ledger.refs[0].started == proc_start(srun_pid)
    as_agent(monkeypatch, srun_pid, srun.end)
    as_agent(monkeypatch, srun2_pid, srun2.end)
    assert limits_w() == [250.0, 250.0, 700.0, 700.0]  # the batch step still runs: still capped
    as_agent(monkeypatch, batch_pid, batch.end)
    assert limits_w() == [700.0] * 4 and not list((spool / LEDGER_DIR).glob("*.json"))
    # one cap and one restore per GPU, by the first step in and the last out
    assert history(0) == [(srun_pid, 250_000), (batch_pid, 700_000)]
    assert history(1) == [(batch_pid, 250_000), (batch_pid, 700_000)]
    assert srun.outcome == batch.outcome == srun2.outcome
    assert batch.outcome is not None and batch.outcome.applied_w == 250.0


def test_a_dead_steps_reference_is_dropped(
    gpus: Path, tmp_path: Path, agents: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The srun step's agent capped first and was killed: its reference no longer holds the cap, so the
    batch step, the last live one, restores at its end."""
    spool = tmp_path / "spool"
    sched_env(spool, 41, 300)
    srun_pid, batch_pid = agent(agents), agent(agents)
    srun = StepCap(spool, 41, "0", "n", [0, 1], FAKE)
    batch = StepCap(spool, 41, "batch", "n", [0, 1], FAKE)
    as_agent(monkeypatch, srun_pid, srun.start)
    as_agent(monkeypatch, batch_pid, batch.start)
    kill(agents, srun_pid)
    assert restore_stale(fake_nvml, spool) == []  # a live step holds it: the repair leaves it
    assert limits_w()[:2] == [300.0, 300.0]
    as_agent(monkeypatch, batch_pid, batch.end)
    assert limits_w() == [700.0] * 4 and not list((spool / LEDGER_DIR).glob("*.json"))
    assert history(0) == [(srun_pid, 300_000), (batch_pid, 700_000)]


def test_a_reused_pid_is_not_the_agent(gpus: Path, tmp_path: Path) -> None:
    """A reference whose PID now belongs to another process (its start time differs) is a dead one."""
    spool = tmp_path / "spool"
    spool.mkdir()
    mine = StepRef(os.getpid(), "0", proc_start(os.getpid()))
    reused = StepRef(os.getpid(), "0", "1")  # this PID, but a process started at boot
    apply_limit(fake_nvml, [0], 300.0, ledger_path(spool, 42, "n"), Ledger(42, "n", this_host(), [mine]))
    apply_limit(fake_nvml, [1], 300.0, ledger_path(spool, 43, "n"), Ledger(43, "n", this_host(), [reused]))
    assert [p.name for p in restore_stale(fake_nvml, spool)] == ["43.n.json"]
    assert limits_w()[:2] == [300.0, 700.0]


def test_another_hosts_ledger_is_left_to_that_host(gpus: Path, tmp_path: Path) -> None:
    """A spool shared between nodes: a PID means something only on the host that wrote it, and the GPU
    indices are that node's."""
    spool = tmp_path / "spool"
    spool.mkdir()
    theirs = Ledger(44, "other", "other-host", [StepRef(2**22 + 5, "0")])
    apply_limit(fake_nvml, [0], 300.0, ledger_path(spool, 44, "other"), theirs)
    assert restore_stale(fake_nvml, spool) == []
    assert limits_w()[0] == 300.0 and ledger_path(spool, 44, "other").exists()
    assert restore_stale(fake_nvml, spool, host="other-host") == [ledger_path(spool, 44, "other")]


def test_a_ledger_from_before_references_is_restored(gpus: Path, tmp_path: Path) -> None:
    """A per-step ledger an older agent left (`pid`, `step`, no host) is still repaired."""
    spool = tmp_path / "spool"
    (spool / LEDGER_DIR).mkdir(parents=True)
    fake_nvml.nvmlDeviceSetPowerManagementLimit(fake_nvml.nvmlDeviceGetHandleByIndex(3), 200_000)
    old = {"job_id": 7, "step": "0", "node": "n", "pid": 2**22 + 9, "changes": [[3, 700_000, 200_000]]}
    old["changes"] = [{"index": 3, "previous_mw": 700_000, "set_mw": 200_000}]
    (spool / LEDGER_DIR / "7.0.n.json").write_text(json.dumps(old))
    assert [p.name for p in restore_stale(fake_nvml, spool)] == ["7.0.n.json"]
    assert limits_w()[3] == 700.0


def crashed_job(spool: Path, agents: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch) -> int:
    """Job 45's two steps capped GPUs 0 and 1 at 200 W; both agents were killed (node crash, OOM)."""
    sched_env(spool, 45, 200)
    pids = [agent(agents), agent(agents)]
    for pid, step in zip(pids, ("batch", "0"), strict=True):
        as_agent(monkeypatch, pid, StepCap(spool, 45, step, "n", [0, 1], FAKE).start)
    for pid in pids:
        kill(agents, pid)
    assert limits_w()[:2] == [200.0, 200.0]
    return pids[0]


def restore_caps(spool: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`easlurm power restore-caps --spool SPOOL`: (exit status, stdout, stderr)."""
    code = cli.main(["power", "restore-caps", "--spool", str(spool)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_crash_is_repaired_by_restore_caps_with_no_next_job(
    gpus: Path,
    tmp_path: Path,
    agents: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spool = tmp_path / "spool"
    first = crashed_job(spool, agents, monkeypatch)
    monkeypatch.setenv("EASLURM_PROFILER__NVML_MODULE", FAKE)
    assert restore_caps(spool, capsys) == (0, f"restored {ledger_path(spool, 45, 'n')}\n", "")
    assert limits_w() == [700.0] * 4 and not list((spool / LEDGER_DIR).glob("*.json"))
    assert history(0) == [(first, 200_000), (os.getpid(), 700_000)]
    assert restore_caps(spool, capsys) == (0, "", "")


def test_restore_caps_loads_no_nvml_with_nothing_to_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node without GPUs (or caps) runs the same timer: no NVML, no output, exit 0."""
    monkeypatch.setenv("EASLURM_PROFILER__NVML_MODULE", "no_such_nvml_module")
    assert restore_caps(tmp_path, capsys) == (0, "", "")


def test_restore_caps_says_what_it_could_not_restore(
    gpus: Path,
    tmp_path: Path,
    agents: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spool = tmp_path / "spool"
    crashed_job(spool, agents, monkeypatch)
    monkeypatch.setenv("EASLURM_PROFILER__NVML_MODULE", "no_such_nvml_module")
    code, out, err = restore_caps(spool, capsys)
    assert (code, out) == (2, "")
    assert err.startswith("easlurm: error: profiler.nvml_module no_such_nvml_module: NVML not loaded")
    assert err.count("\n") == 1
    fake_nvml._state, fake_nvml._init_count = None, 0  # a new process: the repair, not root
    monkeypatch.setenv("EASLURM_PROFILER__NVML_MODULE", FAKE)
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION", "1")
    code, out, err = restore_caps(spool, capsys)
    fake_nvml.nvmlInit()
    assert (code, out) == (1, "")
    assert f"{ledger_path(spool, 45, 'n')}: limits not all restored (kept)" in err
    assert limits_w()[:2] == [200.0, 200.0]
    left = read_ledger(ledger_path(spool, 45, "n"))
    assert left is not None and left.refs == [] and len(left.changes) == 2


def test_the_agents_start_repairs_a_crash_on_its_node(
    gpus: Path, tmp_path: Path, agents: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next step on the node (any job, with or without a cap) restores before it starts."""
    spool = tmp_path / "spool"
    crashed_job(spool, agents, monkeypatch)
    plain = StepCap(spool, 46, "0", "n", [2], FAKE)  # asks for no limit
    plain.start()
    assert limits_w() == [700.0] * 4 and plain.outcome is None
    plain.end()
    assert not list((spool / LEDGER_DIR).glob("*.json"))


def test_a_killed_agent_left_a_zombie_counts_as_gone() -> None:
    """A SIGKILLed agent is a zombie until it is reaped (seconds on a loaded node once slurmstepd is gone):
    its reference must count as dead from the kill on, else the next job's agent caps on top of the orphan
    cap and restores it as "previous"."""
    import signal
    import subprocess
    import time

    from easlurm.energy.power_limits import pid_alive

    child = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{child.pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.05)
        assert not pid_alive(child.pid)  # not reaped yet: still a zombie
    finally:
        child.wait()
    assert not pid_alive(child.pid)
