"""`easlurm model calibrate` and `easlurm model evaluate`: fit the oracle to a measurement CSV and report
its cross-validated error beside a baseline's."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from easlurm.cli import int_range, load_ctx_config, output_options, text_list
from easlurm.errors import ConfigError
from easlurm.files import check_writable, write_text_atomic
from easlurm.model.build import apply_oracle_config
from easlurm.model.cli import HARDWARE_OPTION, ctx_oracle
from easlurm.model.fit.baseline import baseline_fitter, resolve_kind
from easlurm.model.fit.calibrate import (
    CalibrationResult,
    FitReport,
    calibrate,
    comm_free,
    cross_validate,
    feasible_rows,
    score,
)
from easlurm.model.fit.dataset import Measurement, read_measurements
from easlurm.model.fit.evaluate import (
    CvScheme,
    MethodReport,
    Split,
    calibrating_oracle,
    evaluate_method,
    fixed_oracle,
    make_splits,
    parse_cv,
)
from easlurm.model.fit.hosts_cli import refuse_hosts_conflicts, run_hosts
from easlurm.model.fit.limits import limit_choices, summarise_limits
from easlurm.model.fit.scaling import scaling_rows
from easlurm.model.fit.site_cli import refuse_site_conflicts, run_site
from easlurm.model.hardware import Catalogue
from easlurm.model.params import OracleParams, load_params, save_params
from easlurm.progress import progressbar
from easlurm.table import render_table, select_columns


@dataclasses.dataclass(frozen=True)
class CalibrateRequest:
    """The options of `easlurm model calibrate`, as click passes them: one object for the helpers below."""

    measurements: tuple[str, ...]
    out_path: str | None
    base_path: str | None
    free: str | None
    maxiter: int
    popsize: int
    seed: int
    folds: int
    version: str | None
    scaling: bool
    as_json: bool
    skip_infeasible: bool
    hardware_path: str | None
    site: bool = False
    hosts: bool = False


@click.command("calibrate")
@click.argument("measurements", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option(
    "-O", "--out", "out_path", default=None, help="Parameter YAML to write (default params-<date>.yaml)."
)
@click.option(
    "--params",
    "--base",
    "base_path",
    default=None,
    help="Start from these parameters (default: shipped ones).",
)
@click.option(
    "--free",
    default=None,
    help="Parameters to fit, comma list (default: what the data informs); 'comm' names the link factors the "
    "rows' rings cross.",
)
@click.option(
    "--maxiter",
    type=int_range(1, 100_000),
    default=200,
    show_default=True,
    help="Differential-evolution generations.",
)
@click.option("--popsize", type=int_range(1, 10_000), default=15, show_default=True)
@click.option("--seed", type=int_range(), default=0, show_default=True)
@click.option(
    "--folds",
    type=int_range(0, 1000),
    default=5,
    show_default=True,
    help="k-fold cross-validation (0: none).",
)
@click.option("--version", "version", default=None, help="params_version to record (default: date-based).")
@click.option(
    "--scaling",
    is_flag=True,
    help="Fit multi-GPU rows' slowdown over their one-GPU row (1 -> n GPU speedup) instead of their times; "
    "default --free comm.",
)
@output_options(table=False, json_help="Report as one JSON document.")
@click.option(
    "--skip-infeasible",
    is_flag=True,
    help="Leave out rows the model finds out of memory (they are an error otherwise).",
)
@HARDWARE_OPTION
@click.option(
    "--site",
    is_flag=True,
    help="A site's own calibration: start from the shipped (or --params) parameters and fit only factors of "
    "the GPU types in the rows; every other GPU type keeps its predictions. Cross-validates leave-one-model-out "
    "(docs/oracle-calibrate.md).",
)
@click.option(
    "--hosts",
    is_flag=True,
    help="Fit each host's data-loader floor (the rows' `host` column) on its real-input rows, every other "
    "parameter kept; rows that name no host get the hosts' geometric mean (docs/oracle-gpus.md).",
)
@click.pass_context
def calibrate_cmd(ctx: click.Context, **options: Any) -> None:
    """Fit the oracle's parameters to measurement CSVs (rows of all files together) and save them as a
    versioned YAML."""
    req = CalibrateRequest(**options)
    if req.hosts:
        refuse_hosts_conflicts(req.free, req.scaling, req.site)
    if req.site:
        refuse_site_conflicts(req.free, req.scaling)
    out = req.out_path or f"params-{dt.datetime.now(dt.UTC):%Y-%m-%d}.yaml"
    check_writable(out, "--out")
    catalogue = apply_oracle_config(load_ctx_config(ctx), req.hardware_path)
    rows = [m for path in req.measurements for m in read_measurements(path)]
    for m in rows:
        catalogue.resolve(m.gpu)  # a GPU the catalogue lacks is one clear error before fitting
    base = load_params(req.base_path) if req.base_path else load_params()
    if req.site:
        _calibrate_site(req, rows, base, catalogue, out)
        return
    if req.hosts:
        run_hosts(
            rows,
            base,
            catalogue,
            data=" ".join(req.measurements),
            out=out,
            version=req.version,
            as_json=req.as_json,
        )
        return
    rows, free_list = _rows_to_fit(req, rows, base, catalogue)
    before = score(base, rows, catalogue)
    with progressbar(length=req.maxiter, label="calibrating", file=sys.stderr) as bar:
        res = calibrate(
            rows,
            base,
            free_list,
            maxiter=req.maxiter,
            popsize=req.popsize,
            seed=req.seed,
            progress=lambda n, f: bar.update(1),
            catalogue=catalogue,
        )
    cv = (
        cross_validate(
            rows,
            k=req.folds,
            seed=req.seed,
            base=base,
            free=list(res.free),
            maxiter=req.maxiter,
            popsize=req.popsize,
            catalogue=catalogue,
        )
        if req.folds >= 2
        else []
    )
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    meta = _calibration_meta(req, rows, res, cv, today)
    params: OracleParams = dataclasses.replace(
        res.params, version=req.version or f"{today}-calibrated", meta=meta
    )
    save_params(params, out)
    if req.as_json:
        doc = {"schema_version": 1, "out": out, "before_loss": before.loss, "calibration": meta}
        click.echo(json.dumps(doc, indent=2))
        return
    _echo_calibration(rows, res, before, cv, meta)
    click.echo(f"wrote {out} (params_version {params.version})")


def _calibrate_site(
    req: CalibrateRequest, rows: list[Measurement], base: OracleParams, catalogue: Catalogue, out: str
) -> None:
    """--site: the site's GPU-type factors, leave-one-model-out unless --folds 0 (docs/oracle-calibrate.md),
    written to `out`."""
    if req.skip_infeasible:
        rows, dropped = feasible_rows(rows, base, catalogue)
        if dropped:
            click.echo(f"left out {len(dropped)} rows the model finds out of memory", err=True)
    run_site(
        rows,
        base,
        catalogue,
        data=" ".join(req.measurements),
        out=out,
        version=req.version,
        maxiter=req.maxiter,
        popsize=req.popsize,
        seed=req.seed,
        cross_validate=req.folds != 0,
        as_json=req.as_json,
    )


def _rows_to_fit(
    req: CalibrateRequest, rows: list[Measurement], base: OracleParams, catalogue: Catalogue
) -> tuple[list[Measurement], list[str] | None]:
    """The rows and free parameters the fit sees: --scaling turns multi-GPU rows into slowdowns over one GPU,
    'comm' in --free names the link factors the rows' rings cross, --skip-infeasible drops out-of-memory rows."""
    free_list = text_list(req.free) if req.free else None
    if req.scaling:
        rows = scaling_rows(rows, base, catalogue)
        free_list = free_list or ["comm"]
    if free_list and "comm" in free_list:
        at = free_list.index("comm")
        free_list[at : at + 1] = [n for n in ["t_sync_s", *comm_free(rows, catalogue)] if n not in free_list]
    if req.skip_infeasible:
        rows, dropped = feasible_rows(rows, base, catalogue)
        if dropped:
            click.echo(f"left out {len(dropped)} rows the model finds out of memory", err=True)
    return rows, free_list


def _calibration_meta(
    req: CalibrateRequest,
    rows: list[Measurement],
    res: CalibrationResult,
    cv: list[FitReport],
    today: str,
) -> dict[str, Any]:
    """What the parameter file records about its own fit: data, method, seed and the errors it reached."""
    return {
        "date": today,
        "data": " ".join(req.measurements)
        + (" (multi-GPU slowdowns over one GPU: --scaling)" if req.scaling else ""),
        "rows": len(rows),
        "free": list(res.free),
        "method": f"differential_evolution best1bin popsize={req.popsize} LHS mutation=(0.5,1.5) CR=0.7 + L-BFGS-B",
        "seed": req.seed,
        "mape_time_pct": round(res.fit.mape_time, 3),
        "mape_power_pct": None if res.fit.mape_power is None else round(res.fit.mape_power, 3),
        "loss": round(res.fit.loss, 4),
        "cv_folds": len(cv),
        "cv_mape_time_pct": round(sum(f.mape_time * f.n_rows for f in cv) / len(rows), 3) if cv else None,
    }


def _echo_calibration(
    rows: list[Measurement],
    res: CalibrationResult,
    before: FitReport,
    cv: list[FitReport],
    meta: dict[str, Any],
) -> None:
    """The text report: the fit's size and cost, its loss before and after, and each held-out fold's error."""
    click.echo(
        f"rows: {len(rows)}  free parameters: {len(res.free)}  wall: {res.wall_s:.1f}s  evaluations: {res.nfev}"
    )
    how = "0.6 MAPE time + 0.4 MAPE power" if res.fit.mape_power is not None else "MAPE time; no power data"
    click.echo(f"loss before: {before.loss:.2f}  after: {res.fit.loss:.2f}  ({how})")
    power = "-" if res.fit.mape_power is None else f"{res.fit.mape_power:.2f}%"
    click.echo(f"training MAPE: time {res.fit.mape_time:.2f}%  power {power}")
    for i, f in enumerate(cv, 1):
        fp = "-" if f.mape_power is None else f"{f.mape_power:.2f}%"
        click.echo(f"fold {i}: held-out {f.n_rows} rows  MAPE time {f.mape_time:.2f}%  power {fp}")
    if cv:
        click.echo(f"cross-validated MAPE time: {meta['cv_mape_time_pct']}%")


EVALUATE_COLUMNS = (
    "Model",
    "Batch",
    "Precision",
    "Optimizer",
    "GPU",
    "GPUs",
    "Split",
    "Time",
    "PredTime",
    "TimeErr",
    "Power",
    "PredPower",
    "PowerErr",
    "BaseTime",
    "BaseTimeErr",
    "BasePower",
    "BasePowerErr",
)
EVALUATE_DEFAULT = tuple(
    c for c in EVALUATE_COLUMNS if c not in ("Optimizer", "GPU", "GPUs", "BaseTime", "BasePower")
)


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:+.1f}%"


def _mape_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def _evaluate_rows(oracle_rep: Any, base_rep: Any | None) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(oracle_rep.rows):
        b = base_rep.rows[i] if base_rep is not None else None
        out.append(
            {
                "Model": r.model,
                "Batch": r.batch,
                "Precision": r.precision,
                "Optimizer": r.optimizer,
                "GPU": r.gpu,
                "GPUs": r.n_gpus,
                "Split": r.split,
                "Time": f"{r.time_s:.4f}s",
                "PredTime": "OOM" if r.pred_time_s is None else f"{r.pred_time_s:.4f}s",
                "TimeErr": _pct(r.time_err_pct),
                "Power": None if r.power_w is None else f"{r.power_w:.1f}W",
                "PredPower": None if r.pred_power_w is None else f"{r.pred_power_w:.1f}W",
                "PowerErr": _pct(r.power_err_pct),
                "BaseTime": None if b is None or b.pred_time_s is None else f"{b.pred_time_s:.4f}s",
                "BaseTimeErr": None if b is None else _pct(b.time_err_pct),
                "BasePower": None if b is None or b.pred_power_w is None else f"{b.pred_power_w:.1f}W",
                "BasePowerErr": None if b is None else _pct(b.power_err_pct),
            }
        )
    return out


LIMIT_COLUMNS = (
    "GPU",
    "Model",
    "Batch",
    "Precision",
    "GPUs",
    "Limits",
    "Chosen",
    "Best",
    "Excess",
    "RatioErr",
)
LIMIT_SUMMARY_COLUMNS = ("GPU", "Groups", "MeanExcess", "MaxExcess", "BestChosen", "RatioErr")


def _limit_record(c: Any) -> dict[str, Any]:
    return {
        "GPU": c.gpu,
        "Model": c.model,
        "Batch": c.batch,
        "Precision": c.precision,
        "GPUs": c.n_gpus,
        "Limits": f"{min(c.limits_w):g}-{max(c.limits_w):g}W/{len(c.limits_w)}",
        "Chosen": f"{c.chosen_w:g}W",
        "Best": f"{c.best_w:g}W",
        "Excess": f"{c.excess_pct:.1f}%",
        "RatioErr": _mape_cell(c.ratio_err_pct),
    }


def _limit_summary_record(s: Any) -> dict[str, Any]:
    return {
        "GPU": s.gpu,
        "Groups": s.groups,
        "MeanExcess": f"{s.mean_excess_pct:.2f}%",
        "MaxExcess": f"{s.max_excess_pct:.1f}%",
        "BestChosen": f"{s.best_chosen}/{s.groups}",
        "RatioErr": _mape_cell(s.mean_ratio_err_pct),
    }


def _evaluate_summary(reports: list[Any], by_gpu: bool = False) -> list[dict[str, Any]]:
    out = []
    for rep in reports:
        out.append(
            {
                "Method": rep.method,
                "Model": "all",
                "GPU": "all",
                "Rows": len(rep.rows),
                "TimeMAPE": _mape_cell(rep.mape_time),
                "PowerMAPE": _mape_cell(rep.mape_power),
                "NoPrediction": rep.n_unpredicted,
            }
        )
        for s in rep.per_model():
            out.append(
                {
                    "Method": rep.method,
                    "Model": s.model,
                    "GPU": "all",
                    "Rows": s.n_rows,
                    "TimeMAPE": _mape_cell(s.mape_time),
                    "PowerMAPE": _mape_cell(s.mape_power),
                    "NoPrediction": None,
                }
            )
        for s in rep.per_gpu() if by_gpu else ():
            out.append(
                {
                    "Method": rep.method,
                    "Model": "all",
                    "GPU": s.model,
                    "Rows": s.n_rows,
                    "TimeMAPE": _mape_cell(s.mape_time),
                    "PowerMAPE": _mape_cell(s.mape_power),
                    "NoPrediction": None,
                }
            )
    return out


def _evaluate_doc(meta: dict[str, Any], reports: list[Any]) -> dict[str, Any]:
    methods = {}
    for rep in reports:
        methods[rep.method] = {
            "description": rep.description,
            "mape_time_pct": rep.mape_time,
            "mape_power_pct": rep.mape_power,
            "rows_without_prediction": rep.n_unpredicted,
            "fit_wall_s": round(rep.fit_wall_s, 3),
            "per_model": [
                {
                    "model": s.model,
                    "rows": s.n_rows,
                    "mape_time_pct": s.mape_time,
                    "mape_power_pct": s.mape_power,
                }
                for s in rep.per_model()
            ],
            "per_gpu": [
                {
                    "gpu": s.model,
                    "rows": s.n_rows,
                    "mape_time_pct": s.mape_time,
                    "mape_power_pct": s.mape_power,
                }
                for s in rep.per_gpu()
            ],
            "rows": [
                {
                    "model": r.model,
                    "batch": r.batch,
                    "precision": r.precision,
                    "optimizer": r.optimizer,
                    "gpu": r.gpu,
                    "n_gpus": r.n_gpus,
                    "split": r.split,
                    "step_time_s": r.time_s,
                    "pred_step_time_s": r.pred_time_s,
                    "time_err_pct": r.time_err_pct,
                    "power_w": r.power_w,
                    "pred_power_w": r.pred_power_w,
                    "power_err_pct": r.power_err_pct,
                }
                for r in rep.rows
            ],
        }
    return {"schema_version": 1, **meta, "methods": methods}


def _evaluate_markdown(
    meta: dict[str, Any], summary: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> str:
    def md(columns: list[str], records: list[dict[str, Any]]) -> list[str]:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for r in records:
            lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in columns) + " |")
        return lines

    head = [
        "# Oracle evaluation",
        "",
        f"- data: `{meta['data']}` ({meta['rows']} rows)",
        f"- cross-validation: {meta['cv']}",
        f"- oracle: {meta['oracle']}",
        f"- baseline: {meta['baseline']}",
        f"- wall time: {meta['wall_s']:.1f} s",
        "",
        "## MAPE",
        "",
    ]
    body = [*md(SUMMARY_COLUMNS, summary), "", "## Rows (errors signed: + means predicted too high)", ""]
    return "\n".join(head + body + md(list(EVALUATE_COLUMNS), rows)) + "\n"


SUMMARY_COLUMNS = ["Method", "Model", "GPU", "Rows", "TimeMAPE", "PowerMAPE", "NoPrediction"]


@dataclasses.dataclass(frozen=True)
class EvaluateRequest:
    """The options of `easlurm model evaluate`, as click passes them: one object for the helpers below."""

    measurements: tuple[str, ...]
    params_path: str | None
    cv_text: str
    refit: bool
    baseline_kind: str
    maxiter: int
    popsize: int
    seed: int
    fmt: str | None
    parsable: bool
    noheader: bool
    as_json: bool
    out_dir: str | None
    power_limits: bool
    jobs: int


@click.command("evaluate")
@click.argument("measurements", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--params", "params_path", default=None, help="Oracle parameter YAML (default: oracle.params).")
@click.option(
    "--cv",
    "cv_text",
    default="none",
    show_default=True,
    help="none (parameters as given), leave-one-model-out (refit without each model), leave-one-gpu-out "
    "(refit without each GPU type), or kfold:K.",
)
@click.option("--refit", is_flag=True, help="With --cv none: calibrate on all rows first (in-sample error).")
@click.option(
    "--baseline",
    "baseline_kind",
    default="auto",
    show_default=True,
    help="Data-driven baseline: rf (scikit-learn), ridge (numpy), auto (rf if installed) or none.",
)
@click.option(
    "--maxiter",
    type=int_range(1, 100_000),
    default=200,
    show_default=True,
    help="Calibration generations per refit.",
)
@click.option(
    "--popsize", type=int_range(1, 10_000), default=15, show_default=True, help="Calibration population size."
)
@click.option(
    "--seed", type=int_range(), default=0, show_default=True, help="Seed of folds, calibration, forest."
)
@output_options(EVALUATE_COLUMNS)
@click.option(
    "-O", "--out", "out_dir", default=None, help="Also write evaluate.md and evaluate.json into this folder."
)
@click.option(
    "--power-limits",
    "power_limits",
    is_flag=True,
    help="Also score the power-limit response on rows swept over power limits: the measured energy of the "
    "limit the oracle chooses against the measured best.",
)
@click.option(
    "-j",
    "--jobs",
    type=int_range(1, 256),
    default=1,
    show_default=True,
    help="Fit this many cross-validation splits at once, one process each (the same figures, sooner).",
)
@click.pass_context
def evaluate_cmd(ctx: click.Context, **options: Any) -> None:
    """Per-row error and MAPE of the oracle (and a data-driven baseline) on a measurement CSV.

    With --cv each row is predicted by a fit that never saw it: leave-one-model-out calibrates without
    each model in turn and scores the held-out model, the figure that tells how the oracle generalises.
    """
    req = EvaluateRequest(**options)
    if req.out_dir:
        check_writable(req.out_dir, "--out", directory=True)
    scheme = parse_cv(req.cv_text)
    kind = resolve_kind(req.baseline_kind)
    columns = select_columns(req.fmt, EVALUATE_COLUMNS, EVALUATE_DEFAULT)
    if not scheme.held_out:
        columns = [c for c in columns if c != "Split" or req.fmt]
    if req.maxiter < 1 or req.popsize < 1:
        raise ConfigError("--maxiter and --popsize must be >= 1")
    if req.refit and scheme.held_out:
        raise ConfigError("--refit applies to --cv none (cross-validation always refits)")
    rows = [m for path in req.measurements for m in read_measurements(path)]
    splits = make_splits(rows, scheme, req.seed)
    params = ctx_oracle(ctx, req.params_path).params
    start = time.perf_counter()
    oracle_rep = _oracle_report(req, scheme, rows, splits, params)
    reports = [oracle_rep]
    base_rep = None
    if kind != "none":
        what = "random forest (scikit-learn)" if kind == "rf" else "ridge regression in log space (numpy)"
        where = "fitted on all rows (in-sample)" if not scheme.held_out else "fitted per split"
        base_rep = evaluate_method(
            rows,
            splits,
            baseline_fitter(kind, req.seed),
            f"baseline-{kind}",
            f"{what}, {where}",
            scheme.label,
        )
        reports.append(base_rep)
    meta = {
        "data": " ".join(req.measurements),
        "rows": len(rows),
        "cv": scheme.label,
        "seed": req.seed,
        "params_version": params.version,
        "oracle": oracle_rep.description,
        "baseline": "none" if base_rep is None else base_rep.description,
        "wall_s": time.perf_counter() - start,
    }
    row_records = _evaluate_rows(oracle_rep, base_rep)
    summary = _evaluate_summary(reports, by_gpu=scheme.kind == "logo" or len({r.gpu for r in rows}) > 1)
    doc = _evaluate_doc(meta, reports)
    limit_tables = _power_limit_tables(req, oracle_rep, doc) if req.power_limits else []
    if req.out_dir:
        _write_evaluation(req.out_dir, doc, _evaluate_markdown(meta, summary, row_records))
    if req.as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    tables = [(columns, row_records), (SUMMARY_COLUMNS, summary), *limit_tables]
    for i, (cols, records) in enumerate(tables):
        if i:
            click.echo()
        click.echo(render_table(cols, records, parsable=req.parsable, header=not req.noheader))
    if not req.parsable:
        click.echo()
        click.echo(f"cv: {scheme.label}  oracle: {oracle_rep.description}")
        if base_rep is not None:
            click.echo(f"baseline: {base_rep.description}")
        click.echo(f"wall: {meta['wall_s']:.1f}s")


def _oracle_report(
    req: EvaluateRequest, scheme: CvScheme, rows: list[Measurement], splits: list[Split], params: OracleParams
) -> MethodReport:
    """The oracle's rows: its parameters as given, or refitted per split (--cv) or on all rows (--refit),
    with a progress bar over every split's generations."""
    if not (scheme.held_out or req.refit):
        how = f"params {params.version} as given (not refitted)"
        return evaluate_method(rows, splits, fixed_oracle(params), "oracle", how, scheme.label)
    maxiter = req.maxiter
    stderr = sys.stderr
    with progressbar(
        length=len(splits) * maxiter,
        label=f"calibrating ({scheme.label if scheme.held_out else 'in-sample'})",
        file=stderr,
    ) as bar:
        done = [0]

        def generation(gen: int) -> None:
            bar.update(1)
            done[0] += 1

        finished = [0]

        def split_done(number: int) -> None:
            # DE may converge before maxiter, and with --jobs the generations tick in other processes
            finished[0] += 1
            bar.update(finished[0] * maxiter - done[0])
            done[0] = finished[0] * maxiter

        # Refits start from the built-in priors unless --params names a start: the shipped parameters were
        # fitted on the H100 rows, and priors centred on them would leak every held-out model into its fit.
        start_params = params if req.params_path else OracleParams()
        fitter = calibrating_oracle(
            start_params, maxiter=maxiter, popsize=req.popsize, seed=req.seed, progress=generation
        )
        how = f"calibrate (maxiter {maxiter}, popsize {req.popsize}, seed {req.seed}) from " + (
            f"params {params.version}" if req.params_path else "the built-in priors"
        )
        return evaluate_method(rows, splits, fitter, "oracle", how, scheme.label, split_done, jobs=req.jobs)


def _power_limit_tables(
    req: EvaluateRequest, oracle_rep: MethodReport, doc: dict[str, Any]
) -> list[tuple[list[str], list[dict[str, Any]]]]:
    """--power-limits: score the limit the oracle chooses per job against the measured best; adds the groups
    and their summary to `doc` and returns both as (columns, records) tables."""
    choices = limit_choices(oracle_rep)
    if not choices:
        raise ConfigError(
            f"--power-limits: {' '.join(req.measurements)} has no job measured at two power limits or more"
        )
    limit_groups = [_limit_record(c) for c in choices]
    limit_summary = [_limit_summary_record(s) for s in summarise_limits(choices)]
    doc["power_limits"] = {
        "groups": [dataclasses.asdict(c) for c in choices],
        "summary": [dataclasses.asdict(s) for s in summarise_limits(choices)],
    }
    return [(list(LIMIT_COLUMNS), limit_groups), (list(LIMIT_SUMMARY_COLUMNS), limit_summary)]


def _write_evaluation(out_dir: str, doc: dict[str, Any], markdown: str) -> None:
    """--out: evaluate.json and evaluate.md into the folder, made if missing; a write error names --out."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / "evaluate.json", json.dumps(doc, indent=2) + "\n")
        write_text_atomic(out / "evaluate.md", markdown)
    except OSError as exc:
        raise ConfigError(f"--out {out_dir}: cannot write ({exc.strerror})") from exc
