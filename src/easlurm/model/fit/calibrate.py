"""Calibration of theta_H on measurements (thesis 4.3.6): differential evolution, L-BFGS-B polish, k-fold CV."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import differential_evolution, minimize

from easlurm.errors import ModelError
from easlurm.model.equations import HardwareArrays, WorkloadArrays, evaluate
from easlurm.model.fit.dataset import Measurement, placements_of
from easlurm.model.hardware import Catalogue, load_catalogue
from easlurm.model.oracle import Oracle, resolve_nodes
from easlurm.model.params import (
    ARCHITECTURES,
    GPU_FACTOR_PREFIX,
    PARAM_SPECS,
    OracleParams,
    bounds,
    is_arch_factor,
    is_factor,
    is_gpu_factor,
    is_host_factor,
)
from easlurm.model.zoo import SMALL_IMAGE

log = logging.getLogger(__name__)

W_TIME = 0.6
W_POWER = 0.4
#: prior width of a free parameter around its starting value: a factor of 2 (log10 0.3) for parameters
#: searched on a log scale, a quarter of the range otherwise; one prior width costs 1 point of loss (MAPE %).
PRIOR_SIGMA_LOG10 = 0.3
PRIOR_SIGMA_RANGE = 0.25


@dataclass(frozen=True)
class FitReport:
    """Errors of a parameter set on some rows; MAPE in percent (eq. 4.16-4.18)."""

    loss: float
    mape_time: float
    mape_power: float | None
    n_rows: int
    n_power_rows: int
    mape_mem: float | None = None  # peak memory, on rows with peak_mem_gib


@dataclass(frozen=True)
class CalibrationResult:
    params: OracleParams
    fit: FitReport
    free: tuple[str, ...]
    nfev: int
    wall_s: float


class _Problem:
    """Rows pre-processed once so that one objective call is a single broadcast array pass.

    Parameter vectors come in as (n_params, S) (scipy's vectorised mode); predictions are (S, rows).
    """

    def __init__(
        self, rows: Sequence[Measurement], base: OracleParams, free: Sequence[str], catalogue: Catalogue
    ):
        self.rows = list(rows)
        self.base = base
        self.free = list(free)
        # no targeted scalars (masks below apply them); the hosts' loader factors are the rows' own
        plain = OracleParams(base.values, {k: v for k, v in base.scalars.items() if is_host_factor(k)})
        wls = [m.workload() for m in self.rows]
        self.wa = WorkloadArrays.of(wls, plain).reshape(1, -1)
        pl = placements_of(self.rows)
        keys, idx = pl.gpu_codes()
        specs = [catalogue.get(k) for k in keys]
        self.hw = HardwareArrays.table(specs).take(idx).reshape(1, -1)
        self.nodes = resolve_nodes(pl, specs, idx).reshape(1, -1)
        self.n = pl.n_gpus.reshape(1, -1)
        self.b = pl.batch.reshape(1, -1)
        self.pl = pl.power_limit_w.reshape(1, -1)
        self.t = np.array([m.step_time_s for m in self.rows])
        self.p = np.array([math.nan if m.avg_power_w is None else m.avg_power_w for m in self.rows])
        self.has_p = ~np.isnan(self.p)
        groups = [(w.family, w.precision.key) for w in wls]
        names = {
            n
            for n in set(base.scalars) | set(self.free)
            if n not in PARAM_SPECS and not is_factor(n) and not is_host_factor(n)
        }
        self.masks = {n: np.array([n.split(".")[0] in g for g in groups]) for n in names}
        self.log_scale = [
            n not in PARAM_SPECS or (bounds(n)[0] > 0 and bounds(n)[1] / bounds(n)[0] >= 50)
            for n in self.free
        ]
        self.nfev = 0
        self.prior_weight: float | np.ndarray = 1.0
        # the prior's centre and widths depend on the base and free set only: computed once, not per call
        lo, hi = np.array(self.bounds()).reshape(-1, 2).T
        self._x0 = self.encode(base).reshape(-1, 1) if self.free else np.zeros((0, 1))
        self._sigma = np.where(self.log_scale, PRIOR_SIGMA_LOG10, PRIOR_SIGMA_RANGE * (hi - lo)).reshape(
            -1, 1
        )
        # an architecture's factors move the loss (a mean over all rows) by their rows' share only: their
        # prior weighs the same share, so a small architecture's rows still inform its factors
        share = []
        for name in self.free:
            if is_factor(name):
                on = self._rows_of(name)
                share.append(max(float(np.mean(on)), 1.0 / max(len(self.rows), 1)))
            else:
                share.append(1.0)
        self._share = np.array(share).reshape(-1, 1)

    def _rows_of(self, factor: str) -> np.ndarray:
        """The rows a per-architecture or per-GPU-type factor scales."""
        group = factor.rpartition(".")[0]
        if is_gpu_factor(factor):
            return np.asarray(self.hw.gpu_key[0] == group[len(GPU_FACTOR_PREFIX) :], dtype=bool)
        return np.asarray(self.hw.arch[0] == ARCHITECTURES.index(group), dtype=bool)

    def bounds(self) -> list[tuple[float, float]]:
        out = []
        for name, log_ in zip(self.free, self.log_scale):
            lo, hi = bounds(name)
            out.append((math.log10(lo), math.log10(hi)) if log_ else (lo, hi))
        return out

    def decode(self, x: np.ndarray) -> np.ndarray:
        x = np.array(x, dtype=np.float64, copy=True)
        for i, log_ in enumerate(self.log_scale):
            if log_:
                x[i] = 10.0 ** x[i]
        return x

    def encode(self, params: OracleParams) -> np.ndarray:
        v = np.array(params.vector(self.free), dtype=np.float64)
        for i, log_ in enumerate(self.log_scale):
            if log_:
                v[i] = math.log10(v[i])
        lo, hi = np.array(self.bounds()).T
        return np.clip(v, lo, hi)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time, power) of shape (S, rows) for encoded parameter vectors x of shape (n_free, S)."""
        x = np.asarray(x, dtype=np.float64)
        x = self.decode(x.reshape(len(self.free), -1) if self.free else np.zeros((0, 1)))
        values: dict[str, np.ndarray | float] = dict(self.base.physics)
        scal: dict[str, np.ndarray | float] = {
            k: v for k, v in self.base.scalars.items() if k not in values and not is_host_factor(k)
        }
        for i, name in enumerate(self.free):
            (values if name in PARAM_SPECS or is_factor(name) else scal)[name] = x[i].reshape(-1, 1)
        s = {op: np.ones((1, len(self.rows))) for op in ("gemm", "conv", "alu", "mem")}
        for name, val in scal.items():
            op = name.split(".")[1]
            s[op] = s[op] * np.where(self.masks[name], val, 1.0)
        wa = dataclasses.replace(self.wa, s_gemm=s["gemm"], s_conv=s["conv"], s_alu=s["alu"], s_mem=s["mem"])
        res = evaluate(wa, self.hw, self.n, self.b, self.pl, values, self.nodes)  # type: ignore[arg-type]
        self.nfev += max(x.shape[1], 1)
        return np.atleast_2d(res.step_time_s), np.atleast_2d(res.power_w)

    def prior(self, x: np.ndarray) -> np.ndarray:
        """Penalty of encoded vectors x (n_free, S) for leaving the base values (a Gaussian prior)."""
        x = np.asarray(x, dtype=np.float64).reshape(len(self.free), -1)
        return np.sum(self._share * self.prior_weight * ((x - self._x0) / self._sigma) ** 2, axis=0)

    def weigh_prior(self, weight: float | Mapping[str, float]) -> None:
        """Multiply the prior's penalty by `weight`, or per free name by a mapping's (1.0 for names it lacks)."""
        if isinstance(weight, Mapping):
            self.prior_weight = np.array([weight.get(n, 1.0) for n in self.free], dtype=np.float64).reshape(
                -1, 1
            )
        else:
            self.prior_weight = float(weight)

    def loss_and_gradient(self, v: np.ndarray, step: float = 1e-8) -> tuple[float, np.ndarray]:
        """Loss at one encoded vector and its forward-difference gradient, in one vectorised pass (the
        polish then costs one array evaluation per iteration, not one per free parameter)."""
        n = len(v)
        x = np.asarray(v, dtype=np.float64).reshape(-1, 1) + np.hstack([np.zeros((n, 1)), step * np.eye(n)])
        out = self.losses(x)
        return float(out[0]), (out[1:] - out[0]) / step

    def losses(self, x: np.ndarray) -> np.ndarray:
        return self.data_losses(x) + (self.prior(x) if self.free else 0.0)

    def data_losses(self, x: np.ndarray) -> np.ndarray:
        t, p = self.predict(x)
        mt = np.mean(np.abs(t - self.t) / self.t, axis=1) * 100.0
        loss = mt
        if self.has_p.any():
            mp = np.mean(np.abs(p[:, self.has_p] - self.p[self.has_p]) / self.p[self.has_p], axis=1) * 100.0
            loss = W_TIME * mt + W_POWER * mp
        return np.where(np.isfinite(loss), loss, 1e9)


def sweep_times(
    rows: Sequence[Measurement], base: OracleParams, name: str, values: np.ndarray, catalogue: Catalogue
) -> np.ndarray:
    """Predicted step times (values x rows) with one parameter set to each value, the rest of `base` kept: one
    array pass for the whole sweep."""
    prob = _Problem(rows, base, [name], catalogue)
    x = np.asarray(values, dtype=np.float64).reshape(1, -1)
    t, _ = prob.predict(np.log10(x) if prob.log_scale[0] else x)
    return t


def score(params: OracleParams, rows: Sequence[Measurement], catalogue: Catalogue | None = None) -> FitReport:
    """MAPE of time, power and peak memory, and the combined loss (0.6/0.4, or time alone without power)."""
    prob = _Problem(rows, params, [], catalogue or load_catalogue())
    t, p = prob.predict(np.zeros((0, 1)))
    mt = float(np.mean(np.abs(t[0] - prob.t) / prob.t) * 100.0)
    mp = None
    loss = mt
    if prob.has_p.any():
        mp = float(np.mean(np.abs(p[0, prob.has_p] - prob.p[prob.has_p]) / prob.p[prob.has_p]) * 100.0)
        loss = W_TIME * mt + W_POWER * mp
    mm = None
    measured = np.array([math.nan if m.peak_mem_gib is None else m.peak_mem_gib for m in rows])
    has_m = ~np.isnan(measured)
    if has_m.any():
        pred = _peak_mem_gib(params, rows, catalogue)
        mm = float(np.mean(np.abs(pred[has_m] - measured[has_m]) / measured[has_m]) * 100.0)
    return FitReport(loss, mt, mp, len(rows), int(prob.has_p.sum()), mm)


def _peak_mem_gib(
    params: OracleParams, rows: Sequence[Measurement], catalogue: Catalogue | None
) -> np.ndarray:
    oracle = Oracle(params, catalogue or load_catalogue(), cache_size=0)
    pred = oracle.predict_rows([m.workload() for m in rows], placements_of(rows))
    assert pred.peak_mem_gib is not None
    return np.asarray(pred.peak_mem_gib, dtype=np.float64)


def feasible_rows(
    rows: Sequence[Measurement], params: OracleParams, catalogue: Catalogue | None = None
) -> tuple[list[Measurement], list[Measurement]]:
    """(rows the model can run, rows it finds out of memory) under the given parameters."""
    oracle = Oracle(params, catalogue or load_catalogue(), cache_size=0)
    ok = oracle.predict_rows([m.workload() for m in rows], placements_of(rows)).feasible
    assert ok is not None
    return [m for m, f in zip(rows, ok) if f], [m for m, f in zip(rows, ok) if not f]


def fit_memory(
    params: OracleParams, rows: Sequence[Measurement], catalogue: Catalogue | None = None
) -> OracleParams:
    """Least-squares `mem_act_scale` on the rows' measured peak memory (closed form: memory is linear in it).

    Rows without `peak_mem_gib` are ignored; without any, the parameters come back unchanged.
    """
    measured = np.array([math.nan if m.peak_mem_gib is None else m.peak_mem_gib for m in rows])
    has_m = ~np.isnan(measured)
    if not has_m.any():
        return params
    one = _peak_mem_gib(params.replace(["mem_act_scale"], [1.0]), rows, catalogue)[has_m]
    two = _peak_mem_gib(params.replace(["mem_act_scale"], [2.0]), rows, catalogue)[has_m]
    act = two - one
    base = one - act
    # relative least squares: each row weighs by its own size, as the MAPE does
    weight = 1.0 / measured[has_m] ** 2
    k = float(np.sum(weight * act * (measured[has_m] - base)) / max(np.sum(weight * act * act), 1e-30))
    lo, hi = bounds("mem_act_scale")
    return params.replace(["mem_act_scale"], [min(max(k, lo), hi)])


def targeted_scalars(rows: Sequence[Measurement]) -> list[str]:
    """Scalars as in the thesis: per precision other than the most common one, and ALBERT's memory."""
    precs = Counter(m.precision_key for m in rows)
    fams = {m.family for m in rows}
    wls = [m.workload() for m in rows]
    has_conv = any(w.flops_conv > 0.3 * w.flops_total for w in wls)
    has_gemm = any(w.flops_gemm > 0.3 * w.flops_total for w in wls)
    out = []
    if len(precs) > 1:
        reference = precs.most_common(1)[0][0]
        for prec in sorted(precs):
            if prec != reference:
                out += [f"{prec}.gemm"] * has_gemm + [f"{prec}.conv"] * has_conv
    if "albert" in fams and len(fams) > 1:
        out.append("albert.mem")
    return out


def architectures_of(rows: Sequence[Measurement], catalogue: Catalogue | None = None) -> list[str]:
    """The rows' GPU architectures, the one with the most GPU types first (then most rows; '' for GPUs that
    name none is left out). The first is the reference of `arch_free`: anchoring the shared physics on the
    broadest architecture leaves what one machine's peculiarities (its host, its input pipeline) add to the
    factors of that machine's architecture."""
    cat = catalogue or load_catalogue()
    count = Counter(cat.get(m.gpu).architecture for m in rows)
    types: dict[str, set[str]] = {}
    for m in rows:
        types.setdefault(cat.get(m.gpu).architecture, set()).add(cat.resolve(m.gpu))
    count.pop("", None)
    return sorted(count, key=lambda a: (len(types[a]), count[a]), reverse=True)


#: the power terms an architecture's own rows fit (`arch_free`)
POWER_FACTORS = ("c_p", "u_comp", "e_simt_pj", "u_mem")


def arch_free(rows: Sequence[Measurement], catalogue: Catalogue | None = None) -> list[str]:
    """Per-architecture factors the rows inform: for every architecture but the most measured one (the
    reference the shared time physics is fitted to), efficiencies of the work its rows do and HBM and host
    costs; for every architecture with power but the one with the most power rows (the power reference),
    the power terms. A GPU whose architecture has no power rows then takes the power physics of the most
    measured one, not the bare priors. The response to a power limit (`cap_alpha`, `p_floor_frac`,
    `mem_clock_knee`) stays shared: every sweep informs it, and a GPU never swept takes it."""
    cat = catalogue or load_catalogue()
    archs = architectures_of(rows, cat)
    powered = Counter(cat.get(m.gpu).architecture for m in rows if m.avg_power_w is not None)
    power_ref = max((a for a in archs if powered[a]), key=lambda a: powered[a], default="")
    out: list[str] = []
    for arch in archs:
        if arch != power_ref and powered[arch]:
            out += [f"{arch}.{n}" for n in POWER_FACTORS]
        if arch == archs[0]:
            continue
        mine = [m for m in rows if cat.get(m.gpu).architecture == arch]
        wls = [m.workload() for m in mine]
        names = ["c_mem", "t_host_op_s", "t_fixed_s"]
        if any(w.flops_gemm > 0.3 * w.flops_total for w in wls):
            names.append("beta_gemm")
        if any(w.flops_conv > 0.3 * w.flops_total for w in wls):
            names.append("beta_conv")
        precs = {m.precision_key for m in mine}
        if "fp32" in precs and len(precs) > 1:
            names.append("c_fp32")
        out += [f"{arch}.{n}" for n in names]
    return out


def comm_free(rows: Sequence[Measurement], catalogue: Catalogue | None = None) -> list[str]:
    """The communication parameters multi-GPU rows inform: the achieved-bandwidth factor of each link kind
    their rings cross (NVLink/PCIe inside a node, InfiniBand/Ethernet between nodes) and the network hop."""
    cat = catalogue if catalogue is not None else load_catalogue()
    out: list[str] = []
    for m in rows:
        if m.n_gpus <= 1:
            continue
        spec = cat.get(m.gpu)
        names = [f"bw_eff_{spec.link_kind}"]
        if (m.n_nodes or -(-m.n_gpus // spec.gpus_per_node)) > 1:
            names += [f"bw_eff_{'ib' if spec.net_kind == 'infiniband' else 'eth'}", "l_hop_net_s"]
        out += [n for n in names if n not in out]
    return out


def default_free(rows: Sequence[Measurement], catalogue: Catalogue | None = None) -> list[str]:
    """Parameters the data can inform: GEMM/conv terms only with such work, power terms only with power data,
    per-architecture factors for every architecture but the most measured one (`arch_free`).

    Each has a prior (its default, `PRIOR_SIGMA`): parameters the rows barely inform stay near it instead of
    wandering to a bound, which is what lets a fit on a few models hold on others.
    """
    wls = [m.workload() for m in rows]
    free = ["c_mem", "t_kern_s", "t_host_op_s", "t_fixed_s"]
    if any(w.flops_gemm > 0.3 * w.flops_total for w in wls):
        free += ["beta_gemm"]
    if any(w.flops_attn > 0.02 * w.flops_total for w in wls):
        free += ["beta_attn"]
    if any(w.flops_conv > 0.3 * w.flops_total for w in wls):
        free += ["beta_conv", "k_layout"]
        # small images (CIFAR) have few output tiles per convolution: their rows inform the last wave's cost
        if any(w.flops_conv > 0.3 * w.flops_total and (w.image_size or 1e9) <= SMALL_IMAGE for w in wls):
            free += ["t_conv_wave_s"]
    if any(w.flops_dw > 0.01 * w.flops_total for w in wls):
        free += ["beta_dw"]
    if any(m.n_gpus > 1 for m in rows):
        free += ["t_sync_s", *comm_free(rows, catalogue)]
    if any(m.avg_power_w is not None for m in rows):
        free += ["c_p", "u_comp", "u_mem", "u_idle"]
        if any(m.precision_key == "fp32" for m in rows):
            free += ["e_simt_pj"]
        if any(m.power_limit_w is not None for m in rows):
            free += ["cap_alpha", "p_floor_frac", "mem_clock_knee"]
    real = [w for w in wls if w.real_input]
    if real:
        free += ["t_input_step_s"]
    precs = {m.precision_key for m in rows}
    free += [f"c_{prec}" for prec in ("fp32", "tf32") if prec in precs and len(precs) > 1]
    free += [n for n in targeted_scalars(rows) if n.split(".")[0] not in precs]
    per_arch = arch_free(rows, catalogue)
    if per_arch:
        # a fixed per-step overhead belongs to a machine's host and input pipeline: with several architectures
        # it is fitted per architecture around its prior, so that one machine's pipeline stays its own
        free.remove("t_fixed_s")
    return free + per_arch


def calibrate(
    rows: Sequence[Measurement],
    base: OracleParams | None = None,
    free: Sequence[str] | None = None,
    *,
    maxiter: int = 200,
    popsize: int = 15,
    seed: int = 0,
    polish: bool = True,
    tol: float = 1e-6,
    catalogue: Catalogue | None = None,
    progress: Callable[[int, float], None] | None = None,
    skip_infeasible: bool = False,
    memory: bool = True,
    prior_weight: float | Mapping[str, float] = 1.0,
) -> CalibrationResult:
    """Fit the free parameters: DE (best1bin, LHS init, mutation (0.5, 1.5), CR 0.7), then L-BFGS-B.

    With per-architecture factors among them, in stages: the shared parameters, then each architecture's
    factors on its own rows, then a joint polish. A row the model finds infeasible (out of memory) is an error,
    or with `skip_infeasible` left out (evaluation scores it as unpredicted). `memory=False` leaves the
    activation-memory scale as given (a site's calibration: it is shared by every GPU type). `prior_weight`
    multiplies the prior's penalty, w narrowing a prior width by sqrt(w): one weight, or one per free name."""
    if not rows:
        raise ModelError("calibration needs at least one measurement")
    base = base or OracleParams()
    catalogue = catalogue or load_catalogue()
    free = list(free) if free is not None else default_free(rows, catalogue)
    _check_free(free)
    archs = tuple(dict.fromkeys([*base.architectures, *architectures_of(rows, catalogue)]))
    base = base.replace([], [], architectures=archs)
    if "t_input_step_s" in free:
        base = base.replace(["t_input_step_s"], [input_step_start(rows, base)])
    rows, prob = _feasible_problem(rows, base, free, catalogue, skip_infeasible)
    prob.weigh_prior(prior_weight)
    start = time.perf_counter()
    if not free:
        fitted = fit_memory(base, rows, catalogue) if memory else base
        return CalibrationResult(fitted, score(fitted, rows, catalogue), (), 0, 0.0)

    def cb(intermediate_result: object) -> None:
        if progress is not None:
            progress(prob.nfev, float(getattr(intermediate_result, "fun", math.nan)))

    de_kw: dict[str, Any] = {"maxiter": maxiter, "popsize": popsize, "tol": tol}
    shared = [n for n in free if not is_arch_factor(n)]
    by_arch = {a: [n for n in free if n.partition(".")[0] == a] for a in ARCHITECTURES}
    by_arch = {a: names for a, names in by_arch.items() if names}
    nfev = 0
    if shared and by_arch:
        x, nfev = _staged_search(prob, rows, base, shared, by_arch, catalogue, seed, cb, de_kw, prior_weight)
        de_fun = float(prob.losses(x.reshape(-1, 1))[0])
    else:
        x = _evolve(prob, seed, cb, **de_kw)
        de_fun = float(prob.losses(x.reshape(-1, 1))[0])
    if polish:
        res = minimize(prob.loss_and_gradient, x, jac=True, method="L-BFGS-B", bounds=prob.bounds())
        if res.fun <= de_fun:
            x = res.x
    params = base.replace(free, [float(v) for v in prob.decode(x.reshape(-1, 1))[:, 0]])
    if memory:
        params = fit_memory(params, rows, catalogue)
    wall = time.perf_counter() - start
    fit = score(params, rows, catalogue)
    log.info("calibrated %d parameters on %d rows: loss %.3f in %.1f s", len(free), len(rows), fit.loss, wall)
    return CalibrationResult(params, fit, tuple(free), prob.nfev + nfev, wall)


def _check_free(free: Sequence[str]) -> None:
    """Refuse a free parameter name the oracle does not know, before any work."""
    for name in free:
        group, _, op = name.partition(".")
        if (
            name not in PARAM_SPECS
            and not is_factor(name)
            and not (group and op in ("gemm", "conv", "alu", "mem"))
        ):
            raise ModelError(
                f"unknown parameter {name!r} to calibrate (known: {', '.join(PARAM_SPECS)}, "
                "<architecture>.<parameter>, gpu:<gpu>.<parameter>, <family|precision>.<gemm|conv|alu|mem>)"
            )


def _feasible_problem(
    rows: Sequence[Measurement],
    base: OracleParams,
    free: list[str],
    catalogue: Catalogue,
    skip_infeasible: bool,
) -> tuple[Sequence[Measurement], _Problem]:
    """The rows to fit and their problem: a row infeasible at the start (out of memory) is an error, or with
    `skip_infeasible` left out with a warning (all of them infeasible is still an error)."""
    prob = _Problem(rows, base, free, catalogue)
    t0, _ = prob.predict(np.zeros((len(free), 1)) + prob.encode(base).reshape(-1, 1))
    bad = [i for i in range(len(rows)) if not np.isfinite(t0[0, i])]
    if bad and (not skip_infeasible or len(bad) == len(rows)):
        m = rows[bad[0]]
        raise ModelError(
            f"measurement {bad[0] + 1} ({m.model} x{m.n_gpus} {m.gpu}) is infeasible in the model"
        )
    if bad:
        log.warning(
            "%d of %d measurements are infeasible in the model (out of memory): left out", len(bad), len(rows)
        )
        rows = [m for i, m in enumerate(rows) if i not in set(bad)]
        prob = _Problem(rows, base, free, catalogue)
    return rows, prob


def _staged_search(
    prob: _Problem,
    rows: Sequence[Measurement],
    base: OracleParams,
    shared: list[str],
    by_arch: dict[str, list[str]],
    catalogue: Catalogue,
    seed: int,
    cb: Callable[[object], None],
    de_kw: dict[str, Any],
    prior_weight: float | Mapping[str, float] = 1.0,
) -> tuple[np.ndarray, int]:
    """(encoded start of the joint polish, evaluations spent): the shared physics first (factors at their
    priors), then each architecture's factors on its own rows (they touch no other row)."""
    nfev = 0
    first = _Problem(rows, base, shared, catalogue)
    first.weigh_prior(prior_weight)
    x1 = _evolve(first, seed, cb, **de_kw)
    staged = base.replace(shared, [float(v) for v in first.decode(x1.reshape(-1, 1))[:, 0]])
    nfev += first.nfev
    arch_of = {m.gpu: catalogue.get(m.gpu).architecture for m in rows}
    for number, (arch, names) in enumerate(by_arch.items()):
        mine = [m for m in rows if arch_of[m.gpu] == arch]
        if not mine:
            continue
        sub = _Problem(mine, staged, names, catalogue)
        sub.weigh_prior(prior_weight)
        xa = _evolve(sub, seed + 1 + number, None, **de_kw)
        staged = staged.replace(names, [float(v) for v in sub.decode(xa.reshape(-1, 1))[:, 0]])
        nfev += sub.nfev
    return prob.encode(staged), nfev


def input_step_start(rows: Sequence[Measurement], base: OracleParams) -> float:
    """Where the fit of a real loader's per-step time starts: the shortest real-input step measured.

    The smallest batches of a real loader take about the loader's time whatever the GPU, but a start below
    it leaves the input bound inactive (no gradient), and a search may then explain those steps by a
    machine's host time instead: a different answer on every seed, and a wrong one on a GPU never fitted."""
    steps = [m.step_time_s for m in rows if m.workload().real_input and m.step_time_s > 0]
    lo, hi = bounds("t_input_step_s")
    return float(np.clip(min(steps), lo, hi)) if steps else float(base["t_input_step_s"])


def _evolve(
    prob: _Problem,
    seed: int,
    callback: Callable[[object], None] | None,
    maxiter: int,
    popsize: int,
    tol: float,
) -> np.ndarray:
    """Differential evolution of one problem's free parameters from its base; the best encoded vector."""
    de = differential_evolution(
        prob.losses,
        prob.bounds(),
        strategy="best1bin",
        maxiter=maxiter,
        popsize=popsize,
        init="latinhypercube",
        mutation=(0.5, 1.5),
        recombination=0.7,
        tol=tol,
        rng=np.random.default_rng(seed),
        polish=False,
        vectorized=True,
        updating="deferred",
        x0=prob.encode(prob.base),
        callback=callback,
    )
    return np.asarray(de.x)


def cross_validate(rows: Sequence[Measurement], k: int = 5, seed: int = 0, **kw: object) -> list[FitReport]:
    """k-fold cross-validation: calibrate on k-1 folds, score on the held-out one (k <= rows)."""
    n = len(rows)
    k = min(k, n)
    if k < 2:
        raise ModelError(f"cross-validation needs at least 2 rows, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    folds = np.array_split(order, k)
    out = []
    for i, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != i])
        train_rows = [rows[int(t)] for t in train]
        res = calibrate(train_rows, seed=seed + i, **kw)  # type: ignore[arg-type]
        out.append(score(res.params, [rows[int(t)] for t in test], kw.get("catalogue")))  # type: ignore[arg-type]
    return out
