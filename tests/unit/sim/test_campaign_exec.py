"""The campaign executor: determinism whatever the parallelism, resumability, per-run failures, tables."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from campaign_fakes import failing_runner, fake_runner

from easlurm.sim.campaign import parse_plan
from easlurm.sim.campaign_run import load_rows, record_path, row_of, run_campaign

PLAN = {
    "name": "exec",
    "hours": 1,
    "seeds": 3,
    "scenarios": ["B"],
    "policies": ["pollux", "zeus"],
    "loads_jobs_per_h": [9, 18],
}


def test_parallel_and_serial_give_the_same_rows(tmp_path: Path) -> None:
    plan = parse_plan(PLAN)
    seen: list[int] = []
    serial = run_campaign(plan, tmp_path / "a", runner=fake_runner, jobs=1, progress=seen.append)
    parallel = run_campaign(plan, tmp_path / "b", runner=fake_runner, jobs=2)
    assert serial.executed == parallel.executed == len(plan.runs()) == 12
    assert sum(seen) == 12
    assert serial.rows == parallel.rows
    assert [r["index"] for r in parallel.rows] == list(range(12))
    for name in ("results.csv", "results.json"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()


def test_rerun_skips_finished_runs_and_redoes_missing_ones(tmp_path: Path) -> None:
    plan = parse_plan(PLAN)
    first = run_campaign(plan, tmp_path, runner=fake_runner)
    again = run_campaign(plan, tmp_path, runner=fake_runner)
    assert (again.executed, again.skipped) == (0, 12)
    assert again.rows == first.rows
    victim = plan.runs()[5]
    record_path(tmp_path, victim).unlink()
    record_path(tmp_path, plan.runs()[6]).write_text("{truncated")  # a crash mid-write
    third = run_campaign(plan, tmp_path, runner=fake_runner)
    assert (third.executed, third.skipped) == (2, 10)
    assert third.rows == first.rows


def test_changed_spec_is_rerun(tmp_path: Path) -> None:
    run_campaign(parse_plan(PLAN), tmp_path, runner=fake_runner)
    changed = run_campaign(parse_plan(dict(PLAN, hours=2)), tmp_path, runner=fake_runner)
    assert changed.executed == 12


def test_a_failing_run_does_not_stop_the_others(tmp_path: Path) -> None:
    plan = parse_plan(dict(PLAN, policies=["zeus", "broken"], loads_jobs_per_h=[18]))
    out = run_campaign(plan, tmp_path, runner=failing_runner, jobs=2)
    assert out.executed == 3 and len(out.failed) == 3
    assert all("simulated crash" in msg for msg in out.failed.values())
    assert {r["label"] for r in out.rows} == {"zeus"}
    assert not any(record_path(tmp_path, r).exists() for r in plan.runs() if r.label == "broken")


def test_only_selected_indices_run(tmp_path: Path) -> None:
    plan = parse_plan(PLAN)
    out = run_campaign(plan, tmp_path, runner=fake_runner, indices=[0, 11])
    assert [r["index"] for r in out.rows] == [0, 11]
    assert len(list((tmp_path / "runs").glob("*.json"))) == 2


def test_results_csv_one_row_per_run_and_missing_stays_blank(tmp_path: Path) -> None:
    plan = parse_plan(PLAN)
    run_campaign(plan, tmp_path, runner=fake_runner)
    with open(tmp_path / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 12
    assert {r["run_id"] for r in rows} == {r.run_id for r in plan.runs()}
    assert all(r["util_a100-40gb"] == "" for r in rows)  # NaN in, blank out (never 0)
    assert all(float(r["energy_j"]) > 0 for r in rows)
    rec = json.loads(record_path(tmp_path, plan.runs()[0]).read_text())
    assert rec["spec"]["policy"] == "pollux" and len(rec["result"]["power_w"]) == 40
    assert load_rows(tmp_path)[0]["run_id"] == plan.runs()[0].run_id


def test_run_records_from_before_joules_read_in_joules() -> None:
    """A run record written when energies were kWh (`energy_kwh` ...) reads as `energy_j` in J, so a
    campaign resumed on old runs has one key and one unit per quantity."""
    spec = {"scenario": "B", "policy": "zeus", "seed": 0, "load_jobs_per_h": None, "power_budget_w": None}
    metrics = {"energy_kwh": 2.0, "energy_per_job_kwh": None, "mean_jct_s": 60.0, "max_power_w": 500.0}
    record = {"index": 0, "run_id": "r", "experiment": "E", "label": "zeus", "spec": {**spec, "hours": 1.0}}
    row = row_of({**record, "result": {"metrics": metrics}})
    assert row["energy_j"] == 7.2e6 and row["energy_per_job_j"] is None
    assert not any(k.endswith("_kwh") for k in row) and row["mean_jct_s"] == 60.0


def test_a_run_record_without_its_spec_is_rerun_not_read(tmp_path: Path) -> None:
    """A record that lost its spec (or a key of it) reads as absent: the resumed campaign reruns that run
    instead of failing with a KeyError, and the other runs' records are kept."""
    plan = parse_plan(PLAN)
    run_campaign(plan, tmp_path, runner=fake_runner)
    broken, no_seed = record_path(tmp_path, plan.runs()[0]), record_path(tmp_path, plan.runs()[1])
    rec = json.loads(broken.read_text())
    del rec["spec"]
    broken.write_text(json.dumps(rec))
    rec = json.loads(no_seed.read_text())
    del rec["spec"]["seed"]
    no_seed.write_text(json.dumps(rec))
    again = run_campaign(plan, tmp_path, runner=fake_runner)
    assert again.executed == 2
    assert [r["index"] for r in again.rows] == list(range(12))
