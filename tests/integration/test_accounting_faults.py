"""Faults on the real local cluster, and what the records say after them: node 0's agent killed in the
middle of its publication, slurmctld restarted while a job runs, and a node rebooted under a job with its
spool kept. After each, no step record is lost and none is counted twice: every step of the job appears
exactly once in the decoded AdminComment, and the job's total is its batch step's (the node the batch
step measures for the whole run), never a sum that counts a step again."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import GPU_W, plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.step_record import StepRecord, decode_admin_comment

pytestmark = pytest.mark.slurm


# ------------------------------------------------------------------------------------------ helpers


def rows_of(box: Any, job: str, *args: str) -> dict[str, dict[str, Any]]:
    """`easlurm sacct -j JOB --json` rows by job id, from the accounting database alone."""
    res = run_easlurm(box, "sacct", "-j", job, "--json", "--no-spool", *args, timeout=60)
    assert res.returncode == 0, res.stderr
    return {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}


def runs_of(box: Any, job: str) -> list[dict[str, dict[str, Any]]]:
    """`easlurm sacct -D` rows per run, oldest first: [{'job': row, 'batch': row, '0': row}, ...]."""
    res = run_easlurm(box, "sacct", "-j", job, "-D", "--json", "--no-spool", timeout=60)
    assert res.returncode == 0, res.stderr
    runs: list[dict[str, dict[str, Any]]] = []
    for row in json.loads(res.stdout)["rows"]:
        step = row["job_id"].partition(".")[2]
        if not step:
            runs.append({"job": row})
        else:
            runs[-1][step] = row
    return runs


def admin_comment_steps(box: Any, job: str) -> list[StepRecord]:
    """The step records of the job's AdminComment in the accounting database (its last run's row)."""
    res = box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment"])
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    return decode_admin_comment(lines[-1] if lines else "")


def sacct_steps(box: Any, job: str) -> set[str]:
    """The steps Slurm itself accounted for the job's last run (batch, 0, 1, ...; not the extern step)."""
    res = box.run(["sacct", "-n", "-P", "-j", job, "-o", "JobIDRaw"])
    steps = {ln.strip().partition(".")[2] for ln in res.stdout.splitlines() if "." in ln}
    return steps - {"extern"}


def assert_each_step_once(steps: list[StepRecord], expected: set[str]) -> None:
    """No record lost (every expected step key present), none counted twice (each key once)."""
    counts = collections.Counter(s.key for s in steps)
    assert {k: n for k, n in counts.items() if n > 1} == {}, counts
    assert set(counts) == expected, counts


def gpu_j(rec: StepRecord) -> float:
    return sum(d.energy_j or 0.0 for n in rec.nodes for d in n.devices if d.kind == "gpu")


def assert_total_not_doubled(rows: dict[str, dict[str, Any]], job: str, steps: list[StepRecord]) -> None:
    """One node, one GPU: each step's GPU energy is the fake's power over its window (a step counted
    twice would read double), the srun steps together fit inside the batch step, and the job's total is
    the batch step's: nothing added on top of it."""
    batch = max((s for s in steps if s.step == "batch"), key=lambda s: s.run)
    for s in steps:
        for dev in (d for n in s.nodes for d in n.devices if d.kind == "gpu"):
            assert dev.energy_j == pytest.approx(GPU_W * (dev.duration_s or 0.0), rel=0.02), (s.key, dev)
    sruns = [s for s in steps if s.step != "batch" and s.run == batch.run]
    assert sum(gpu_j(s) for s in sruns) <= gpu_j(batch) * 1.001
    assert rows[job]["gpu_energy_j"] == pytest.approx(gpu_j(batch), rel=1e-6), rows[job]


def wait_running(box: Any, job: str, timeout_s: float = 60) -> None:
    def running() -> bool:
        return box.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip() == "RUNNING"

    wait_for(running, timeout_s, f"job {job} running")


def killer_agent(tmp_path: Path, step: str, when: str) -> str:
    """An agent command for the plugin whose node-0 agent of `step` is SIGKILLed inside its publication:
    its `scontrol update ... AdminComment=` kills the agent before the update (`before`: the step file is
    written, the value not set) or right after it succeeded (`after`: set, but the publication manifest
    not written). Every other agent, and every other scontrol call, runs as usual."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    publish = f'{scontrol} "$@" || exit $?\n' if when == "after" else ""
    fake = bin_dir / "scontrol"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '"update "*AdminComment=*)\n'
        f"    {publish}"
        f'    echo "$PPID" >> {tmp_path}/killed\n'
        "    kill -9 $PPID\n"
        "    exit 1 ;;\n"
        "esac\n"
        f'exec {scontrol} "$@"\n'
    )
    agent = tmp_path / "agent"
    agent.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --step {step} "*" --node-id 0 "*) PATH={bin_dir}:$PATH; export PATH ;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    for path in (fake, agent):
        path.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    return str(agent)


# ------------------------------------------------------------------------ killed in mid-publication


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("step", ["1", "batch"])
def test_agent_killed_mid_publish_loses_no_step_and_doubles_none(
    slurm_box: Any, tmp_path: Path, step: str, when: str
) -> None:
    """Node 0's agent of step 1 (a later step publishes the job again) or of the batch step (the job's
    last publisher) is killed inside `scontrol update`, before or after it set the value. The step file
    it wrote stays in the spool; the next publication or `easlurm accounting republish` carries it, and
    every step shows exactly once."""
    agent = killer_agent(tmp_path, step, when)
    with plugin_with_fake_sensors(slurm_box, agent=agent) as spool:
        job = slurm_box.sbatch(
            "-p", "a100", "-N1", "--gres=gpu:a100:1", "--energy-profile=gpu", "-o", str(tmp_path / "out"),
            "--wrap", "srun sleep 1; srun sleep 1; srun sleep 1",
        )  # fmt: skip
        assert slurm_box.wait_job(job) == "COMPLETED"
    assert len((tmp_path / "killed").read_text().split()) == 1, "exactly one agent killed, mid-publish"
    assert (spool / job / f"step-{step}.json").exists()  # written before the publication it died in
    expected = {"0", "1", "2", "batch"}
    assert sacct_steps(slurm_box, job) == expected

    common = ["accounting", "republish", "-j", job, "--spool", str(spool), "--json"]
    res = run_easlurm(slurm_box, *common, "--wait", "150s")
    assert res.returncode == 0, res.stdout + res.stderr
    [result] = json.loads(res.stdout)["jobs"]
    if step == "batch" and when == "before":  # nobody published after it: republish adds it, alone
        assert result["status"] == "republished" and result["missing_steps"] == ["batch"], result
    else:  # a later publication (or its own, before the kill) carried it
        assert result["status"] == "up-to-date", result

    steps = admin_comment_steps(slurm_box, job)
    assert_each_step_once(steps, expected)
    rows = rows_of(slurm_box, job)
    assert all(rows[f"{job}.{s}"]["energy_record"] is not None for s in expected), rows
    assert_total_not_doubled(rows, job, steps)
    again = run_easlurm(slurm_box, *common)
    assert json.loads(again.stdout)["jobs"][0]["status"] == "up-to-date", again.stdout
    assert_each_step_once(admin_comment_steps(slurm_box, job), expected)


# ------------------------------------------------------------------------- slurmctld restarted


def stop_slurmctld(box: Any) -> None:
    """Stop the box's slurmctld (SIGTERM, as an admin's restart does; it saves its state first)."""
    pid = box.box.pid_of("slurmctld")
    assert pid is not None, "slurmctld is not running"
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: box.box.pid_of("slurmctld") is None, 30, "slurmctld to stop")


def test_slurmctld_restart_mid_job_keeps_every_step_once(slurm_box: Any, tmp_path: Path) -> None:
    """slurmctld stops while step 0 runs and stays down until that step's agent has written its step
    file (its publication cannot reach slurmctld, or waits for it); the box then starts it again. The
    job completes, and every step Slurm accounted has its record exactly once."""
    tmp_path.chmod(0o755)
    with plugin_with_fake_sensors(slurm_box) as spool:
        job = slurm_box.sbatch(
            "-p", "a100", "-N1", "--gres=gpu:a100:1", "--energy-profile=gpu", "-o", str(tmp_path / "out"),
            "--wrap", "srun sleep 4; srun sleep 2; srun sleep 2",
        )  # fmt: skip
        wait_running(slurm_box, job)
        wait_for(lambda: (spool / job / "0").is_dir(), 240, "step 0's agent to start")
        try:
            stop_slurmctld(slurm_box)
            wait_for(lambda: (spool / job / "step-0.json").exists(), 60, "step 0's record in the spool")
        finally:
            slurm_box.box.up()  # starts what is not running: slurmctld, from its saved state
        assert slurm_box.wait_job(job, timeout_s=120) == "COMPLETED"
    expected = sacct_steps(slurm_box, job)
    assert {"0", "batch"} <= expected, expected
    steps = admin_comment_steps(slurm_box, job)
    assert_each_step_once(steps, expected)
    rows = rows_of(slurm_box, job)
    assert_total_not_doubled(rows, job, steps)
    res = run_easlurm(slurm_box, "accounting", "republish", "-j", job, "--spool", str(spool), "--json")
    assert json.loads(res.stdout)["jobs"][0]["status"] == "up-to-date", res.stdout + res.stderr


# ----------------------------------------------------------------- a node rebooted, its spool kept

NODE = "a100-2"


def job_processes(job: str) -> set[int]:
    """Every process of the job on this host: its slurmstepds (`slurmstepd: [JOB.STEP]`), the plugin's
    agents (detached by a double fork: not under slurmstepd) and everything under them."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    roots = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        children[ppid].append(int(proc.name))
        agent = b"easlurm.accounting.agent\0" in cmd and f"\0--job\0{job}\0".encode() in cmd
        if cmd.startswith(f"slurmstepd: [{job}.".encode()) or agent:
            roots.add(int(proc.name))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def reboot_node(box: Any, job: str) -> None:
    """What a reboot does to a node that runs `job` alone: slurmd goes, every process of the job dies at
    once (SIGKILL: the agents write nothing more), the spool on disk stays; slurmd starts as booted, and
    the node is DOWN, as slurmctld sets a node that rebooted under its jobs (set here by hand: on one host
    the virtual nodes share the host's boot time), which requeues the job."""
    started = slurmd_start(box)
    # "at once": every process of the job is stopped first (until no new one appears), then killed, so no
    # agent can see its slurmstepd die and write a record in between (a loaded machine kills one by one)
    stopped: set[int] = set()
    while fresh := job_processes(job) - stopped:
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= fresh
    box.box.node_off(NODE)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not job_processes(job), 30, f"job {job}'s processes to die")
    box.run(["scontrol", "update", f"NodeName={NODE}", "State=DOWN", "Reason=rebooted"])
    box.box.node_on(NODE)
    # the job's next run only once the new slurmd has registered (a run sent to it earlier is killed)
    wait_for(lambda: slurmd_start(box) not in ("", started), 60, f"{NODE}'s slurmd to register")


def slurmd_start(box: Any) -> str:
    """When slurmctld last saw the node's slurmd start (`SlurmdStartTime`): it changes on registration."""
    res = box.run(["scontrol", "show", "node", NODE], check=False)
    return next((w.partition("=")[2] for w in res.stdout.split() if w.startswith("SlurmdStartTime=")), "")


def node_state(box: Any) -> str:
    return box.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], check=False).stdout.strip()


def test_rebooted_node_keeps_each_runs_records_once(slurm_box: Any, tmp_path: Path) -> None:
    """A requeueable job on one node: steps 0 and 1 end and publish, then the node reboots while step 2
    runs (its agent and the batch step's die without a record). The job is requeued and its second run
    completes. The earlier run's files stay in the spool: its two records are kept once, its killed steps
    show no record (flagged, never invented), and the new run's total counts only the new run."""
    tmp_path.chmod(0o755)
    script = (
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then srun sleep 1; srun sleep 1; srun sleep 300;'
        " else srun sleep 2; fi"
    )
    with plugin_with_fake_sensors(slurm_box) as spool:
        job = slurm_box.sbatch(
            "-p", "a100", "-w", NODE, "-N1", "--gres=gpu:a100:1", "--requeue", "--open-mode=append",
            "--energy-profile=gpu", "-o", str(tmp_path / "out"), "--wrap", script,
        )  # fmt: skip
        try:
            # a loaded machine may take minutes to start the job (the previous tests' jobs still ending)
            wait_for(lambda: (spool / job / "step-1.json").exists(), 300, "step 1's record")
            wait_for(lambda: (spool / job / "2").is_dir(), 60, "step 2's agent to start")
            reboot_node(slurm_box, job)

            def next_run_started() -> bool:
                if node_state(slurm_box).startswith(("down", "drain")):
                    slurm_box.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"], check=False)
                # the requeued job's ~120 s wait is kept (no StartTime=now): slurmctld's kill of the first
                # run reaches the node only once its new slurmd registered, and would end a run started sooner
                return (spool / job / "batch+r1").is_dir()

            wait_for(next_run_started, 240, "the job's second run", step_s=1.0)
            assert slurm_box.wait_job(job, timeout_s=120) == "COMPLETED"
        finally:
            # whatever failed, the node is left as the next tests need it: its slurmd up, the job gone
            slurm_box.run(["scancel", job], check=False)
            if slurm_box.box.pid_of(f"slurmd-{NODE}") is None:
                slurm_box.box.node_on(NODE)
            if node_state(slurm_box).startswith(("down", "drain")):
                slurm_box.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"], check=False)
    # the earlier run's spool files are still there, beside the new run's
    assert (spool / job / "step-0.json").exists() and (spool / job / "step-0+r1.json").exists()
    assert not list(spool.glob(f"{job}.stale-*")), "the job's own directory is never taken for a stale one"
    assert not (spool / job / "2" / "node-0.json").exists()  # the killed agent wrote nothing

    steps = admin_comment_steps(slurm_box, job)
    assert_each_step_once(steps, {"0", "1", "0+r1", "batch+r1"})
    rows = rows_of(slurm_box, job)  # the last run
    assert rows[f"{job}.0"]["energy_record"]["run"] == 1
    assert_total_not_doubled(rows, job, [s for s in steps if s.run == 1])
    first = runs_of(slurm_box, job)[0]  # the earlier run: its published steps, its killed ones flagged
    assert {s for s in ("0", "1") if first[s]["energy_record"] is not None} == {"0", "1"}, first
    assert first["2"]["energy_flags"] == first["batch"]["energy_flags"] == "no-record", first
    assert {"partial", "no-record:batch+2"} <= set(first["job"]["energy_flags"].split(",")), first["job"]
    assert first["job"]["gpu_energy_j"] == pytest.approx(sum(gpu_j(s) for s in steps if s.run == 0))

    # with the spool: the earlier run's killed steps have nothing to adopt, and nothing is counted twice
    res = run_easlurm(slurm_box, "accounting", "republish", "-j", job, "--spool", str(spool), "--json")
    assert json.loads(res.stdout)["jobs"][0]["status"] == "up-to-date", res.stdout + res.stderr
    assert_each_step_once(admin_comment_steps(slurm_box, job), {"0", "1", "0+r1", "batch+r1"})
