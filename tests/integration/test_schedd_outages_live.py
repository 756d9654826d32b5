"""The scheduler daemon through Slurm's own outages on the real local cluster: slurmctld restarted and
slurmdbd down in the middle of its cycles. The daemon carries on (cycles fail, are logged and change
nothing, then resume), every hold it made still expires or is released, and a profiled job that ended
while slurmdbd was down reaches sacct once it is back. Names `schedd-out-*`, on h100-2 behind a blocker."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from box_support import mine, wait_for
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.priority import holds
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.slurm.sched_client import CliSchedClient

pytestmark = pytest.mark.slurm
NODE = "h100-2"
SPEC = "--comment=energy-profile=model=resnet50,steps=500,batch=64,gpus=1"
TTL_S = 300.0


@pytest.fixture
def blocker(slurm_box: Any) -> Iterator[str]:
    """All 8 GPUs of h100-2, so that the test's jobs wait there until the test ends."""
    jid = slurm_box.sbatch(
        "-J", "schedd-out-block", "-p", "h100", f"--nodelist={NODE}", "--gres=gpu:h100:8", "--wrap", "sleep 600"
    )  # fmt: skip
    try:
        wait_for(lambda: mine(slurm_box, [jid])[jid].running, 120, "the blocker to run")
        yield jid
    finally:
        slurm_box.run(["scancel", jid], check=False)


def cycles(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [d for d in map(json.loads, log.read_text().splitlines()) if d.get("event") == "cycle"]


def stop_daemon_process(box: Any, name: str) -> None:
    """SIGTERM one of the box's Slurm daemons (an admin's restart: it saves its state first)."""
    pid = box.box.pid_of(name)
    assert pid is not None, f"{name} is not running"
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: box.box.pid_of(name) is None, 60, f"{name} to stop")


def held_until_at_most_ttl(box: Any, ids: list[str], now: float) -> bool:
    jobs = mine(box, ids)
    return len(jobs) == len(ids) and all(
        holds.held_by_us(j, now) and (j.eligible_s or 0) <= now + TTL_S + 5 for j in jobs.values()
    )


def test_daemon_carries_on_through_a_slurmctld_restart_and_leaves_no_hold(
    slurm_box: Any, blocker: str, tmp_path: Path
) -> None:
    """Charon under a 1 W budget holds two jobs (StartTime at most the TTL ahead); slurmctld stops for
    ~15 s: the daemon's cycles fail and change nothing, the daemon thread lives; slurmctld comes back from
    its saved state: the cycles succeed again within a minute, the holds are still the daemon's and still
    bounded by the TTL, and stopping the daemon releases them all."""
    common = ["-p", "h100", f"--nodelist={NODE}", "--gres=gpu:h100:1", "--wrap", "sleep 2"]
    ids = [slurm_box.sbatch("-J", f"schedd-out-ctld-{i}", SPEC, *common) for i in range(2)]
    log = tmp_path / "log.jsonl"
    cfg = DaemonConfig(
        policy="charon", interval_s=1.0, power_budget_w=1.0, hold_ttl_s=TTL_S, decision_log=log,
        name_prefix="schedd-out-ctld", nodes=(NODE,),
    )  # fmt: skip
    daemon = Daemon(CliSchedClient(env=slurm_box.env), cfg)
    stop = threading.Event()
    thread = threading.Thread(target=daemon.run, args=(stop,), name="schedd-out", daemon=True)
    thread.start()
    try:
        wait_for(lambda: held_until_at_most_ttl(slurm_box, ids, time.time()), 60, "the daemon's holds")
        try:
            stop_slurmctld_at = len(cycles(log))
            stop_daemon_process(slurm_box, "slurmctld")
            wait_for(lambda: any(c["error"] for c in cycles(log)[stop_slurmctld_at:]), 90, "a failed cycle")
            time.sleep(10)
        finally:
            slurm_box.box.up()
        back_at = len(cycles(log))
        wait_for(lambda: any(not c["error"] for c in cycles(log)[back_at:]), 90, "a cycle after the restart")
        assert thread.is_alive(), "the daemon died with slurmctld"
        failed = [c for c in cycles(log) if c["error"]]
        assert failed and all(not c.get("actions") for c in failed), failed[:2]
        assert held_until_at_most_ttl(slurm_box, ids, time.time()), mine(slurm_box, ids)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
    for j in mine(slurm_box, ids).values():
        assert holds.mark_of(j) is None and (j.eligible_s is None or j.eligible_s <= time.time() + 1), j
    slurm_box.run(["scancel", *ids], check=False)


def test_slurmdbd_outage_daemon_carries_on_and_accounting_catches_up(
    slurm_box: Any, blocker: str, tmp_path: Path
) -> None:
    """slurmdbd stops: the daemon's first cycle cannot read the per-user history from sacct and goes on
    without it; a profiled job runs and ends meanwhile. slurmdbd comes back: the job and its energy reach
    sacct (slurmctld's queued records, or `easlurm accounting republish` where they did not)."""
    tmp_path.chmod(0o755)
    log = tmp_path / "log.jsonl"
    cfg = DaemonConfig(
        policy="zeus", interval_s=1.0, hold_ttl_s=TTL_S, decision_log=log, name_prefix="schedd-out-dbd",
        nodes=(NODE,),
    )  # fmt: skip
    daemon = Daemon(CliSchedClient(env=slurm_box.env), cfg)
    with plugin_with_fake_sensors(slurm_box) as spool:
        try:
            stop_daemon_process(slurm_box, "slurmdbd")
            waiting = slurm_box.sbatch("-J", "schedd-out-dbd-wait", SPEC, "-p", "h100", f"--nodelist={NODE}",
                                       "--gres=gpu:h100:1", "--wrap", "sleep 2")  # fmt: skip
            reports = [daemon.cycle() for _ in range(3)]
            assert all(r.error is None for r in reports), [r.error for r in reports]
            assert any(j.job_id == waiting for j in reports[-1].snapshot.pending), "the daemon lost the queue"
            job = slurm_box.sbatch(
                "-J", "schedd-out-dbd-run", "-p", "a100", "-N1", "--gres=gpu:a100:1", "--energy-profile=gpu",
                "-o", str(tmp_path / "out"), "--wrap", "srun sleep 3",
            )  # fmt: skip
            wait_for(lambda: (spool / job / "step-0.json").exists(), 180, "step 0's record in the spool")
            wait_for(lambda: job not in mine(slurm_box, [job]), 120, "the job to leave the queue")
        finally:
            slurm_box.box.up()
        assert slurm_box.wait_job(job, timeout_s=180) == "COMPLETED"
        res = run_easlurm(slurm_box, "accounting", "republish", "-j", job, "--spool", str(spool), "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        status = json.loads(res.stdout)["jobs"][0]["status"]
        assert status in ("up-to-date", "republished"), res.stdout
    shown = run_easlurm(slurm_box, "sacct", "-j", job, "--json", "--no-spool", timeout=60)
    assert shown.returncode == 0, shown.stderr
    rows = {r["job_id"]: r for r in json.loads(shown.stdout)["rows"]}
    assert {job, f"{job}.0", f"{job}.batch"} <= set(rows), sorted(rows)
    assert (rows[f"{job}.0"].get("gpu_energy_j") or 0) > 0, rows[f"{job}.0"]
    assert (rows[job].get("gpu_energy_j") or 0) > 0, rows[job]
    slurm_box.run(["scancel", waiting], check=False)
