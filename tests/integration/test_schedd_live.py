"""The scheduler daemon against the real local Slurm: parity, dry run, order, power budget, preemption,
and no hold left behind by a killed daemon. Every test touches only jobs it submitted (names
`schedd-it-*`), on h100-2 behind a blocker job of its own so that jobs wait where the test wants."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from box_support import mine, wait_for

from easlurm.energy.spec import parse_spec
from easlurm.model.oracle import Oracle
from easlurm.priority import holds
from easlurm.priority.daemon import Daemon, DaemonConfig, queue_order
from easlurm.priority.policies import get_policy
from easlurm.priority.slurm_snapshot import SPANK_ENV_VAR, oracle_power
from easlurm.priority.snapshot import ClusterSnapshot, Decision
from easlurm.slurm.sched_client import CliSchedClient
from easlurm.slurm.times import format_timestamp

pytestmark = pytest.mark.slurm
NODE = "h100-2"


def comment(spec: str) -> str:
    return f"--comment=energy-profile={spec}"


def cancel(box: Any, ids: list[str]) -> None:
    if ids:
        box.run(["scancel", *ids], check=False)


def submit_blocker(box: Any) -> str:
    """A job holding all 8 GPUs of h100-2, so that the test's jobs wait there until the test cancels it."""
    return str(
        box.sbatch(
            "-J",
            "schedd-it-block",
            "-p",
            "h100",
            f"--nodelist={NODE}",
            "--gres=gpu:h100:8",
            "--wrap",
            "sleep 300",
        )
    )


@pytest.fixture
def blocker(slurm_box: Any) -> Iterator[str]:
    """All 8 GPUs of h100-2 (see submit_blocker), cancelled after the test."""
    jid = submit_blocker(slurm_box)
    try:
        wait_for(lambda: mine(slurm_box, [jid])[jid].running, 120, "the blocker to run")
        yield jid
    finally:
        cancel(slurm_box, [jid])


def client(box: Any) -> CliSchedClient:
    return CliSchedClient(env=box.env)


def start_daemon(box: Any, cfg: DaemonConfig) -> tuple[Daemon, threading.Event, threading.Thread]:
    d = Daemon(client(box), cfg)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,), name="schedd-test", daemon=True)
    t.start()
    return d, stop, t


def stop_daemon(stop: threading.Event, t: threading.Thread) -> None:
    stop.set()
    t.join(timeout=60)
    assert not t.is_alive()


def visible(box: Any, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """What the daemon could change on a job: site factor, GPU request, partition, AdminComment, begin time
    (not the priority or the reason, which Slurm itself changes as jobs age)."""
    factors = client(box).site_factors()
    return {
        j.job_id: (
            (factors.get(j.job_id) or (0, 0))[1],
            j.gpus_per_node,
            j.gpu_type,
            j.partition,
            j.admin_comment,
            j.eligible_s,
        )
        for j in mine(box, ids).values()
    }


def test_schedd_dry_run_changes_nothing_and_parity(slurm_box: Any, blocker: str, tmp_path: Path) -> None:
    """A live snapshot (one job declared through the SPANK option's job environment) decides the same
    through JSON and a fresh policy and oracle, for several policies; --dry-run changes nothing."""
    spec = "model={m},steps=3000,batch=64:128:256,gpus=1:2:4"
    common = ["-p", "h100", "--exclude=h100-1", "--gres=gpu:h100:1", "--wrap", "sleep 5"]
    ids = [
        slurm_box.sbatch("-J", f"schedd-it-dry-{m}", comment(spec.format(m=m)), *common)
        for m in ("resnet50", "bert-base")
    ]
    env = dict(slurm_box.env, **{SPANK_ENV_VAR: spec.format(m="vit-b16")})
    res = subprocess.run(
        ["sbatch", "--parsable", "-J", "schedd-it-dry-env", *common],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    ids.append(res.stdout.strip())
    try:
        time.sleep(1.0)
        before = visible(slurm_box, ids)
        assert len(before) == 3 and all(j.pending for j in mine(slurm_box, ids).values())
        for policy in ("zeus", "pollux", "themis", "charon"):
            log = tmp_path / f"{policy}.jsonl"
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "easlurm.cli",
                    "schedd",
                    "--policy",
                    policy,
                    "--once",
                    "--dry-run",
                    "--log-snapshots",
                    "--only-names",
                    "schedd-it-dry",
                    "--decision-log",
                    str(log),
                    "--power-budget",
                    "100000W",
                ],
                env=slurm_box.env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert out.returncode == 0, out.stderr
            entry = json.loads(log.read_text().splitlines()[-1])
            assert entry["dry_run"] and entry["error"] is None
            assert entry["actions"]  # there was something to change: ranking at least
            snap = ClusterSnapshot.from_dict(entry["snapshot"])
            assert sorted(p.job_id for p in snap.pending) == sorted(ids)
            again = get_policy(policy).decide(snap, Oracle())
            assert again == Decision.from_dict(entry["decision"])
        assert visible(slurm_box, ids) == before
    finally:
        cancel(slurm_box, ids)


def test_schedd_power_budget_caps_running_jobs(slurm_box: Any, blocker: str, tmp_path: Path) -> None:
    """With a budget that fits N=2 jobs' predicted power, never more than 2 of 4 run at once."""
    oracle = Oracle()
    spec = "model=vit-b16,steps=100,batch=64,gpus=1"
    idle = float(oracle.catalogue.get("h100").idle_w)
    p = oracle_power(oracle)("x", parse_spec(spec), "h100", 1, 64)
    assert p is not None and p > idle
    n = 2
    budget = 8 * idle + (n + 0.5) * (p - idle)
    ids = [
        slurm_box.sbatch(
            "-J",
            f"schedd-it-budget-{i}",
            comment(spec),
            "-p",
            "h100",
            f"--nodelist={NODE}",
            "--gres=gpu:h100:1",
            "--wrap",
            "sleep 6",
        )
        for i in range(4)
    ]
    cfg = DaemonConfig(
        policy="charon",
        interval_s=1.0,
        power_budget_w=budget,
        hold_ttl_s=300.0,
        decision_log=tmp_path / "log.jsonl",
        env_dir=tmp_path / "env",
        name_prefix="schedd-it-budget",
        nodes=(NODE,),
    )
    _, stop, t = start_daemon(slurm_box, cfg)
    try:
        now = time.time()
        wait_for(
            lambda: all(holds.held_by_us(j, now) for j in mine(slurm_box, ids).values()),
            30,
            "the daemon to hold every job while the blocker runs",
        )
        cancel(slurm_box, [blocker])
        most, seen_done = 0, False
        end = time.monotonic() + 150
        while time.monotonic() < end:
            jobs = mine(slurm_box, ids)
            most = max(most, sum(1 for j in jobs.values() if j.running))
            if not any(j.pending or j.running for j in jobs.values()):
                seen_done = True
                break
            time.sleep(0.3)
        assert seen_done, "the jobs did not all run"
        assert 1 <= most <= n
    finally:
        stop_daemon(stop, t)
        cancel(slurm_box, ids)


def test_schedd_killed_daemon_restarted_leaves_no_hold(slurm_box: Any, blocker: str, tmp_path: Path) -> None:
    """SIGKILL leaves marked holds; the next daemon releases them at start-up and leaves user holds alone."""
    spec = "model=resnet50,steps=500,batch=64,gpus=1"
    common = ["-p", "h100", f"--nodelist={NODE}", "--gres=gpu:h100:1", "--wrap", "sleep 2"]
    ids = [slurm_box.sbatch("-J", f"schedd-it-kill-{i}", comment(spec), *common) for i in range(2)]
    user_held = slurm_box.sbatch("-J", "schedd-it-kill-user", "--hold", comment(spec), *common)
    args = [
        sys.executable,
        "-m",
        "easlurm.cli",
        "schedd",
        "--interval",
        "1s",
        "--only-names",
        "schedd-it-kill",
        "--nodes",
        NODE,
        "--decision-log",
        str(tmp_path / "log.jsonl"),
    ]
    first = subprocess.Popen(
        [*args, "--policy", "charon", "--power-budget", "1W", "--hold-ttl", "300s"],
        env=slurm_box.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: all(holds.mark_of(j) for j in mine(slurm_box, ids).values()), 60, "holds")
        first.kill()
        first.wait(timeout=10)
        jobs = mine(slurm_box, ids)
        now = time.time()
        for j in jobs.values():  # still held: deferred by the daemon's StartTime, marked
            assert j.pending and holds.held_by_us(j, now) and (j.eligible_s or 0) > now, j
        second = subprocess.Popen(
            [*args, "--policy", "zeus"], env=slurm_box.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        wait_for(lambda: not any(holds.mark_of(j) for j in mine(slurm_box, ids).values()), 60, "release")
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
        now = time.time()
        for j in mine(slurm_box, ids).values():
            assert holds.mark_of(j) is None
            assert j.running or j.eligible_s is None or j.eligible_s <= now + 1
        user = mine(slurm_box, [user_held])[user_held]
        assert user.reason == "JobHeldUser" and user.admin_comment == ""
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        cancel(slurm_box, [*ids, user_held])


def test_schedd_order_zeus_and_pollux_differ(slurm_box: Any, tmp_path: Path) -> None:
    """GPT-2 is shorter but draws about twice the power of BERT (whose 32 samples per GPU are launch-bound):
    Pollux (time) starts GPT-2 first, Zeus (EDP) BERT, as the oracle's ranking says; each job takes all 8 GPUs
    so the start order is the queue order."""
    specs = {
        "gpt2": "model=gpt2,steps=3400,batch=256,gpus=8",
        "bert": "model=bert-base,steps=18000,batch=256,gpus=8",
    }
    firsts = {}
    for policy in ("zeus", "pollux"):
        block = submit_blocker(slurm_box)
        ids: list[str] = []
        stop: threading.Event | None = None
        try:
            wait_for(lambda b=block: mine(slurm_box, [b])[b].running, 120, "the blocker to run")
            ids = [
                slurm_box.sbatch(
                    "-J",
                    f"schedd-it-order-{policy}-{name}",
                    comment(spec),
                    "-p",
                    "h100",
                    f"--nodelist={NODE}",
                    "--gres=gpu:h100:8",
                    "--wrap",
                    "sleep 2",
                )
                for name, spec in specs.items()
            ]
            log = tmp_path / f"{policy}.jsonl"
            cfg = DaemonConfig(
                policy=policy,
                interval_s=1.0,
                decision_log=log,
                log_snapshots=True,
                env_dir=tmp_path / "env",
                name_prefix=f"schedd-it-order-{policy}",
                nodes=(NODE,),
                aging_weight=0.0,  # the submit gap between the two jobs must not decide the order
            )
            _, stop, t = start_daemon(slurm_box, cfg)
            wait_for(
                lambda ids=ids: all((client(slurm_box).site_factors().get(i) or (0, 0))[1] > 0 for i in ids),
                60,
                "the daemon to order both jobs",
            )
            entry = [json.loads(x) for x in log.read_text().splitlines() if '"snapshot"' in x][-1]
            expected = queue_order(
                get_policy(policy, aging_weight=0.0), ClusterSnapshot.from_dict(entry["snapshot"]), Oracle()
            )
            cancel(slurm_box, [block])
            for i in ids:
                slurm_box.wait_job(i, 120)
            rows = slurm_box.run(
                ["sacct", "-n", "-X", "-P", "-j", ",".join(ids), "--format=JobID,Start"]
            ).stdout
            start = {r.split("|")[0]: r.split("|")[1] for r in rows.splitlines() if r}
            order = sorted(ids, key=lambda i: (start[i], i))
            assert order == expected, (policy, order, expected)
            firsts[policy] = "gpt2" if order[0] == ids[0] else "bert"
        finally:
            if stop is not None:
                stop_daemon(stop, t)
            cancel(slurm_box, [block, *ids])
    assert firsts == {"zeus": "bert", "pollux": "gpt2"}


def test_schedd_aurachronos_preempts_for_an_urgent_deadline(slurm_box: Any, tmp_path: Path) -> None:
    """A long best-effort job holds every GPU of h100-2; an urgent job with a deadline arrives: the daemon
    requeues the long job and the urgent one runs well within its deadline."""
    long_spec = "model=gpt2,steps=200000,batch=64,gpus=8"
    urgent_spec = "model=resnet50,steps=200,batch=64,gpus=8,deadline=30m,urgent"
    common = ["-p", "h100", f"--nodelist={NODE}", "--gres=gpu:h100:8"]
    long_id = slurm_box.sbatch("-J", "schedd-it-pre-long", comment(long_spec), *common, "--wrap", "sleep 300")
    ids = [long_id]
    stop: threading.Event | None = None
    try:
        wait_for(lambda: mine(slurm_box, [long_id])[long_id].running, 120, "the long job to run")
        urgent = slurm_box.sbatch(
            "-J", "schedd-it-pre-urgent", comment(urgent_spec), *common, "--wrap", "sleep 3"
        )
        ids.append(urgent)
        cfg = DaemonConfig(
            policy="aurachronos",
            interval_s=1.0,
            preempt_cooldown_s=0.0,
            min_run_s=0.0,  # the long job ran only seconds: the site allows preempting it at once
            decision_log=tmp_path / "log.jsonl",
            env_dir=tmp_path / "env",
            name_prefix="schedd-it-pre",
            nodes=(NODE,),
        )
        _, stop, t = start_daemon(slurm_box, cfg)
        assert slurm_box.wait_job(urgent, 150) == "COMPLETED"
        entries = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
        requeued = [a["job_id"] for e in entries for a in e.get("actions", []) if a["kind"] == "requeue"]
        assert requeued == [long_id]  # once: the cooldown memory keeps it from being requeued again
        long_job = mine(slurm_box, [long_id]).get(long_id)
        assert long_job is None or long_job.restarts >= 1
        rows = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", urgent, "--format=Submit,End"]).stdout.split(
            "|"
        )
        fmt = "%Y-%m-%dT%H:%M:%S"
        took = time.mktime(time.strptime(rows[1].strip(), fmt)) - time.mktime(time.strptime(rows[0], fmt))
        assert took < 30 * 60 and math.isfinite(took)
    finally:
        if stop is not None:
            stop_daemon(stop, t)
        cancel(slurm_box, ids)


def test_schedd_budget_gates_jobs_deferred_at_submission(slurm_box: Any, tmp_path: Path) -> None:
    """Jobs submitted with a begin time a few seconds ahead (what a site's job_submit.lua can do for
    declared jobs) are held before Slurm can start them; shutdown gives them back, begin time passed."""
    spec = "model=resnet50,steps=500,batch=64,gpus=1"
    ids = [
        slurm_box.sbatch(
            "-J",
            f"schedd-it-gate-{i}",
            comment(spec),
            "--begin=now+8",
            "-p",
            "h100",
            f"--nodelist={NODE}",
            "--gres=gpu:h100:1",
            "--wrap",
            "sleep 1",
        )
        for i in range(2)
    ]
    cfg = DaemonConfig(
        policy="charon",
        interval_s=1.0,
        power_budget_w=1.0,
        hold_ttl_s=120.0,
        decision_log=tmp_path / "log.jsonl",
        env_dir=tmp_path / "env",
        name_prefix="schedd-it-gate",
        nodes=(NODE,),
    )
    _, stop, t = start_daemon(slurm_box, cfg)
    try:
        wait_for(lambda: all(holds.mark_of(j) for j in mine(slurm_box, ids).values()), 8, "the gate")
        time.sleep(12)  # past the users' begin time: still nothing may start under a 1 W budget
        jobs = mine(slurm_box, ids)
        assert all(j.pending and holds.held_by_us(j, time.time()) for j in jobs.values()), jobs
        stop_daemon(stop, t)
        now = time.time()
        for j in mine(slurm_box, ids).values():
            assert holds.mark_of(j) is None and (j.running or (j.eligible_s or 0) <= now + 1)
    finally:
        stop_daemon(stop, t)
        cancel(slurm_box, ids)


def test_schedd_begin_time_holds_do_not_flap_and_say_why(slurm_box: Any, tmp_path: Path) -> None:
    """Jobs submitted with `--begin` 20 s ahead under a budget with room: each is held once, with its own
    begin time kept, and not touched again (the old daemon released and held them on alternate cycles)
    until the begin time passes; then they are released, start and complete. The cycle's report says why
    in words and shows the power against the budget."""
    spec = "model=resnet50,steps=500,batch=64,gpus=1"
    common = ["-p", "h100", f"--nodelist={NODE}", "--gres=gpu:h100:1", "--wrap", "sleep 1"]
    ids = [
        slurm_box.sbatch("-J", f"schedd-it-begin-{i}", comment(spec), "--begin=now+20", *common)
        for i in range(2)
    ]
    cfg = DaemonConfig(
        policy="charon",
        interval_s=1.0,
        power_budget_w=100_000.0,
        hold_ttl_s=120.0,
        decision_log=tmp_path / "log.jsonl",
        log_snapshots=True,
        env_dir=tmp_path / "env",
        name_prefix="schedd-it-begin",
        nodes=(NODE,),
    )
    begin = max(j.eligible_s or 0.0 for j in mine(slurm_box, ids).values())
    _, stop, t = start_daemon(slurm_box, cfg)
    try:
        wait_for(lambda: time.time() > begin - 2, 30, "the begin time to come near")
        entries = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
        cycles = [e for e in entries if e["event"] == "cycle" and e["time_s"] < begin - 1]
        acts = [(a["kind"], a["job_id"]) for e in cycles for a in e["actions"] if a["job_id"] in ids]
        assert len(cycles) >= 3 and sorted(acts) == sorted(("hold", j) for j in ids), (len(cycles), acts)
        held = next(e for e in cycles if e["actions"])
        for j in ids:
            assert "waits for its own begin time" in held["jobs"][j]["why"]["hold"]
        assert held["power"]["budget_w"] == 100_000.0 and held["warnings"] == []
        wait_for(
            lambda: not any(j.pending or j.running for j in mine(slurm_box, ids).values()),
            90,
            "the jobs to start after their begin time and complete",
        )
    finally:
        stop_daemon(stop, t)
        cancel(slurm_box, ids)


def test_schedd_charon_budget_holds_on_measured_power(slurm_box: Any, blocker: str, tmp_path: Path) -> None:
    """Profiled jobs publish their first step's measured power (fake NVML) while they run; Charon counts it
    for them (the prediction for the others) and learns its margin from it. Over the whole test, the
    projected power of every cycle (the logged snapshot: running jobs' measured or predicted power plus
    idle GPUs) stays within the budget, more jobs run at once than predictions alone would allow, and
    every job runs to completion."""
    from spank_support import plugin_with_fake_sensors

    oracle = Oracle()
    spec = "model=vit-b16,steps=100,batch=64,gpus=1"
    idle = float(oracle.catalogue.get("h100").idle_w)
    p = oracle_power(oracle)("x", parse_spec(spec), "h100", 1, 64)
    assert p is not None and p > idle
    budget = 8 * idle + 2.5 * (p - idle)
    script = tmp_path / "two-steps.sh"
    # the first step's record is what the daemon reads while the second runs: 3 s, so that the agent's
    # start-up (a tenth of a second with no sample, more on a slow root) moves its mean power by little
    script.write_text("#!/bin/sh\nsrun --gres=gpu:h100:1 sleep 3\nsrun --gres=gpu:h100:1 sleep 6\n")
    # the GPUs draw 60 % of the prediction: by prediction 2 jobs fit, by measurement 3
    with plugin_with_fake_sensors(slurm_box, gpu_w=round(0.6 * p)):
        ids = [
            slurm_box.sbatch(
                "-J",
                f"schedd-it-measured-{i}",
                f"--energy-profile=gpu,{spec}",
                comment(spec),
                "-p",
                "h100",
                f"--nodelist={NODE}",
                "--gres=gpu:h100:1",
                "-o",
                str(tmp_path / f"{i}.out"),
                str(script),
            )
            for i in range(5)
        ]
        log_path = tmp_path / "log.jsonl"
        cfg = DaemonConfig(
            policy="charon",
            interval_s=1.0,
            power_budget_w=budget,
            hold_ttl_s=300.0,
            decision_log=log_path,
            log_snapshots=True,
            env_dir=tmp_path / "env",
            name_prefix="schedd-it-measured",
            nodes=(NODE,),
        )
        _, stop, t = start_daemon(slurm_box, cfg)
        try:
            now = time.time()
            wait_for(
                lambda: all(holds.held_by_us(j, now) for j in mine(slurm_box, ids).values()),
                30,
                "the daemon to hold every job while the blocker runs",
            )
            cancel(slurm_box, [blocker])
            wait_for(
                lambda: not any(j.pending or j.running for j in mine(slurm_box, ids).values()),
                240,
                "every job to run to completion under the budget",
                step_s=1.0,
            )
        finally:
            stop_daemon(stop, t)
            cancel(slurm_box, ids)
    snaps = [
        ClusterSnapshot.from_dict(line["snapshot"])
        for line in map(json.loads, log_path.read_text().splitlines())
        if line.get("snapshot")
    ]
    # from the moment the test's blocker (8 GPUs at TDP, deliberately over) is gone
    snaps = [s for s in snaps if blocker not in {r.job_id for r in s.running}]
    assert len(snaps) >= 5
    over = [(s.time_s, s.power_w) for s in snaps if s.power_w > budget + 1e-6]
    assert not over, (budget, over)
    measured = [r.power_w / r.predicted_power_w for s in snaps for r in s.running if r.predicted_power_w]
    assert measured and all(abs(m - 0.6) < 0.05 for m in measured), measured
    # what the GPUs draw, not what was predicted, decides: a third job ran beside two measured ones
    assert max(len(s.running) for s in snaps) >= 3


class FixedPolicy:
    """A policy that always decides the same: the test states the placement, Slurm shows what it made."""

    name = "fixed"

    def __init__(self, decision: Decision) -> None:
        self.decision = decision

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        return self.decision


def test_schedd_pins_untyped_requests_and_publishes_hints_after_slurm_accepts(
    slurm_box: Any, tmp_path: Path
) -> None:
    """Two jobs asking for `--gres=gpu:2` without a type, in the partition of every node (Slurm alone puts
    them on a100-1). The daemon places one on 1 h100 (a count change: Slurm refuses a typed rewrite of an
    untyped request) and the other on 2 h100 (the count already matches: only the type needs pinning).
    Both run where their hints say, and the hints are written after Slurm accepted the placement."""
    from easlurm.priority.snapshot import StartJob

    spec = "model=resnet50,steps=500,batch=64,gpus=1:2"
    common = ["--hold", "-p", "all", "--gres=gpu:2", "--wrap", "sleep 20"]
    ids = [slurm_box.sbatch("-J", f"schedd-it-pin-{i}", comment(spec), *common) for i in range(2)]
    decision = Decision(
        starts=(StartJob(ids[0], NODE, 1, 64, "h100"), StartJob(ids[1], NODE, 2, 64, "h100")),
    )
    env_dir = tmp_path / "env"
    cfg = DaemonConfig(
        interval_s=1.0, env_dir=env_dir, name_prefix="schedd-it-pin", decision_log=tmp_path / "log.jsonl"
    )
    try:
        d = Daemon(client(slurm_box), cfg, policy=FixedPolicy(decision))
        report = d.cycle()  # the jobs are user-held: Slurm cannot start them before the daemon acts
        assert report.error is None and report.outcome is not None
        assert report.outcome.failed == [], report.outcome.failed
        slurm_box.run(["scontrol", "release", *ids])
        wait_for(lambda: all(j.running for j in mine(slurm_box, ids).values()), 60, "the jobs to run")
        jobs = mine(slurm_box, ids)
        for job_id, n in zip(ids, (1, 2), strict=True):
            job = jobs[job_id]
            assert (job.nodes, job.gpu_type, job.gpus_per_node) == (NODE, "h100", n), job
            hints = (env_dir / f"job-{job_id}.env").read_text().splitlines()
            assert f"EASLURM_GPUS={n}" in hints and "EASLURM_GPU_TYPE=h100" in hints
    finally:
        cancel(slurm_box, ids)


def test_schedd_hold_shows_why_in_squeue_and_ends_after_its_ttl_on_an_idle_cluster(
    slurm_box: Any, tmp_path: Path
) -> None:
    """A 2-GPU job under a budget it can never fit (1 W) on an otherwise idle node: squeue shows it waiting
    for its BeginTime until the hold's end, with the daemon's reason in its AdminComment; once held a
    full TTL with nothing running it is released for good and runs while the daemon keeps going."""
    ttl = 12.0  # extended at 6 s: after Slurm's first pass (5 s here) has set the Reason
    jid = slurm_box.sbatch(
        "-J",
        "schedd-it-ttl",
        comment("model=resnet50,steps=500,batch=64,gpus=2"),
        "--begin=now+5",  # gated before Slurm can start it at submission (see the gate test)
        "-p",
        "h100",
        f"--nodelist={NODE}",
        "--gres=gpu:h100:2",
        "--wrap",
        "sleep 30",
    )
    cfg = DaemonConfig(
        policy="charon",
        interval_s=1.0,
        power_budget_w=1.0,
        hold_ttl_s=ttl,
        decision_log=tmp_path / "log.jsonl",
        env_dir=tmp_path / "env",
        name_prefix="schedd-it-ttl",
        nodes=(NODE,),
    )
    _, stop, t = start_daemon(slurm_box, cfg)
    try:
        wait_for(lambda: holds.mark_of(mine(slurm_box, [jid])[jid]) is not None, 10, "the hold")
        held_at = time.monotonic()
        job = mine(slurm_box, [jid])[jid]
        mark = holds.mark_of(job)
        assert mark is not None and mark.why in (holds.WHY_POLICY, holds.WHY_GATE, holds.WHY_BEGIN), (
            job.admin_comment
        )

        def shown() -> bool:
            """squeue's Reason is BeginTime (from Slurm's next pass, 5 s here) and its start time the end
            of the daemon's current hold (extended when half the TTL is left)."""
            now_mark = holds.mark_of(mine(slurm_box, [jid])[jid])
            row = slurm_box.run(["squeue", "-h", "-j", jid, "-o", "%r|%S"]).stdout.strip()
            return now_mark is not None and row == f"BeginTime|{format_timestamp(now_mark.until_s)}"

        wait_for(shown, 10, "squeue to show BeginTime until the hold's end")
        wait_for(lambda: mine(slurm_box, [jid])[jid].running, ttl + 15, "the job to run after one TTL")
        assert time.monotonic() - held_at >= ttl - 2  # the budget held it for its TTL first
        time.sleep(3)  # the daemon keeps cycling: it does not take the job back
        assert mine(slurm_box, [jid])[jid].running
    finally:
        stop_daemon(stop, t)
        cancel(slurm_box, [jid])
