"""A job's GPU power cap on a node is owned by the job's steps there, on the local Slurm with the fake
NVML (every limit set is in its log): the cap holds across a batch step and two concurrent srun steps
until the last ends; a killed srun step's agent does not take the cap from the batch step; and a cap
whose agents were all killed is restored by the box's periodic check with no next job on the node.

Nothing here depends on the Slurm version: steps take GPUs with `srun --exact --gres`, and the job's
own shell waits on files (never on time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from box_support import mine, wait_for
from spank_support import plugin_with_fake_sensors

from easlurm.accounting.spool import Spool
from easlurm.energy.power_limits import LEDGER_DIR, ledger_path
from easlurm.slurm.box import CAP_CHECK_PERIOD_S

pytestmark = pytest.mark.slurm

DEFAULT_MW = 700_000  # the fake NVML's default (and maximum) limit


def read_limits(path: Path) -> dict[str, int]:
    return json.loads(path.read_text()) if path.exists() else {}


def limit_log(limits: Path, since: float) -> list[dict[str, Any]]:
    """The fake NVML's log of every limit set (beside the limits file) from `since` on."""
    log = Path(f"{limits}.log")
    lines = log.read_text().splitlines() if log.exists() else []
    return [e for e in map(json.loads, lines) if e["t"] >= since]


def history(log: list[dict[str, Any]]) -> dict[int, list[int]]:
    """{GPU index: the limits set on it, in order}."""
    out: dict[int, list[int]] = {}
    for e in log:
        out.setdefault(e["index"], []).append(e["to_mw"])
    return out


def capped_job(box: Any, spool: Path, tmp_path: Path, name: str, body: str, limit_w: float) -> str:
    """A held 2-task job on 2 GPUs of one h100 node whose scheduler env file asks for `limit_w`,
    released once the file is there."""
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    job = box.sbatch(
        "-H", "-J", name, "-p", "h100", "-N1", "-n2", "--gres=gpu:h100:2", "--energy-profile=gpu",
        "-o", str(tmp_path / f"{name}.out"), str(script),
    )  # fmt: skip
    (spool / "sched").mkdir(mode=0o755, exist_ok=True)
    (spool / "sched" / f"job-{job}.env").write_text(f"EASLURM_POWER_LIMIT_W={limit_w:g}\n")
    box.run(["scontrol", "release", job])
    return str(job)


def until(test: str, what: str) -> str:
    """A shell loop waiting (at most ~2 minutes) for `test`; says so in the job's output if it never came."""
    return f'for i in $(seq 600); do {test} && break; sleep 0.2; done; {test} || echo "never: {what}"'


def ledger_of(spool: Path, job: str) -> dict[str, Any] | None:
    path = next(iter((spool / LEDGER_DIR).glob(f"{job}.*.json")), None)
    try:
        return json.loads(path.read_text()) if path else None
    except (OSError, ValueError):  # replaced while read
        return None


def refs(spool: Path, job: str) -> dict[str, int]:
    """{step: agent pid} of the job's ledger (its only node)."""
    ledger = ledger_of(spool, job)
    return {r["step"]: r["pid"] for r in ledger["refs"]} if ledger else {}


def test_the_cap_holds_across_a_batch_step_and_two_concurrent_sruns(slurm_box: Any, tmp_path: Path) -> None:
    limits = tmp_path / "limits.json"
    d = tmp_path
    since = time.time()
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_LIMITS_FILE={limits}") as spool:
        capped = f"grep -q 250000 {limits}"
        # each srun step waits for the other (they run together) and for the cap, then reads the limits
        srun = [
            f"srun -n1 --exact --gres=gpu:h100:1 bash -c 'touch {d}/{me}; "
            f"{until(f'[ -e {d}/{other} ] && {capped}', 'the other step')}; cat {limits} > {d}/{me}.json'"
            for me, other in (("s1", "s2"), ("s2", "s1"))
        ]
        # after both sruns: their agents have left (each writes its node record after leaving the cap)
        records = " && ".join(f"[ -e {Spool(spool).node_file('$SLURM_JOB_ID', s, 0)} ]" for s in ("0", "1"))
        body = "\n".join(
            [
                until(capped, "the cap"),
                f"{srun[0]} &",
                f"{srun[1]} &",
                "wait",
                until(records, "the srun steps' records"),
                f"cat {limits} > {d}/after-sruns.json",
            ]
        )
        job = capped_job(slurm_box, spool, tmp_path, "cap-sruns", body, 250)
        assert slurm_box.wait_job(job, timeout_s=240) == "COMPLETED", (d / "cap-sruns.out").read_text()
        wait_for(lambda: ledger_of(spool, job) is None, 60, "the last step to restore the cap")
    out = (d / "cap-sruns.out").read_text()
    assert "never" not in out, out
    for name in ("s1", "s2", "after-sruns"):  # both srun steps ran capped; so did the batch step after them
        seen = json.loads((d / f"{name}.json").read_text())
        assert sorted(seen.values())[:2] == [250_000, 250_000], (name, seen)
    # the whole job: one cap and one restore per GPU, nothing between
    gpus = history(limit_log(limits, since))
    assert len(gpus) == 2 and all(h == [250_000, DEFAULT_MW] for h in gpus.values()), gpus
    assert all(v == DEFAULT_MW for v in read_limits(limits).values())


def test_a_killed_sruns_agent_leaves_the_cap_to_the_batch_step(slurm_box: Any, tmp_path: Path) -> None:
    """The srun step's agent is SIGKILLed while its step runs: the batch step's agent still holds the
    cap (the box's check, run by hand here, leaves it), and restores it at its end."""
    limits = slurm_box.box.paths.fake_nvml_limits
    d = tmp_path
    since = time.time()
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_LIMITS_FILE={limits}") as spool:
        body = "\n".join(
            [
                f"srun -n1 --exact --gres=gpu:h100:1 bash -c '{until(f'[ -e {d}/go ]', 'go')}'",
                f"cat {limits} > {d}/after-srun.json",
                until(f"[ -e {d}/end ]", "end"),
            ]
        )
        job = capped_job(slurm_box, spool, tmp_path, "cap-kill-srun", body, 300)
        try:
            wait_for(lambda: mine(slurm_box, [job])[job].running, 180, f"job {job} to run")
            wait_for(lambda: set(refs(spool, job)) == {"batch", "0"}, 120, "both steps to hold the cap")
            os.kill(refs(spool, job)["0"], signal.SIGKILL)
            (d / "go").touch()
            wait_for(lambda: (d / "after-srun.json").exists(), 120, "the srun step to end")
            check = restore_caps(slurm_box)
            assert (check.returncode, check.stdout) == (0, ""), check.stderr
            assert 300_000 in read_limits(limits).values()
        finally:
            (d / "end").touch()
        assert slurm_box.wait_job(job, timeout_s=120) == "COMPLETED"
        wait_for(lambda: ledger_of(spool, job) is None, 60, "the batch step to restore the cap")
    seen = json.loads((d / "after-srun.json").read_text())
    assert sorted(seen.values()).count(300_000) >= 2, seen  # the batch step's 2 GPUs still capped
    gpus = history(limit_log(limits, since))
    assert len(gpus) == 2 and all(h == [300_000, DEFAULT_MW] for h in gpus.values()), gpus


def restore_caps(box: Any) -> subprocess.CompletedProcess[str]:
    """The box's periodic check, run once now."""
    env = {**box.env, **box.box.cap_check_env()}
    return subprocess.run(box.box.cap_check_argv(), capture_output=True, text=True, env=env, timeout=120)


def test_a_cap_whose_agents_died_is_restored_with_no_next_job(slurm_box: Any, tmp_path: Path) -> None:
    """The batch step's agent (the job's only step) is SIGKILLed and the job cancelled; no job comes
    after it on that node: the box's periodic check (a site's timer) restores the GPUs."""
    limits = slurm_box.box.paths.fake_nvml_limits
    since = time.time()
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_LIMITS_FILE={limits}") as spool:
        job = capped_job(slurm_box, spool, tmp_path, "cap-orphan", "sleep 300", 350)
        try:
            wait_for(lambda: mine(slurm_box, [job])[job].running, 180, f"job {job} to run")
            wait_for(lambda: "batch" in refs(spool, job), 120, "the batch step to cap")
            node = ledger_of(spool, job)["node"]  # type: ignore[index]
            agent = refs(spool, job)["batch"]
            os.kill(agent, signal.SIGKILL)
        finally:
            slurm_box.run(["scancel", job], check=False)
        assert slurm_box.wait_job(job, timeout_s=120) == "CANCELLED"
        wait_for(
            lambda: not ledger_path(spool, int(job), node).exists(),
            4 * CAP_CHECK_PERIOD_S + 60,
            "the periodic check",
        )
    gpus = history(limit_log(limits, since))
    assert len(gpus) == 2 and all(h == [350_000, DEFAULT_MW] for h in gpus.values()), gpus
    restorers = {e["pid"] for e in limit_log(limits, since) if e["to_mw"] == DEFAULT_MW}
    assert agent not in restorers
    assert all(v == DEFAULT_MW for v in read_limits(limits).values())
