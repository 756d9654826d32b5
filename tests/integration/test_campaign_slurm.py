"""`easlurm sim campaign --slurm`: the campaign as a job array on the local cluster, same results as locally."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from easlurm.sim.campaign_run import TIMING_METRICS

pytestmark = pytest.mark.slurm

PLAN = {"name": "slurm", "hours": 0.5, "seeds": 3, "scenarios": ["B"], "policies": ["pollux", "zeus"]}
FAKES = Path(__file__).resolve().parents[1] / "unit" / "sim"


def _metrics(rows: list[dict]) -> dict[str, dict]:
    return {r["run_id"]: {k: v for k, v in r.items() if k not in TIMING_METRICS} for r in rows}


def _array_states(slurm_box, out: Path, n_tasks: int, timeout_s: float = 30.0) -> dict[str, str]:
    """The array's task states in sacct, found from the task log names (task-<job>_<task>.out).

    Accounting is written after `sbatch --wait` returns: wait until every task has its own row."""
    logs = sorted((out / "slurm").glob("task-*.out"))
    job_ids = {p.name.split("-")[1].split("_")[0] for p in logs}
    assert len(job_ids) == 1, logs
    job_id = job_ids.pop()
    end = time.monotonic() + timeout_s
    while True:
        res = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State"])
        states = dict(line.split("|") for line in res.stdout.split())
        if len(states) >= n_tasks or time.monotonic() > end:
            return states
        time.sleep(0.5)


def _submit(tmp_path: Path, out: Path, *extra: str) -> int:
    from easlurm.cli import main

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    argv = ["sim", "campaign", str(plan), "--out", str(out), "--slurm", "--partition", "cpu", "--no-report"]
    return main([*argv, *extra])


def test_array_of_chunks_runs_every_run_once(slurm_box, tmp_path: Path, monkeypatch) -> None:
    """With the injected fake runner: 6 runs in 3 tasks of 2, each writing into the shared out dir."""
    monkeypatch.syspath_prepend(str(FAKES))
    from campaign_fakes import fake_runner

    from easlurm.sim.campaign import parse_plan
    from easlurm.sim.campaign_run import load_rows, run_campaign

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "out"
    assert _submit(tmp_path, out, "--max-tasks", "3", "--runner", "campaign_fakes:fake_runner") == 0
    rows = load_rows(out)
    assert len(rows) == 6 and (out / "results.csv").is_file()
    assert "#SBATCH --array=0-2" in (out / "slurm" / "campaign.sbatch").read_text()
    states = _array_states(slurm_box, out, 3)
    assert len(states) == 3 and set(states.values()) == {"COMPLETED"}
    local = run_campaign(parse_plan(PLAN), tmp_path / "local", runner=fake_runner)
    assert _metrics(local.rows) == _metrics(rows)
    # everything is done: a second call submits nothing and still succeeds
    script = out / "slurm" / "campaign.sbatch"
    script.unlink()
    assert _submit(tmp_path, out, "--runner", "campaign_fakes:fake_runner") == 0
    assert not script.exists()


def test_failed_task_is_reported(slurm_box, tmp_path: Path) -> None:
    """A runner that cannot be loaded fails every task: the command says how many runs are missing."""
    assert _submit(tmp_path, tmp_path / "out", "--max-tasks", "1", "--runner", "no_such_module:run") == 2


def test_simulator_campaign_on_slurm_matches_local(slurm_box, tmp_path: Path) -> None:
    pytest.importorskip("easlurm.sim.runner")
    from easlurm.sim.campaign import parse_plan
    from easlurm.sim.campaign_run import load_rows, run_campaign

    out = tmp_path / "out"
    assert _submit(tmp_path, out, "--max-tasks", "2") == 0
    rows = load_rows(out)
    assert len(rows) == 6
    local = run_campaign(parse_plan(PLAN), tmp_path / "local", jobs=1)
    assert _metrics(local.rows) == _metrics(rows)
