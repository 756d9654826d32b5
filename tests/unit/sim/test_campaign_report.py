"""The campaign report: tables, plots that exist, and the side-by-side reference rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from campaign_fakes import fake_runner

from easlurm.plots import pareto_front
from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import load_rows, run_campaign
from easlurm.sim.report import build_report
from easlurm.units import format_energy

pytest.importorskip("matplotlib", reason="needs the [plots] extra: pip install 'easlurm[plots]'")

PLAN = {
    "name": "rep",
    "hours": 1,
    "seeds": 4,
    "experiments": [
        {"name": "B", "scenarios": ["B"], "policies": ["pollux", "zeus"]},
        {"name": "D", "scenarios": ["D"], "policies": ["pollux", "zeus"], "loads_jobs_per_h": [9, 18, 27]},
        {"name": "share", "scenarios": ["coloc-small"], "policies": ["zeus", "zeus-share"]},
        {
            "name": "budget",
            "scenarios": ["charon-budget"],
            "policies": ["charon", "pollux"],
            "power_budget_w": 4500,
        },
    ],
    "report": {
        "title": "Fake campaign",
        "reference": [
            {
                "claim": "Zeus energy / Pollux energy",
                "experiment": "B",
                "label": "zeus",
                "relative_to": "pollux",
                "metric": "energy_j",
                "thesis": 0.895,
                "why": "fake runner",
            },
            {
                "claim": "Pollux energy",
                "experiment": "B",
                "label": "pollux",
                "metric": "energy_j",
                "thesis": 205.2e6,
            },
        ],
    },
}


PLAN_POLICIES = {p for e in PLAN["experiments"] for p in e["policies"]}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rep")
    run_campaign(parse_plan(PLAN), out, runner=fake_runner, jobs=1)
    return out


def test_report_links_plots_that_exist(results: Path) -> None:
    files = build_report(results, report_cfg=PLAN["report"], title="Fake campaign")
    md = files.markdown.read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert links and set(links) == set(files.plots)
    for rel in links:
        assert (results / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any("vs_load" in p for p in links)
    assert any("power" in p for p in links) and any("pareto" in p for p in links)
    assert files.html is not None and "<table>" in files.html.read_text()
    assert (results / "summary.csv").is_file() and (results / "tests.csv").is_file()


def test_shared_gpu_column_only_where_a_gpu_was_shared(results: Path) -> None:
    """Where the gains of co-location come from: the experiment whose runs shared GPUs shows how many
    jobs did; the others carry no column of zeros."""
    md = build_report(results, report_cfg=PLAN["report"], title="Fake campaign").markdown.read_text()
    sections = {s.split("\n", 1)[0]: s for s in md.split("## Experiment ")[1:]}
    assert "| Jobs shared |" in sections["share"]
    assert "| Jobs shared |" not in sections["B"] and "| Jobs shared |" not in sections["D"]
    header = next(ln for ln in sections["share"].splitlines() if ln.startswith("| Scenario"))
    col = header.split(" | ").index("Jobs shared")
    share_rows = [line for line in sections["share"].splitlines() if line.startswith("| coloc-small")]
    # no load column: the plan set no load
    assert [row.split(" | ")[1] for row in share_rows] == ["zeus", "zeus-share"]
    assert share_rows[0].split(" | ")[col] == "0 [0, 0]" and share_rows[1].split(" | ")[col] != "0 [0, 0]"


def test_every_policy_shows_its_utilisation_per_gpu_type(results: Path) -> None:
    """An idle node type must be visible: each GPU type's utilisation is a column (in %) of every
    experiment's table, with a value for every policy; a type whose value is missing has no column."""
    md = build_report(results, report_cfg=PLAN["report"], title="Fake campaign").markdown.read_text()
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    for section in md.split("## Experiment ")[1:]:
        lines = section.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith("| Scenario"))
        end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
        table = [cells(ln) for ln in lines[start:end] if ln.startswith("| ")]
        header = table[0]
        assert "h100_sxm util (%)" in header and not any("a100" in h for h in header)
        col = header.index("h100_sxm util (%)")
        policy = header.index("Policy")  # after Scenario, and after Load where the plan sets loads
        rows = [r for r in table[1:] if r[policy] in PLAN_POLICIES]
        assert rows
        assert all(50.0 <= float(r[col].split(" ")[0]) <= 90.0 for r in rows)


def test_reference_ratio_is_computed_from_the_runs(results: Path) -> None:
    build_report(results, report_cfg=PLAN["report"])
    rows = [r for r in load_rows(results) if r["experiment"] == "B"]
    mean = lambda lab: sum(r["energy_j"] for r in rows if r["label"] == lab) / 4  # noqa: E731
    ratio = mean("zeus") / mean("pollux")
    md = (results / "report.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| Zeus energy / Pollux energy"))
    assert f"{ratio:.3g}" in line
    assert f"{100 * (ratio / 0.895 - 1):+.0f}%" in line
    # an absolute energy reads in J with an SI prefix, the reference figure and ours alike
    cells = next(ln for ln in md.splitlines() if ln.startswith("| Pollux energy |")).split(" | ")
    assert cells[1] == "205.20MJ" and cells[2].startswith(format_energy(mean("pollux"))), cells


def test_pareto_front_keeps_only_undominated_points() -> None:
    pts = [(10.0, 57.0), (11.0, 51.0), (8.0, 40.0), (9.0, 45.0), (7.0, 50.0)]
    assert pareto_front(pts) == [2, 3, 1]


def test_long_power_series_keeps_its_peaks() -> None:
    import numpy as np

    from easlurm.plots import _envelope

    t = np.arange(200_000, dtype=float)
    p = np.full(t.size, 3000.0)
    p[123_457] = 9000.0
    tt, pp = _envelope(t, p)
    assert tt.size <= 4000 and pp.max() == 9000.0 and pp.min() == 3000.0
    assert np.all(np.diff(tt) >= 0)
    short_t, _ = _envelope(t[:10], p[:10])
    assert short_t.size == 10
