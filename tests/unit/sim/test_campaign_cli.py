"""`easlurm sim campaign` / `easlurm sim report` wiring, and the Slurm array script (no Slurm needed)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from campaign_fakes import fake_runner

from easlurm.cli import main
from easlurm.errors import SlurmError
from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import run_campaign
from easlurm.sim.campaign_slurm import array_script, plan_chunks, submit_array

PLAN = {"name": "cli", "hours": 1, "seeds": 2, "scenarios": ["B"], "policies": ["pollux", "zeus"]}


def test_dry_run_lists_the_expanded_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    assert main(["sim", "campaign", str(plan), "--dry-run", "--only-index", "1-2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = parse_plan(PLAN).runs()
    assert lines == [f"{r.index}\t{r.run_id}" for r in runs[1:3]]


def test_bad_plan_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(dict(PLAN, seeds="many")))
    assert main(["sim", "campaign", str(plan), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("easlurm: error:") and "seeds" in err and str(plan) in err
    assert len(err.splitlines()) == 1


def test_report_command_writes_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    run_campaign(parse_plan(PLAN), tmp_path, runner=fake_runner)
    assert main(["sim", "report", str(tmp_path), "--no-html", "--bootstrap", "200"]) == 0
    assert "report.md" in capsys.readouterr().out
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "report.html").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["sim", "report", str(empty)]) == 2


def test_chunks_cover_every_run_once() -> None:
    for n_runs in (1, 7, 64, 65, 350):
        chunk, n_tasks = plan_chunks(n_runs, 64)
        assert n_tasks <= 64 and chunk * n_tasks >= n_runs > chunk * (n_tasks - 1)
    with pytest.raises(SlurmError):
        plan_chunks(0, 8)


def test_array_script_runs_one_chunk_per_task(tmp_path: Path) -> None:
    text = array_script(
        tmp_path / "p.yaml", tmp_path / "out dir", chunk_size=5, n_tasks=3, partition="cpu", python="/py"
    )
    assert "#SBATCH --array=0-2" in text and "#SBATCH --partition=cpu" in text
    cmd = shlex.split(text.strip().splitlines()[-1])
    assert cmd[:5] == ["/py", "-m", "easlurm.cli", "sim", "campaign"]
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "out dir")
    assert cmd[cmd.index("--chunk-size") + 1] == "5" and cmd[-2:] == ["--chunk", "$SLURM_ARRAY_TASK_ID"]


def test_missing_sbatch_is_a_slurm_error(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="cannot run"):
        submit_array(tmp_path / "p.yaml", tmp_path, 3, sbatch=(str(tmp_path / "no-sbatch"),))
