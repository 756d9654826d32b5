"""Without matplotlib (a plain `pip install easlurm`) a report is still written, without plots, saying why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from campaign_fakes import fake_runner

from easlurm import plots
from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import run_campaign
from easlurm.sim.report import build_report

PLAN = {
    "name": "noplots",
    "hours": 1,
    "seeds": 2,
    "experiments": [{"name": "B", "scenarios": ["B"], "policies": ["pollux", "zeus"]}],
}


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing matplotlib fails as it does where the `plots` extra is not installed."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_report_without_matplotlib_has_tables_and_names_the_extra(
    tmp_path: Path, no_matplotlib: None
) -> None:
    assert not plots.available()
    run_campaign(parse_plan(PLAN), tmp_path, runner=fake_runner, jobs=1)
    files = build_report(tmp_path, title="No plots")
    md = files.markdown.read_text()
    assert "| pollux |" in md and "| zeus |" in md
    assert "pip install 'easlurm[plots]'" in md
    assert files.plots == []
    assert not (tmp_path / "plots").exists()
    assert files.html is not None and "easlurm[plots]" in files.html.read_text()
