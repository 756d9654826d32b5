"""Slurm's power saving on the real local cluster: an idle node powered down (its slurmd stopped by the
box's SuspendProgram, `easlurm power suspend`) is resumed for a job pinned to it (ResumeProgram, `easlurm
power resume`, starts its slurmd as a freshly booted node), the job runs once to the end, and the
power-state log and the reports show the node's time and energy powered down."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import plugin_with_fake_sensors, run_easlurm

pytestmark = pytest.mark.slurm

#: the GPU nodes the test may power down, in order of preference; NODE is the one it chose
CANDIDATES = ("h100-2", "h100-1", "a100-2", "a100-1")
NODE = CANDIDATES[0]


def node_state(box: Any, node: str | None = None) -> str:
    res = box.run(["sinfo", "-h", "-N", "-n", node or NODE, "-o", "%t"], check=False)
    return (res.stdout.split() or [""])[0]


def choose_idle_node(box: Any) -> str:
    """The first candidate that is idle. Under load an earlier test's cancelled job can keep a node `mix`
    for minutes with nothing left in the queue (seen on 22.05 after the power-cap tests)."""
    found: list[str] = []

    def any_idle() -> bool:
        found.extend(n for n in CANDIDATES if node_state(box, n) == "idle")
        return bool(found)

    wait_for(any_idle, 150, "an idle GPU node")
    return found[0]


def events_since(box: Any, t0: float) -> list[dict[str, Any]]:
    """The node's power events logged since t0 (the box's log: <spool>/power/state.jsonl)."""
    log = Path(box.env["EASLURM_SPANK__SPOOL"]) / "power" / "state.jsonl"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        e = json.loads(line)
        e["time_s"] = datetime.fromisoformat(e["time"]).timestamp()
        if e["node"] == NODE and e["time_s"] >= t0:
            out.append(e)
    return out


def easlurm_json(box: Any, *args: str) -> dict[str, Any]:
    res = run_easlurm(box, *args, "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def leave_node_idle(box: Any) -> None:
    """Other tests use the node: wait until it is idle, powering it up if it is down and resuming it if an
    earlier test's cancelled job left it drained or down. A node powering down (idle%) ignores a power-up
    request until it is down (up to SuspendTimeout plus slurmctld's power-saving pass, about 10 s), and a
    node still completing a job ends that first."""
    asked: set[str] = set()

    def idle() -> bool:
        state = node_state(box)
        if state.endswith("~") and "up" not in asked:
            box.run(["scontrol", "update", f"NodeName={NODE}", "State=POWER_UP"], check=False)
            asked.add("up")
        elif state.startswith(("down", "drain", "drng")) and "resume" not in asked:
            box.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"], check=False)
            asked.add("resume")
        return state == "idle"

    try:
        wait_for(idle, 150, f"{NODE} idle again")
    except AssertionError as exc:
        nodes = box.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%t %E"], check=False).stdout.strip()
        queue = box.run(["squeue", "-h", "-a", "-o", "%i %T %r %N %P"], check=False).stdout.strip()
        raise AssertionError(f"{exc}: sinfo [{nodes}] squeue [{queue}]") from None


def test_powered_down_node_is_resumed_for_a_job_that_runs_once(slurm_box: Any, tmp_path: Path) -> None:
    """scontrol POWER_DOWN on an idle node: idle~, its slurmd gone, a suspend event. A --energy-profile
    job pinned to it resumes it (a resume event) and runs to COMPLETED with no requeue and no hold, with
    its energy measured. `easlurm power report` and `easlurm report --by node` show the node's time powered
    down (from the suspend to the resume) and the energy drawn off and avoided against idling."""
    global NODE
    box = slurm_box.box
    tmp_path.chmod(0o755)
    if "~" in node_state(slurm_box):
        leave_node_idle(slurm_box)  # a box brought up with the node powered down keeps it so
    NODE = choose_idle_node(slurm_box)
    kind = NODE.split("-")[0]
    t0 = time.time()
    try:
        slurm_box.run(["scontrol", "update", f"NodeName={NODE}", "State=POWER_DOWN"])
        wait_for(
            lambda: (
                node_state(slurm_box) == "idle~"
                and box.pid_of(f"slurmd-{NODE}") is None
                and any(e["event"] == "suspend" and e["ok"] for e in events_since(slurm_box, t0))
            ),
            60,
            f"{NODE} powered down (idle~, slurmd stopped, suspend logged)",
        )
        time.sleep(2)  # powered down for a while
        seen: set[tuple[str, str]] = set()
        with plugin_with_fake_sensors(slurm_box):
            job = slurm_box.sbatch(
                "-w",
                NODE,
                "-p",
                kind,
                f"--gres=gpu:{kind}:1",
                "--energy-profile=gpu",
                "-o",
                str(tmp_path / "out"),
                "--wrap",
                "srun sleep 3",
            )

            def ended() -> bool:
                res = slurm_box.run(["squeue", "-h", "-j", job, "-o", "%T|%r"], check=False)
                line = res.stdout.strip()
                if line:
                    state, _, reason = line.partition("|")
                    seen.add((state, reason))
                return not line

            wait_for(ended, 120, f"job {job} to leave the queue", step_s=0.5)
            assert slurm_box.wait_job(job, timeout_s=60) == "COMPLETED"
        assert ("CONFIGURING", "None") in seen, seen  # it waited for the node to resume
        assert not [s for s in seen if "held" in s[1].lower() or s[0] in ("REQUEUED", "REQUEUE_HOLD")], seen
        runs = slurm_box.run(["sacct", "-n", "-X", "-P", "--duplicates", "-j", job, "-o", "State"])
        assert runs.stdout.split() == ["COMPLETED"], runs.stdout  # one run: never requeued
        assert box.pid_of(f"slurmd-{NODE}") is not None
        events = events_since(slurm_box, t0)
        assert [(e["event"], e["ok"]) for e in events] == [("suspend", True), ("resume", True)], events
        off_s = events[1]["time_s"] - events[0]["time_s"]
        assert off_s > 2

        deadline = time.monotonic() + 120
        while True:  # the step's record is published as the step ends; sacct may show it a little later
            doc = easlurm_json(slurm_box, "sacct", "-j", job)
            step = next((r for r in doc["rows"] if r["job_id"] == f"{job}.0"), {})
            if step.get("gpu_energy_j") or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert step.get("gpu_energy_j", 0) > 0, step

        # from the power-down on (a resume just before, of a node left powered down, is not this test's)
        start = datetime.fromtimestamp(events[0]["time_s"]).isoformat()
        report = easlurm_json(slurm_box, "power", "report", "-S", start)
        row = next(r for r in report["nodes"] if r["node"] == NODE)
        assert row["off_s"] == pytest.approx(off_s, abs=0.01)
        assert row["cycles"] == 1 and row["failures"] == 0 and row["off_at_end"] is False
        assert row["idle_w"] > row["off_w"] > 0
        assert row["off_energy_j"] == pytest.approx(row["off_w"] * off_s, rel=1e-3)
        assert row["avoided_energy_j"] == pytest.approx((row["idle_w"] - row["off_w"]) * off_s, rel=1e-3)
        by_node = easlurm_json(slurm_box, "report", "--by", "node", "-S", start)
        assert next(r for r in by_node["nodes"] if r["node"] == NODE) == row
        table = run_easlurm(slurm_box, "power", "report", "-S", start, "-P", "-n")
        assert table.returncode == 0, table.stderr
        assert any(line.startswith(f"{NODE}|1|") for line in table.stdout.splitlines()), table.stdout
    finally:
        leave_node_idle(slurm_box)
