"""A site's own calibration: per-GPU-type factors fitted on the site's rows, every other GPU's physics kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from easlurm.errors import ModelError
from easlurm.model.fit.calibrate import PRIOR_SIGMA_LOG10, CalibrationResult, FitReport, calibrate, score
from easlurm.model.fit.dataset import Measurement
from easlurm.model.hardware import Catalogue
from easlurm.model.params import GPU_FACTOR_PREFIX, OracleParams

#: a GPU type's time terms every site row informs (HBM efficiency, host and launch costs, per-step overhead)
SITE_TIME = ("c_mem", "t_host_op_s", "t_kern_s", "t_fixed_s")
#: its power terms, fitted where the rows carry power
SITE_POWER = ("c_p", "u_comp", "u_mem", "u_idle")
#: its power-limit response, fitted where the rows were measured under power limits
SITE_LIMIT = ("cap_alpha", "p_floor_frac", "mem_clock_knee")
#: prior width of a site factor (log10): a factor of 1.26 costs one point of loss, where a global fit's factor
#: of 2 does. The base is already fitted on public rows of most GPU types, and a site's rows hold few models:
#: with the global width the factors took on those models' own errors, and on the public rows of 19 GPU types
#: held-out models came out worse than with no calibration (docs/oracle-calibrate.md)
SITE_PRIOR_SIGMA_LOG10 = 0.1
#: site factors that keep the global width: the layout transforms around 16-bit convolutions depend on how the
#: site's framework lays out tensors (plain PyTorch keeps NCHW; the public rows behind the shipped value include
#: NVIDIA's NGC runs, channels-last with DALI: data/README.md), which every CNN the site runs that way shares
SITE_WIDE_PRIOR = ("k_layout",)


@dataclass(frozen=True)
class HeldOut:
    """One model held out of a site calibration and predicted by the factors fitted on the other models."""

    model: str
    fit: FitReport


@dataclass(frozen=True)
class SiteCalibration:
    """The result of `calibrate_site`: the fit, and the errors of the starting parameters on the same rows
    (all of them, and each model's before and after the fit)."""

    result: CalibrationResult
    before: FitReport
    gpu_types: tuple[str, ...]
    before_by_model: dict[str, FitReport]
    after_by_model: dict[str, FitReport]


def site_free(rows: Sequence[Measurement], catalogue: Catalogue) -> list[str]:
    """Per-GPU-type factors ('gpu:<key>.<param>') the rows of each GPU type can identify: its time terms, the
    efficiency of each class of work its rows do, a precision's factor where its rows mix precisions, the
    power terms where they carry power, the limit response where they were swept, and the link factors
    their rings cross. Nothing shared by other GPU types is freed."""
    out: list[str] = []
    for key in sorted({catalogue.resolve(m.gpu) for m in rows}):
        mine = [m for m in rows if catalogue.resolve(m.gpu) == key]
        names = [*SITE_TIME, *_work_terms(mine)]
        precs = {m.precision_key for m in mine}
        names += [f"c_{p}" for p in ("fp32", "tf32") if p in precs and len(precs) > 1]
        if any(m.avg_power_w is not None for m in mine):
            names += [*SITE_POWER, *(["e_simt_pj"] if "fp32" in precs else [])]
            if any(m.power_limit_w is not None for m in mine):
                names += SITE_LIMIT
        names += _comm_terms(mine, catalogue)
        out += [f"{GPU_FACTOR_PREFIX}{key}.{n}" for n in dict.fromkeys(names)]
    return out


def _work_terms(rows: Sequence[Measurement]) -> list[str]:
    """The efficiencies of the classes of work that are a visible share of the rows' FLOPs."""
    wls = [m.workload() for m in rows]
    names = []
    if any(w.flops_gemm > 0.3 * w.flops_total for w in wls):
        names.append("beta_gemm")
    if any(w.flops_conv > 0.3 * w.flops_total for w in wls):
        names += ["beta_conv", "k_layout"]
    if any(w.flops_attn > 0.02 * w.flops_total for w in wls):
        names.append("beta_attn")
    if any(w.flops_dw > 0.01 * w.flops_total for w in wls):
        names.append("beta_dw")
    return names


def _comm_terms(rows: Sequence[Measurement], catalogue: Catalogue) -> list[str]:
    """The synchronisation and link factors of the rows' multi-GPU rings."""
    names: list[str] = []
    for m in rows:
        if m.n_gpus <= 1:
            continue
        spec = catalogue.get(m.gpu)
        names += ["t_sync_s", f"bw_eff_{spec.link_kind}"]
        if (m.n_nodes or -(-m.n_gpus // spec.gpus_per_node)) > 1:
            names.append(f"bw_eff_{'ib' if spec.net_kind == 'infiniband' else 'eth'}")
    return list(dict.fromkeys(names))


def calibrate_site(
    rows: Sequence[Measurement],
    base: OracleParams,
    catalogue: Catalogue,
    *,
    maxiter: int = 200,
    popsize: int = 15,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> SiteCalibration:
    """Fit the site's GPU-type factors from `base` (the shipped parameters, or a file): the global values,
    the architecture factors and the activation-memory scale stay as they are, so a GPU type the rows do not
    name is predicted exactly as before."""
    if not rows:
        raise ModelError("a site calibration needs at least one measurement")
    free = site_free(rows, catalogue)
    before = score(base, rows, catalogue)
    res = calibrate(
        rows,
        base,
        free,
        maxiter=maxiter,
        popsize=popsize,
        seed=seed,
        catalogue=catalogue,
        progress=progress,
        memory=False,
        prior_weight=site_prior_weights(free),
    )
    keys = tuple(sorted({catalogue.resolve(m.gpu) for m in rows}))
    before_by = by_model(base, rows, catalogue)
    return SiteCalibration(res, before, keys, before_by, by_model(res.params, rows, catalogue))


def site_prior_weights(free: Sequence[str]) -> dict[str, float]:
    """Each site factor's prior weight: the narrow site width, or the global one (`SITE_WIDE_PRIOR`)."""
    narrow = (PRIOR_SIGMA_LOG10 / SITE_PRIOR_SIGMA_LOG10) ** 2
    return {n: 1.0 if n.rpartition(".")[2] in SITE_WIDE_PRIOR else narrow for n in free}


def by_model(params: OracleParams, rows: Sequence[Measurement], catalogue: Catalogue) -> dict[str, FitReport]:
    """Each model's errors under `params`, by model name."""
    models = sorted({m.model for m in rows})
    return {name: score(params, [m for m in rows if m.model == name], catalogue) for name in models}


def site_leave_one_model_out(
    rows: Sequence[Measurement],
    base: OracleParams,
    catalogue: Catalogue,
    *,
    maxiter: int = 200,
    popsize: int = 15,
    seed: int = 0,
    done: Callable[[str], None] | None = None,
) -> list[HeldOut]:
    """Each model in turn held out: the site factors fitted on the other models' rows (from `base`) predict
    it. The figure that says how a site's calibration carries to a model it has not measured."""
    models = sorted({m.model for m in rows})
    if len(models) < 2:
        raise ModelError(f"leave-one-model-out needs at least 2 models, the rows have {len(models)}")
    out = []
    for model in models:
        train = [m for m in rows if m.model != model]
        test = [m for m in rows if m.model == model]
        fitted = calibrate_site(train, base, catalogue, maxiter=maxiter, popsize=popsize, seed=seed)
        out.append(HeldOut(model, score(fitted.result.params, test, catalogue)))
        if done is not None:
            done(model)
    return out


def pooled(reports: Sequence[FitReport]) -> tuple[float, float | None]:
    """(time MAPE, power MAPE) over every row of several reports (each weighed by its rows), percent."""
    n = sum(r.n_rows for r in reports)
    t = sum(r.mape_time * r.n_rows for r in reports) / max(n, 1)
    powered = [r for r in reports if r.mape_power is not None and r.n_power_rows]
    if not powered:
        return t, None
    n_p = sum(r.n_power_rows for r in powered)
    return t, sum((r.mape_power or 0.0) * r.n_power_rows for r in powered) / n_p
