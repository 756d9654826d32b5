"""A tiny campaign through the real simulator: deterministic per seed whatever the parallelism."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import TIMING_METRICS, run_campaign

PLAN = {"name": "e2e", "hours": 1, "seeds": 2, "scenarios": ["B"], "policies": ["pollux", "zeus"]}


def _without_wall(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_METRICS} for r in rows]


def test_tiny_campaign_with_the_simulator(tmp_path: Path) -> None:
    pytest.importorskip("easlurm.sim.runner")
    plan = parse_plan(PLAN)
    serial = run_campaign(plan, tmp_path / "a", jobs=1)
    parallel = run_campaign(plan, tmp_path / "b", jobs=2)
    assert not serial.failed and not parallel.failed
    assert len(serial.rows) == 4
    assert _without_wall(serial.rows) == _without_wall(parallel.rows)
    for row in serial.rows:
        assert row["energy_j"] is not None and row["energy_j"] > 0
        assert row["completed_jobs"] is not None and row["completed_jobs"] >= 0
    seeds = {r["seed"]: r["energy_j"] for r in serial.rows if r["label"] == "zeus"}
    assert seeds[0] != seeds[1]  # the seed changes the workload


def test_report_of_the_tiny_campaign(tmp_path: Path) -> None:
    pytest.importorskip("easlurm.sim.runner")
    pytest.importorskip("matplotlib")
    from easlurm.sim.report import build_report

    run_campaign(parse_plan(PLAN), tmp_path, jobs=1)
    files = build_report(tmp_path, n_boot=200)
    assert files.plots and all((tmp_path / p).is_file() for p in files.plots)
    assert "pollux" in files.markdown.read_text()
