"""`easlurm model calibrate --site`: a site's own calibration, its before/after and leave-one-model-out errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
from typing import Any

import click

from easlurm.errors import ConfigError
from easlurm.model.fit.calibrate import FitReport
from easlurm.model.fit.dataset import Measurement
from easlurm.model.fit.site import (
    LOADER_MIN_ROWS,
    LOADER_PARAM,
    SITE_PRIOR_SIGMA_LOG10,
    SITE_WIDE_PRIOR,
    HeldOut,
    SiteCalibration,
    calibrate_site,
    pooled,
    site_leave_one_model_out,
)
from easlurm.model.hardware import Catalogue
from easlurm.model.params import OracleParams, save_params
from easlurm.progress import progressbar


def refuse_site_conflicts(free: str | None, scaling: bool) -> None:
    """--site chooses its own free parameters and fits step times: --free and --scaling do not combine."""
    if free:
        raise ConfigError("--free: --site fits the GPU-type factors its rows identify; give one or the other")
    if scaling:
        raise ConfigError("--scaling: --site fits step times; give one or the other")


def run_site(
    rows: list[Measurement],
    base: OracleParams,
    catalogue: Catalogue,
    *,
    data: str,
    out: str,
    version: str | None,
    maxiter: int,
    popsize: int,
    seed: int,
    cross_validate: bool,
    as_json: bool,
) -> None:
    """Fit, cross-validate (leave-one-model-out where the rows hold two models or more), save and report."""
    with progressbar(length=maxiter, label="calibrating (site)", file=sys.stderr) as bar:
        site = calibrate_site(
            rows,
            base,
            catalogue,
            maxiter=maxiter,
            popsize=popsize,
            seed=seed,
            progress=lambda n, f: bar.update(1),
        )
    models = sorted({m.model for m in rows})
    held: list[HeldOut] = []
    if cross_validate and len(models) > 1:
        with progressbar(length=len(models), label="leave-one-model-out", file=sys.stderr) as bar:
            held = site_leave_one_model_out(
                rows,
                base,
                catalogue,
                maxiter=maxiter,
                popsize=popsize,
                seed=seed,
                done=lambda model: bar.update(1),
            )
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    meta = site_meta(site, held, base, data, seed, popsize, today)
    params = dataclasses.replace(
        site.result.params, version=version or f"{base.version}+site-{today}", meta=meta
    )
    save_params(params, out)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "out": out, "calibration": meta}, indent=2))
        return
    echo_site(site, held, len(models))
    click.echo(f"wrote {out} (params_version {params.version}); use it with oracle.params: {out}")


def _errors(report: FitReport) -> dict[str, float | None]:
    power = None if report.mape_power is None else round(report.mape_power, 3)
    return {"mape_time_pct": round(report.mape_time, 3), "mape_power_pct": power}


def site_meta(
    site: SiteCalibration,
    held: list[HeldOut],
    base: OracleParams,
    data: str,
    seed: int,
    popsize: int,
    today: str,
) -> dict[str, Any]:
    """What the parameter file records: the base it started from, the rows, the factors and the errors."""
    lomo: dict[str, Any] | None = None
    if held:
        t, p = pooled([h.fit for h in held])
        lomo = {
            "mape_time_pct": round(t, 3),
            "mape_power_pct": None if p is None else round(p, 3),
            "per_model": {h.model: _errors(h.fit) for h in held},
        }
    return {
        "date": today,
        "kind": "site",
        "prior_sigma_log10": SITE_PRIOR_SIGMA_LOG10,
        "prior_global_width": list(SITE_WIDE_PRIOR),
        "base_params_version": base.version,
        "data": data,
        "rows": site.result.fit.n_rows,
        "gpu_types": list(site.gpu_types),
        "free": list(site.result.free),
        "method": f"site factors: differential_evolution best1bin popsize={popsize} + L-BFGS-B from the base",
        "seed": seed,
        "before": {**_errors(site.before), "per_model": _per_model(site.before_by_model)},
        "after": {**_errors(site.result.fit), "per_model": _per_model(site.after_by_model)},
        "leave_one_model_out": lomo,
        "loader": {
            key: {
                "loader_bound_rows": n,
                "refitted": site.loader_refitted(key),
                "t_input_step_s": round(site.loader_floor_s(key), 6),
            }
            for key, n in site.loader_rows.items()
        },
    }


def _per_model(reports: dict[str, FitReport]) -> dict[str, dict[str, float | None]]:
    return {model: _errors(r) for model, r in reports.items()}


def _pair(report: FitReport | None) -> str:
    """'time / power %' of one model's report, '-' for a missing one."""
    if report is None:
        return "-"
    power = "-" if report.mape_power is None else f"{report.mape_power:.1f}"
    return f"{report.mape_time:.1f} / {power} %"


def _cells(report: FitReport | tuple[float, float | None]) -> str:
    t, p = (report.mape_time, report.mape_power) if isinstance(report, FitReport) else report
    return f"time {t:5.1f} %   power {'-' if p is None else f'{p:.1f} %'}"


def echo_site(site: SiteCalibration, held: list[HeldOut], n_models: int) -> None:
    """The text report: what was fitted, the errors before and after, and each held-out model's."""
    res = site.result
    click.echo(
        f"site calibration: {res.fit.n_rows} rows of {', '.join(site.gpu_types)}, {n_models} models; "
        f"{len(res.free)} GPU-type factors fitted in {res.wall_s:.1f}s; every other GPU type keeps its "
        "parameters"
    )
    click.echo(f"  before (base parameters):      {_cells(site.before)}")
    click.echo(f"  after (in-sample):             {_cells(res.fit)}")
    if held:
        click.echo(f"  leave-one-model-out:           {_cells(pooled([h.fit for h in held]))}")
    elif n_models < 2:
        click.echo("  leave-one-model-out: the rows hold one model (nothing to hold out)")
    out = {h.model: h.fit for h in held}
    click.echo(f"  {'per model (time / power)':<28s}{'rows':>5s}  {'before':<16s}{'after':<16s}held out")
    for model, before in site.before_by_model.items():
        after = site.after_by_model[model]
        cells = f"{_pair(before):<16s}{_pair(after):<16s}{_pair(out.get(model))}"
        click.echo(f"    {model:<26s}{before.n_rows:>5d}  {cells}")
    factors = ", ".join(f"{n.rpartition('.')[2]} {res.params.scalars[n]:.3g}" for n in res.free)
    click.echo(f"  factors: {factors}")
    for key, n in site.loader_rows.items():
        floor_ms = 1e3 * site.loader_floor_s(key)
        if site.loader_refitted(key):
            what = f"floor refitted: {floor_ms:.1f} ms a step (base {1e3 * res.params[LOADER_PARAM]:.1f} ms)"
        elif n < LOADER_MIN_ROWS:
            what = f"fewer than {LOADER_MIN_ROWS}: floor kept at {floor_ms:.1f} ms a step"
        else:
            what = (
                f"this version's parameters hold no GPU type's loader factor: floor kept at {floor_ms:.1f} ms"
            )
        click.echo(f"  data loader on {key}: {n} loader-bound real-input rows, {what}")
