"""A site's own calibration: per-GPU-type factors fitted on the site's rows, every other GPU's physics kept."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from easlurm.errors import ModelError
from easlurm.model.fit.calibrate import PRIOR_SIGMA_LOG10, CalibrationResult, FitReport, calibrate, score
from easlurm.model.fit.dataset import Measurement, placements_of
from easlurm.model.hardware import Catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import GPU_FACTOR_PREFIX, OracleParams

log = logging.getLogger(__name__)

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
#: a real data loader's time per step (the floor of a small batch's step) belongs to the host, not the GPU: the
#: public Zeus machines take 64 ms (P100, RTX 6000) and 33-44 ms (V100 PCIe, A40), Gavel's 27 ms, which no GPU
#: figure tells apart (the shipped value is the typical host's: `fit.hosts`). A site factor of it is fitted
#: where the rows identify it: at least `LOADER_MIN_ROWS` real-input rows of the GPU type are loader-bound,
#: the oracle's step for them with the input already on the GPU (the base parameters) at most
#: `LOADER_BOUND_FRAC` of the measured step; it keeps the global width, as `SITE_WIDE_PRIOR`'s do: the site's
#: own hosts set it. Otherwise the base's floor stays.
LOADER_PARAM = "t_input_step_s"
LOADER_MIN_ROWS = 3
LOADER_BOUND_FRAC = 0.8


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
    #: per GPU type with real-input rows, how many are loader-bound (`loader_bound`)
    loader_rows: dict[str, int] = dataclasses.field(default_factory=dict)

    def loader_floor_s(self, key: str) -> float:
        """The fitted parameters' loader floor on one GPU type (s per step)."""
        p = self.result.params
        return p[LOADER_PARAM] * p.scalars.get(f"{GPU_FACTOR_PREFIX}{key}.{LOADER_PARAM}", 1.0)

    def loader_refitted(self, key: str) -> bool:
        """Whether the fit freed that GPU type's loader floor (its rows are loader-bound: `site_free`)."""
        return f"{GPU_FACTOR_PREFIX}{key}.{LOADER_PARAM}" in self.result.free


def site_free(
    rows: Sequence[Measurement], catalogue: Catalogue, loader: Mapping[str, int] | None = None
) -> list[str]:
    """Per-GPU-type factors ('gpu:<key>.<param>') the rows of each GPU type can identify: its time terms, the
    efficiency of each class of work its rows do, a precision's factor where its rows mix precisions, the
    power terms where they carry power, the limit response where they were swept, the link factors
    their rings cross, and the data loader's floor where `loader` (`loader_rows`) counts enough loader-bound
    rows. Nothing shared by other GPU types is freed."""
    loader = loader or {}
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
        if loader.get(key, 0) >= LOADER_MIN_ROWS:
            names.append(LOADER_PARAM)
        out += [f"{GPU_FACTOR_PREFIX}{key}.{n}" for n in dict.fromkeys(names)]
    return out


def loader_rows(rows: Sequence[Measurement], base: OracleParams, catalogue: Catalogue) -> dict[str, int]:
    """Per GPU type with real-input rows, how many of them are loader-bound (`loader_bound`)."""
    bound = loader_bound(rows, base, catalogue)
    return {
        k: sum(bool(b) for m, b in zip(rows, bound) if catalogue.resolve(m.gpu) == k)
        for k in sorted({catalogue.resolve(m.gpu) for m in rows if m.input == "real"})
    }


def loader_bound(rows: Sequence[Measurement], base: OracleParams, catalogue: Catalogue) -> np.ndarray:
    """Which rows are loader-bound: real input, and the base parameters' step with the input already on the
    GPU at most `LOADER_BOUND_FRAC` of the measured step (the GPU waits for the host for the rest)."""
    real = np.array([m.input == "real" for m in rows], bool)
    if not real.any():
        return real
    mine = [m for m, r in zip(rows, real) if r]
    on_gpu = [dataclasses.replace(m.workload(), real_input=False) for m in mine]
    pred = Oracle(base, catalogue, cache_size=0).predict_rows(on_gpu, placements_of(mine))
    ok = np.ones(len(mine), bool) if pred.feasible is None else np.asarray(pred.feasible, bool)
    measured = np.array([m.step_time_s for m in mine])
    out = np.zeros(len(rows), bool)
    out[real] = ok & (np.asarray(pred.step_time_s) <= LOADER_BOUND_FRAC * measured)
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
    sigma_log10: float = SITE_PRIOR_SIGMA_LOG10,
) -> SiteCalibration:
    """Fit the site's GPU-type factors from `base` (the shipped parameters, or a file): the global values,
    the architecture factors and the activation-memory scale stay as they are, so a GPU type the rows do not
    name is predicted exactly as before. `sigma_log10`: the prior width of the site factors (log10)."""
    if not rows:
        raise ModelError("a site calibration needs at least one measurement")
    loader = loader_rows(rows, base, catalogue)
    free = site_free(rows, catalogue, loader)
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
        prior_weight=site_prior_weights(free, sigma_log10),
    )
    keys = tuple(sorted({catalogue.resolve(m.gpu) for m in rows}))
    before_by = by_model(base, rows, catalogue)
    return SiteCalibration(res, before, keys, before_by, by_model(res.params, rows, catalogue), loader)


def site_prior_weights(free: Sequence[str], sigma_log10: float = SITE_PRIOR_SIGMA_LOG10) -> dict[str, float]:
    """Each site factor's prior weight: the narrow site width, or the global one (`SITE_WIDE_PRIOR`, and the
    loader floor)."""
    narrow = (PRIOR_SIGMA_LOG10 / sigma_log10) ** 2
    wide = (*SITE_WIDE_PRIOR, LOADER_PARAM)
    return {n: 1.0 if n.rpartition(".")[2] in wide else narrow for n in free}


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
    sigma_log10: float = SITE_PRIOR_SIGMA_LOG10,
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
        fitted = calibrate_site(
            train, base, catalogue, maxiter=maxiter, popsize=popsize, seed=seed, sigma_log10=sigma_log10
        )
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
