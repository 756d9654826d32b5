"""Rendered reports say what the runs hold: no column or table without content, readable numbers and
durations, no test on one seed, unknown fairness left unknown, and a sentence on where policies differ."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from easlurm.sim.metrics import jain_index
from easlurm.sim.report import write_report
from easlurm.units import format_duration, format_number

BASE = {
    "throughput_jobs_per_h": 10.0,
    "energy_j": 50.0,
    "busy_energy_j": 40.0,
    "idle_energy_j": 10.0,
    "energy_per_job_j": 5.0,
    "completed_jobs": 10.0,
    "mean_jct_s": 3600.0,
    "jain_index": 0.9,
}


def _record(i: int, label: str, seed: int, load: float | None = None, **metrics: Any) -> dict[str, Any]:
    spec = {
        "scenario": "S",
        "policy": label,
        "seed": seed,
        "load_jobs_per_h": load,
        "power_budget_w": None,
        "hours": 1.0,
    }
    result = {"metrics": {**BASE, **metrics}}
    return {"index": i, "run_id": f"r{i}", "experiment": "E", "label": label, "spec": spec, "result": result}


def _render(tmp_path: Path, records: list[dict[str, Any]]) -> str:
    cfg = {"plots": {"E": []}}
    return write_report(
        records, tmp_path, title="T", report_cfg=cfg, html_too=False, n_boot=200
    ).markdown.read_text()


def _seeds(labels: dict[str, dict[str, float]], n: int, load: float | None = None) -> list[dict[str, Any]]:
    """n seeds per label; each seed adds a small jitter so CIs have a width."""
    out = []
    for label, metrics in labels.items():
        for seed in range(n):
            jittered = {k: v * (1 + 0.001 * seed) for k, v in metrics.items()}
            out.append(_record(len(out), label, seed, load, **jittered))
    return out


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (1.0, "1"),
        (0.0123, "0.0123"),
        (45.6, "45.6"),
        (999.4, "999"),
        (999.5, "1,000"),
        (2200.0, "2,200"),
    ],
)
def test_numbers_have_three_digits_and_no_exponent(value: float, text: str) -> None:
    assert format_number(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45.0, "45 s"), (750.0, "12.5 min"), (18720.0, "5.2 h"), (2200 * 3600.0, "91.7 d"), (None, "")],
)
def test_durations_read_in_the_unit_a_person_uses(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_no_load_column_where_the_plan_set_no_load(tmp_path: Path) -> None:
    """A column of "default" says nothing: it is left out; with loads, each row shows its own."""
    md = _render(tmp_path, _seeds({"a": {}, "b": {}}, 3))
    assert "Load (jobs/h)" not in md and "default" not in md
    md = _render(tmp_path, _seeds({"a": {}, "b": {}}, 3, load=12.0))
    assert "| Load (jobs/h) |" in md and "| S | 12 | a |" in md


def test_one_seed_per_cell_gives_no_test_table(tmp_path: Path) -> None:
    """A Mann-Whitney test of one value against one is no test: a sentence says so, not rows of `1 / -`."""
    md = _render(tmp_path, _seeds({"a": {}, "b": {"energy_j": 60.0}}, 1))
    assert "one seed: no test" in md
    assert "| Policy A |" not in md and "1 / -" not in md
    md = _render(tmp_path, _seeds({"a": {}, "b": {"energy_j": 60.0}}, 3))
    assert "| Policy A |" in md and "one seed: no test" not in md


def test_long_durations_have_no_exponent(tmp_path: Path) -> None:
    md = _render(tmp_path, _seeds({"a": {"mean_jct_s": 2200 * 3600.0}, "b": {}}, 1))
    assert "e+0" not in md and "| 7,920,000 |" in md  # JCT in seconds, as in `sim run`


def test_jain_index_of_one_user_is_unknown_not_perfect(tmp_path: Path) -> None:
    """One user (or none named) gives no fairness between users: blank, and the report says why."""
    assert math.isnan(jain_index([7200.0]))
    assert jain_index([3.0, 3.0]) == pytest.approx(1.0)
    md = _render(tmp_path, _seeds({"a": {"jain_index": math.nan}, "b": {"jain_index": math.nan}}, 2))
    assert "| Jain JCT |" not in md and "fairness between users is unknown" in md


def test_a_sentence_names_the_metric_that_differs_and_its_driver(tmp_path: Path) -> None:
    """Energy apart beyond the CIs, the gap made of idle energy: the sentence names both."""
    heavy = {"energy_j": 58.0, "idle_energy_j": 17.0, "busy_energy_j": 41.0, "energy_per_job_j": 5.8}
    md = _render(tmp_path, _seeds({"lean": {}, "heavy": heavy}, 4))
    line = next(x for x in md.splitlines() if "the policies differ" in x)
    assert line.startswith("E / S: ")
    assert "energy from 50" in line and "under lean to 58" in line and "under heavy" in line
    assert "mostly idle energy" in line and "mean JCT" not in line


def test_a_sentence_says_why_policies_do_not_differ(tmp_path: Path) -> None:
    """No job waited: nothing to reorder, so the policies agree, and the report says that is why."""
    same = {"queued_jobs": 0.0, "max_wait_s": 5.0}
    md = _render(tmp_path, _seeds({"a": same, "b": same}, 3))
    line = next(x for x in md.splitlines() if "do not differ" in x)
    assert "not congested: no job waited more than 60 s" in line


def test_jct_gap_is_put_down_to_waiting_where_the_runs_count_waits(tmp_path: Path) -> None:
    slow = {"mean_jct_s": 9000.0, "queued_jobs": 40.0, "max_wait_s": 7200.0}
    md = _render(tmp_path, _seeds({"fast": {"queued_jobs": 2.0, "max_wait_s": 90.0}, "slow": slow}, 3))
    line = next(x for x in md.splitlines() if "the policies differ" in x)
    assert "mean JCT from 1 h under fast to 2.5 h under slow" in line
    assert "40 jobs queued under slow (longest wait 2 h)" in line and "(1.5 min)" in line


def test_an_empty_table_is_a_sentence(tmp_path: Path) -> None:
    from easlurm.sim.report import _Doc

    doc = _Doc()
    doc.table(["A", "B"], [], "Nothing to show.")
    assert doc.markdown().strip() == "Nothing to show."


def test_a_label_with_one_run_is_left_out_of_the_tests(tmp_path: Path) -> None:
    """A replay's recorded row is one run against several seeds: its pairs are not tested, and said so."""
    records = _seeds({"a": {}, "b": {"energy_j": 60.0}}, 3)
    records.append(_record(len(records), "recorded", 0))
    md = _render(tmp_path, records)
    assert "Not tested, one run only: recorded." in md
    assert "| a | b |" in md and "| recorded |" not in md.split("Not tested")[1]
