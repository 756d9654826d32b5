"""Run a campaign's runs in parallel processes, one JSON record per run (resumable), then results.csv."""

from __future__ import annotations

import csv
import json
import logging
import math
import multiprocessing
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easlurm.errors import EaslurmError
from easlurm.files import atomic_writer, write_text_atomic
from easlurm.sim.campaign import SCHEMA_VERSION, CampaignPlan, Run, select_runs
from easlurm.sim.runner import run_simulation
from easlurm.sim.spec import SimSpec

log = logging.getLogger(__name__)

#: A runner turns a spec into a JSON-safe result dict holding at least a flat "metrics" mapping.
RunFn = Callable[[SimSpec], Mapping[str, Any]]

RUNS_DIR = "runs"
#: Metrics that measure the machine, not the simulated cluster: they differ between identical runs.
TIMING_METRICS = frozenset({"wall_s", "events_per_s", "runner_wall_s"})
#: Columns every results row starts with; the metrics follow in sorted order.
ID_COLUMNS = (
    "index",
    "run_id",
    "experiment",
    "scenario",
    "label",
    "policy",
    "seed",
    "load_jobs_per_h",
    "power_budget_w",
    "hours",
)


def simulate_spec(spec: SimSpec) -> dict[str, Any]:
    """The default runner: the SimPy simulator, imported here so that plans load without it."""
    result = run_simulation(spec)
    out: dict[str, Any] = result.to_dict()
    return out


@dataclass
class CampaignOutcome:
    """What a campaign call did: the rows of every selected run present on disk, in plan order."""

    rows: list[dict[str, Any]]
    executed: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def record_path(out_dir: Path, run: Run) -> Path:
    return out_dir / RUNS_DIR / f"{run.run_id}.json"


def _normal_spec(spec: SimSpec) -> Any:
    return json.loads(json.dumps(spec.to_dict()))


def _clean(value: Any) -> Any:
    """NaN/inf -> None so the JSON is standard and a missing value stays missing (never 0)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _clean(value.tolist())
    return value


def read_record(path: Path) -> dict[str, Any] | None:
    """A saved run record, or None when it is absent or unreadable (a crash mid-write is rerun)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        return None
    spec, result = doc.get("spec"), doc.get("result")
    if not isinstance(spec, dict) or not isinstance(result, dict) or not doc.keys() >= _RECORD_KEYS:
        return None  # a record without its spec or result (edited, or another tool's) is rerun, not read
    if not spec.keys() >= _SPEC_KEYS:
        return None
    return doc


#: what row_of reads of a record and of its spec
_RECORD_KEYS = frozenset({"index", "run_id", "experiment", "label", "spec", "result"})
_SPEC_KEYS = frozenset({"scenario", "policy", "seed", "load_jobs_per_h", "power_budget_w", "hours"})


#: Run records written before energies were kept in J name them `*energy*_kwh`: read as `*_j`, so a
#: campaign resumed on old runs, or reported again, has one key and one unit per quantity.
_J_PER_KWH = 3.6e6


def _metric_in_si(key: str, value: Any) -> tuple[str, Any]:
    if "energy" in key and key.endswith("_kwh"):
        return key[: -len("_kwh")] + "_j", None if value is None else value * _J_PER_KWH
    return key, value


def row_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The flat results row of a record: the run's coordinates, then its scalar metrics."""
    spec = record["spec"]
    row: dict[str, Any] = {
        "index": record["index"],
        "run_id": record["run_id"],
        "experiment": record["experiment"],
        "scenario": spec["scenario"],
        "label": record["label"],
        "policy": spec["policy"],
        "seed": spec["seed"],
        "load_jobs_per_h": spec["load_jobs_per_h"],
        "power_budget_w": spec["power_budget_w"],
        "hours": spec["hours"],
    }
    for key, value in (record["result"].get("metrics") or {}).items():
        if isinstance(value, bool):
            continue
        key, value = _metric_in_si(key, value)
        if key in row:
            continue
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            row[key] = _clean(float(value)) if value is not None else None
    return row


def execute_run(run: Run, out_dir: Path, runner: RunFn) -> dict[str, Any]:
    """Run one spec and write its record atomically; returns the record."""
    t0 = time.perf_counter()
    result = _clean(dict(runner(run.spec)))
    if not isinstance(result.get("metrics"), Mapping):
        raise EaslurmError(f"run {run.run_id}: the runner returned no 'metrics' mapping")
    record = {
        "schema_version": SCHEMA_VERSION,
        "index": run.index,
        "run_id": run.run_id,
        "experiment": run.experiment,
        "label": run.label,
        "spec": _normal_spec(run.spec),
        "runner_wall_s": time.perf_counter() - t0,
        "result": result,
    }
    write_text_atomic(record_path(out_dir, run), json.dumps(record, separators=(",", ":"), allow_nan=False))
    return record


def pending_runs(runs: Sequence[Run], out_dir: str | Path) -> list[Run]:
    """The runs without a valid record for their exact spec under `out_dir` (what a rerun would do)."""
    out = Path(out_dir)
    todo = []
    for run in runs:
        rec = read_record(record_path(out, run))
        if rec is None or rec.get("spec") != _normal_spec(run.spec):
            todo.append(run)
    return todo


def _worker(task: tuple[Run, str, RunFn]) -> tuple[int, dict[str, Any] | None, str | None]:
    """Pool entry point: errors come back as text so one bad run does not stop the campaign."""
    run, out_dir, runner = task
    try:
        return run.index, row_of(execute_run(run, Path(out_dir), runner)), None
    except Exception as exc:  # reported per run; the campaign goes on
        log.debug("run %s failed", run.run_id, exc_info=True)
        return run.index, None, f"{type(exc).__name__}: {exc}"


def run_campaign(
    plan: CampaignPlan,
    out_dir: str | Path,
    *,
    runner: RunFn = simulate_spec,
    jobs: int = 1,
    indices: Iterable[int] | None = None,
    progress: Callable[[int], None] | None = None,
    write_results: bool = True,
) -> CampaignOutcome:
    """Run the selected runs not already on disk with `jobs` processes, then (re)write the results tables.

    Results do not depend on `jobs` or on completion order: each run is seeded by its spec alone.
    `progress` is called with the number of runs just finished (skipped runs count at once).
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    selected = select_runs(plan.runs(), indices)
    todo = pending_runs(selected, out)
    pending = {run.index for run in todo}
    rows: dict[int, dict[str, Any]] = {}
    for run in selected:
        if run.index not in pending:
            rec = read_record(record_path(out, run))
            if rec is not None:
                rows[run.index] = row_of(rec)
    outcome = CampaignOutcome(rows=[], skipped=len(rows))
    if progress and rows:
        progress(len(rows))
    log.info(
        "campaign %s: %d runs, %d already done, %d to run", plan.name, len(selected), len(rows), len(todo)
    )
    tasks = [(run, str(out), runner) for run in todo]
    by_index = {run.index: run for run in todo}
    if jobs <= 1 or len(tasks) <= 1:
        results: Iterable[tuple[int, dict[str, Any] | None, str | None]] = map(_worker, tasks)
        _collect(results, rows, outcome, by_index, progress)
    else:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(processes=min(jobs, len(tasks))) as pool:
            _collect(pool.imap_unordered(_worker, tasks), rows, outcome, by_index, progress)
    outcome.rows = [rows[i] for i in sorted(rows)]
    if write_results:
        write_tables(out, load_rows(out))
    outcome.wall_s = time.perf_counter() - t0
    return outcome


def _collect(
    results: Iterable[tuple[int, dict[str, Any] | None, str | None]],
    rows: dict[int, dict[str, Any]],
    outcome: CampaignOutcome,
    by_index: Mapping[int, Run],
    progress: Callable[[int], None] | None,
) -> None:
    for index, row, error in results:
        if row is not None:
            rows[index] = row
            outcome.executed += 1
        else:
            run_id = by_index[index].run_id
            outcome.failed[run_id] = error or "unknown error"
            log.error("run %s failed: %s", run_id, error)
        if progress:
            progress(1)


def load_records(out_dir: str | Path) -> list[dict[str, Any]]:
    """Every valid run record under `out_dir/runs`, in plan order."""
    records = [r for p in sorted((Path(out_dir) / RUNS_DIR).glob("*.json")) if (r := read_record(p))]
    return sorted(records, key=lambda r: (r["index"], r["run_id"]))


def load_rows(out_dir: str | Path) -> list[dict[str, Any]]:
    return [row_of(r) for r in load_records(out_dir)]


def metric_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The metric names present in any row, sorted (the columns after ID_COLUMNS)."""
    return sorted({k for row in rows for k in row} - set(ID_COLUMNS))


def write_tables(out_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """results.csv (one row per run, blank = missing) and results.json (the same rows)."""
    columns = [*ID_COLUMNS, *metric_columns(rows)]
    with atomic_writer(out_dir / "results.csv", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    doc = {"schema_version": SCHEMA_VERSION, "columns": columns, "rows": [_clean(dict(r)) for r in rows]}
    write_text_atomic(out_dir / "results.json", json.dumps(doc, indent=1, allow_nan=False))
