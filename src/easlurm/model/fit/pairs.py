"""Fit the co-location parameters to measured co-runs (a pairs CSV): bounded least squares on slowdowns."""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from easlurm.errors import ModelError, TraceError
from easlurm.files import reading
from easlurm.model.colocation import GpuFacts, Sharing, Solo, corun, parse_sharing, predict_solo
from easlurm.model.hardware import DEFAULT_GPU
from easlurm.model.params import COLOC_PARAMS, OracleParams, bounds
from easlurm.model.zoo import get_workload

#: columns of a pairs CSV (`easlurm model measure --pairs`): two rows per pair, one per job. Times are one
#: step of that job (alone: the GPU to itself; shared: while the partner runs); powers are the whole GPU's.
PAIR_REQUIRED = (
    "pair",
    "model",
    "batch",
    "precision",
    "step_time_alone_s",
    "step_time_shared_s",
)
PAIR_OPTIONAL = ("gpu", "sharing", "seq_len", "image_size", "gpu_power_alone_w", "gpu_power_shared_w")
log = logging.getLogger(__name__)
#: one prior width (a quarter of the parameter's range) costs as much as this relative slowdown error
PRIOR_WEIGHT = 0.02


@dataclass(frozen=True)
class PairJob:
    """One job of a measured pair."""

    model: str
    batch: int
    precision: str
    step_time_alone_s: float
    step_time_shared_s: float
    gpu_power_alone_w: float | None = None
    seq_len: int | None = None
    image_size: int | None = None

    @property
    def slowdown(self) -> float:
        return self.step_time_shared_s / self.step_time_alone_s


@dataclass(frozen=True)
class PairRun:
    """Two jobs measured alone and then together on one GPU of type `gpu` under a sharing mode."""

    pair: str
    gpu: str
    sharing: Sharing
    jobs: tuple[PairJob, PairJob]
    gpu_power_shared_w: float | None = None


@dataclass(frozen=True)
class PairFit:
    """Fitted parameters and the errors (percent) before and after, on the pairs given."""

    params: OracleParams
    values: dict[str, float]
    mape_slowdown_before: float
    mape_slowdown: float
    mape_power: float | None
    n_pairs: int
    nfev: int


def read_pairs(path: str | Path) -> list[PairRun]:
    """Parse a pairs CSV; bad input is one TraceError line naming the file, row and column."""
    p = Path(path)
    try:
        with open(p, newline="", encoding="utf-8") as fh, reading(p, "pairs CSV", TraceError):
            lines = [(i, line) for i, line in enumerate(fh, start=1) if not line.startswith("#")]
    except OSError as exc:
        raise TraceError(f"{p}: cannot read pairs ({exc.strerror})") from exc
    reader = csv.DictReader(line for _, line in lines)
    header = reader.fieldnames or []
    missing = [c for c in PAIR_REQUIRED if c not in header]
    if missing:
        raise TraceError(f"{p}: missing column(s) {', '.join(missing)}")
    groups: dict[str, list[tuple[int, Mapping[str, str]]]] = {}
    for (i, _), row in zip(lines[1:], reader):
        groups.setdefault((row.get("pair") or "").strip(), []).append((i, row))
    pairs = []
    inference = 0
    for pair, rows in groups.items():
        if not pair or len(rows) != 2:
            raise TraceError(f"{p}: line {rows[0][0]}: pair {pair!r} needs exactly two rows, has {len(rows)}")
        first = rows[0][1]
        modes = {(row.get("mode") or "train").strip() or "train" for _, row in rows}
        if modes - {"train", "infer"}:
            raise TraceError(f"{p}: line {rows[0][0]}: mode must be train or infer, got {sorted(modes)}")
        if "infer" in modes:  # the oracle predicts training steps only
            inference += 1
            continue
        gpu = (first.get("gpu") or "").strip() or DEFAULT_GPU
        sharing = parse_sharing(
            (first.get("sharing") or "").strip() or "time-slice", f"{p}: line {rows[0][0]}"
        )
        if sharing is Sharing.NONE:
            raise TraceError(f"{p}: line {rows[0][0]}: sharing: a co-run needs time-slice or mps")
        jobs = tuple(_job(row, f"{p}: line {line}") for line, row in rows)
        shared_w = _number(first.get("gpu_power_shared_w"), "gpu_power_shared_w", f"{p}: line {rows[0][0]}")
        pairs.append(PairRun(pair, gpu, sharing, (jobs[0], jobs[1]), shared_w))
    if inference:
        log.warning(
            "%s: %d pair(s) with an inference job left out: the oracle predicts training steps", p, inference
        )
    if not pairs:
        raise TraceError(f"{p}: no training pairs")
    return pairs


def _job(row: Mapping[str, str], where: str) -> PairJob:
    def need(col: str) -> float:
        v = _number(row.get(col), col, where)
        if v is None:
            raise TraceError(f"{where}: {col} is required")
        return v

    model = (row.get("model") or "").strip()
    if not model:
        raise TraceError(f"{where}: model is required")
    seq = _number(row.get("seq_len"), "seq_len", where)
    img = _number(row.get("image_size"), "image_size", where)
    return PairJob(
        model=model,
        batch=int(need("batch")),
        precision=(row.get("precision") or "").strip() or "bf16",
        step_time_alone_s=need("step_time_alone_s"),
        step_time_shared_s=need("step_time_shared_s"),
        gpu_power_alone_w=_number(row.get("gpu_power_alone_w"), "gpu_power_alone_w", where),
        seq_len=None if seq is None else int(seq),
        image_size=None if img is None else int(img),
    )


def _number(raw: str | None, col: str, where: str) -> float | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        v = float(raw)
    except ValueError:
        raise TraceError(f"{where}: {col} must be a number, got {raw!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise TraceError(f"{where}: {col} must be > 0, got {raw!r}")
    return v


def solos(oracle: Any, pairs: Sequence[PairRun]) -> list[tuple[Solo, Solo, GpuFacts]]:
    """The oracle's view of each pair's jobs alone (computed once: the co-location parameters do not
    change them)."""
    out = []
    for pr in pairs:
        gpu_type = oracle.catalogue.resolve(pr.gpu)
        facts = GpuFacts.of(oracle.catalogue.get(gpu_type), oracle.params)
        two = []
        for j in pr.jobs:
            wl = get_workload(j.model, precision=j.precision, seq_len=j.seq_len, image_size=j.image_size)
            s = predict_solo(oracle, wl, j.batch, gpu_type)
            if s is None:
                raise ModelError(f"pair {pr.pair}: {j.model} batch {j.batch} does not fit one {gpu_type}")
            two.append(s)
        out.append((two[0], two[1], facts))
    return out


def fit_colocation(oracle: Any, pairs: Sequence[PairRun], free: Sequence[str] = COLOC_PARAMS) -> PairFit:
    """Least squares on log slowdowns of both jobs of every pair, with a weak prior towards the defaults.

    The jobs' alone busy fractions come from the oracle; only the co-location parameters move."""
    from scipy.optimize import least_squares

    base = oracle.params
    views = solos(oracle, pairs)
    measured = np.log([[j.slowdown for j in pr.jobs] for pr in pairs]).ravel()
    lo = np.array([bounds(n)[0] for n in free])
    hi = np.array([bounds(n)[1] for n in free])
    x0 = np.clip(np.array(base.vector(free)), lo, hi)
    width = (hi - lo) / 4.0

    def predict(x: np.ndarray) -> np.ndarray:
        vals = {**base.values, **dict(zip(free, (float(v) for v in x), strict=True))}
        out: list[float] = []
        for (a, b, g), pr in zip(views, pairs, strict=True):
            r = corun(a, b, g, pr.sharing, vals)
            out.extend(r.slowdown if r.feasible else (1e3, 1e3))
        return np.log(np.asarray(out))

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([predict(x) - measured, PRIOR_WEIGHT * (x - x0) / width])

    res = least_squares(residuals, x0, bounds=(lo, hi), x_scale=width, diff_step=1e-3)
    params = base.replace(free, res.x)
    return PairFit(
        params=params,
        values={n: float(v) for n, v in zip(free, res.x, strict=True)},
        mape_slowdown_before=_mape(predict(x0), measured),
        mape_slowdown=_mape(predict(res.x), measured),
        mape_power=_power_mape(views, pairs, params),
        n_pairs=len(pairs),
        nfev=int(res.nfev),
    )


def _mape(log_pred: np.ndarray, log_meas: np.ndarray) -> float:
    return float(np.mean(np.abs(np.exp(log_pred - log_meas) - 1.0)) * 100.0)


def _power_mape(
    views: Sequence[tuple[Solo, Solo, GpuFacts]], pairs: Sequence[PairRun], params: OracleParams
) -> float | None:
    """Shared-GPU power error (%) on pairs with a measured shared power; None without any."""
    errs = []
    for (a, b, g), pr in zip(views, pairs, strict=True):
        if pr.gpu_power_shared_w is None:
            continue
        r = corun(a, b, g, pr.sharing, params)
        if r.feasible:
            errs.append(abs(r.power_w / pr.gpu_power_shared_w - 1.0))
    return float(np.mean(errs) * 100.0) if errs else None
