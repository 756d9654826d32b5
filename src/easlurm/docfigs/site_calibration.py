"""What docs/oracle-calibrate.md quotes: a site's own calibration on our H100 rows, and over 21 GPU types."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from easlurm.config import load_config
from easlurm.docfigs.figures import DocFigures, table
from easlurm.model.build import oracle_params, params_setting
from easlurm.model.fit.calibrate import FitReport
from easlurm.model.fit.dataset import Measurement, read_measurements
from easlurm.model.fit.site import (
    SITE_PRIOR_SIGMA_LOG10,
    HeldOut,
    SiteCalibration,
    calibrate_site,
    pooled,
    site_leave_one_model_out,
)
from easlurm.model.fit.site_lomo import SiteLomo, lomo_sweep, sites_of
from easlurm.model.hardware import load_catalogue
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import OracleParams
from easlurm.model.zoo import get_workload

H100 = "data/oracle/h100_sxm_training_steps.csv"
#: the sites of the prior-width comparison (benchmarks/site_calibration_lomo.py's default files)
SWEEP = (H100, "data/oracle/h200_training_steps.csv", "data/oracle/public/lambda_pytorch.csv")
#: `easlurm model calibrate --site`'s defaults (the H100 figures are that command's)
MAXITER, POPSIZE, SEED = 200, 15, 0
#: the sweep's settings, smaller (benchmarks/site_calibration_lomo.py's): 21 sites x 3-4 models of fits
SWEEP_MAXITER, SWEEP_POPSIZE = 60, 8
#: the global calibration's prior width (log10), which the site calibration's narrower one replaced: compared
#: on our own sites only (they carry power), to keep the figures' cost near a minute of one core; the
#: benchmark compares both widths on every site
WIDE = 0.3
#: issue 31's bar on the H100 rows, leave-one-model-out (time, power %)
TARGET = (8.0, 6.0)
#: the `easlurm predict` example: this model at this batch and precision on the site GPU and another one
EXAMPLE = ("bert-base", 64, "bf16", ("h100-sxm", "a100-40gb"))


@dataclass(frozen=True)
class SiteFigures:
    """The H100 site calibration (fit, held-out models), the example prediction before and after it, and
    the sweep over every site at the site width, and over our own sites at the global width."""

    params_version: str
    rows: list[Measurement]
    site: SiteCalibration
    held: list[HeldOut]
    example: dict[str, tuple[float, float, float, float]]  # gpu -> shipped (s, W), site (s, W)
    n_left_out: int
    sweep: list[SiteLomo]
    wide: list[SiteLomo]


def site_source(root: Path, work_dir: Path, jobs: int) -> SiteFigures:
    cat = load_catalogue()
    base = oracle_params(params_setting(load_config()))
    rows = read_measurements(root / H100)
    site = calibrate_site(rows, base, cat, maxiter=MAXITER, popsize=POPSIZE, seed=SEED)
    held = site_leave_one_model_out(rows, base, cat, maxiter=MAXITER, popsize=POPSIZE, seed=SEED)
    sites = sites_of([root / p for p in SWEEP], base, cat)
    kw = {"maxiter": SWEEP_MAXITER, "popsize": SWEEP_POPSIZE, "jobs": jobs}
    sweep = lomo_sweep(sites.rows, base, cat, sigma_log10=SITE_PRIOR_SIGMA_LOG10, **kw)
    ours = {k: v for k, v in sites.rows.items() if _site_name(k).endswith("(ours)")}
    wide = lomo_sweep(ours, base, cat, sigma_log10=WIDE, **kw)
    example = _example(base, site.result.params)
    return SiteFigures(base.version, rows, site, held, example, sites.left_out, sweep, wide)


def _example(base: OracleParams, fitted: OracleParams) -> dict[str, tuple[float, float, float, float]]:
    """As `easlurm predict --model M --batch B --gpu G1,G2 --precision P [--params site.yaml]` gives them."""
    model, batch, precision, gpus = EXAMPLE
    wl = get_workload(model, precision=precision)
    pl = Placements.of(1, batch, np.array(gpus, dtype=object))
    a, b = Oracle(base).predict(wl, pl), Oracle(fitted).predict(wl, pl)
    return {
        g: (float(a.step_time_s[i]), float(a.power_w[i]), float(b.step_time_s[i]), float(b.power_w[i]))
        for i, g in enumerate(gpus)
    }


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1f} %"


def _pair(t: float | None, p: float | None) -> str:
    if p is None:
        return _pct(t)
    return f"{'-' if t is None else f'{t:.1f}'} / {_pct(p)}"


def _rep(r: FitReport | None) -> str:
    return "-" if r is None else _pair(r.mape_time, r.mape_power)


def _h100_blocks(f: SiteFigures) -> dict[str, str]:
    site, res = f.site, f.site.result
    lomo_t, lomo_p = pooled([h.fit for h in f.held])
    limits = "default power limit" if all(m.power_limit_w is None for m in f.rows) else "power limits"
    held = {h.model: h.fit for h in f.held}
    per_model = [
        [m, str(b.n_rows), _rep(b), _rep(site.after_by_model[m]), _rep(held.get(m))]
        for m, b in site.before_by_model.items()
    ]
    factors = {n.rpartition(".")[2]: res.params.scalars[n] for n in res.free}
    far = {n: v for n, v in factors.items() if abs(math.log(v)) > math.log(1.1)}
    near = [abs(v - 1.0) for n, v in factors.items() if n not in far]
    named = [f"`{n}` {v:.3g}" for n, v in far.items()]
    but = ", ".join(named[:-1]) + (" and " if len(named) > 1 else "") + (named[-1] if named else "")
    within = f"The {len(factors)} factors stay within {100 * max(near, default=0.0):.0f} % of 1.0"
    factor_text = within + (f" but {but}" if far else "")
    ok = ["met" if v <= bar else "not met" for v, bar in zip((lomo_t, lomo_p or math.inf), TARGET)]
    return {
        "oracle-calibrate/h100-data": (
            f"On `{H100}` ({len(f.rows)} rows, {len(site.before_by_model)} models, one H100 SXM, {limits}), "
            f"`easlurm model calibrate --site {H100} -O h100-site.yaml` (shipped parameters "
            f"`{f.params_version}`, seed {SEED}, {len(res.free)} factors):"
        ),
        "oracle-calibrate/h100": table(
            ["", "time MAPE", "power MAPE"],
            [
                ["before (shipped parameters)", _pct(site.before.mape_time), _pct(site.before.mape_power)],
                ["after (in-sample)", _pct(res.fit.mape_time), _pct(res.fit.mape_power)],
                ["leave-one-model-out", _pct(lomo_t), _pct(lomo_p)],
            ],
        ),
        "oracle-calibrate/h100-per-model": table(["model", "rows", "before", "after", "held out"], per_model),
        "oracle-calibrate/h100-factors": f"{factor_text}.",
        "oracle-calibrate/h100-target": (
            f"Issue 31 asks for at most {TARGET[0]:.0f} % time and {TARGET[1]:.0f} % power leave-one-model-out "
            f"on these rows: time {_pct(lomo_t)} ({ok[0]}), power {_pct(lomo_p)} ({ok[1]})."
        ),
        "oracle-calibrate/predict": _example_text(f),
    }


def _example_text(f: SiteFigures) -> str:
    model, batch, precision, gpus = EXAMPLE
    measured = next(
        m
        for m in f.rows
        if m.model == model and m.batch == batch and m.precision_key == precision and m.n_gpus == 1
    )
    site_gpu, other = gpus
    s = f.example[site_gpu]
    o = f.example[other]
    same = "the same" if (o[0], o[1]) == (o[2], o[3]) else "NOT the same"
    return (
        f"With the file, `easlurm predict --model {model} --batch {batch} --gpu {','.join(gpus)} --precision "
        f"{precision} --params h100-site.yaml` gives the H100 {s[2]:.4f} s and {s[3]:.1f} W (measured: "
        f"{measured.step_time_s:.4f} s, {measured.avg_power_w:.1f} W; shipped parameters: {s[0]:.4f} s, "
        f"{s[1]:.1f} W) and the A100 {same} {o[2]:.4f} s and {o[3]:.1f} W as without it."
    )


def _site_name(key: str) -> str:
    """'lambda_pytorch:a10' -> 'a10 (Lambda)'; our own files' rows -> 'h100-sxm (ours)'."""
    stem, _, gpu = key.partition(":")
    source = "Lambda" if stem.startswith("lambda") else "ours" if stem.endswith("training_steps") else stem
    return f"{gpu} ({source})"


def _sweep_blocks(f: SiteFigures) -> dict[str, str]:
    ours = [s.key for s in f.wide]
    header = ["prior width (log10)", "a factor that costs one point", f"held out, all {len(f.sweep)} sites"]
    header += [_site_name(k) for k in ours]

    def row(
        label: str, cost: str, out: list[SiteLomo] | None, per_site: dict[str, list[FitReport]]
    ) -> list[str]:
        pooled_all = "" if out is None else _pair(*pooled([h.fit for s in out for h in s.held]))
        return [label, cost, pooled_all, *(_pair(*pooled(per_site[k])) for k in ours)]

    def held(out: list[SiteLomo]) -> dict[str, list[FitReport]]:
        return {s.key: [h.fit for h in s.held] for s in out}

    shipped = [
        _pair(*pooled([s.before for s in f.sweep])),
        *(_rep(s.before) for s in f.sweep if s.key in ours),
    ]
    rows = [
        ["none (shipped parameters)", "", *shipped],
        row(f"{WIDE:g} (a global calibration's)", f"{10**WIDE:.2f}", None, held(f.wide)),
        row(
            f"{SITE_PRIOR_SIGMA_LOG10:g} (the site calibration's)",
            f"{10**SITE_PRIOR_SIGMA_LOG10:.2f}",
            f.sweep,
            held(f.sweep),
        ),
    ]
    per_site = []
    for s in f.sweep:
        models = ", ".join(h.model for h in s.held)
        held_out = _pair(*pooled([h.fit for h in s.held]))
        per_site.append([_site_name(s.key), str(s.n_rows), models, _rep(s.before), held_out])
    return {
        "oracle-calibrate/widths-data": (
            f"{len(f.sweep)} sites ({SWEEP_MAXITER} iterations, population {SWEEP_POPSIZE}; the "
            f"{f.n_left_out} rows the shipped parameters find out of memory are left out). The global width is "
            "run on our own sites only here (`python benchmarks/site_calibration_lomo.py` runs both on all):"
        ),
        "oracle-calibrate/widths": table(header, rows),
        "oracle-calibrate/sites": table(
            ["site", "rows", "models", "before", f"held out, width {SITE_PRIOR_SIGMA_LOG10:g}"], per_site
        ),
    }


def site_figures(f: SiteFigures) -> dict[str, str]:
    return {**_h100_blocks(f), **_sweep_blocks(f)}


FIGURES = DocFigures("docs/oracle-calibrate.md", ", ".join(SWEEP), site_source, site_figures)
