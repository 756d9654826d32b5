"""Honest evaluation of step-time/power predictors on measurements: per-row errors, MAPE, cross-validation splits."""

from __future__ import annotations

import functools
import math
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from easlurm.errors import ConfigError, ModelError
from easlurm.model.fit.calibrate import calibrate
from easlurm.model.fit.dataset import Measurement, placements_of
from easlurm.model.hardware import Catalogue, load_catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams

#: (time_s, power_w) predicted for each row; NaN where a predictor has no answer (infeasible, no power data)
Predictor = Callable[[Sequence[Measurement]], tuple[np.ndarray, np.ndarray]]
#: fit on training rows (the split's number lets fitters seed per split) -> a predictor for other rows
Fitter = Callable[[Sequence[Measurement], int], Predictor]

CV_CHOICES = ("none", "leave-one-model-out", "leave-one-gpu-out", "kfold:K")


@dataclass(frozen=True)
class CvScheme:
    """How rows are split: `none` (train = test = all rows), leave-one-model-out, leave-one-gpu-out (each GPU
    type held out in turn), or k seeded random folds."""

    kind: str  # "none" | "lomo" | "logo" | "kfold"
    k: int = 0

    @property
    def label(self) -> str:
        return {"none": "none", "lomo": "leave-one-model-out", "logo": "leave-one-gpu-out"}.get(
            self.kind, f"kfold:{self.k}"
        )

    @property
    def held_out(self) -> bool:
        return self.kind != "none"


def parse_cv(text: str) -> CvScheme:
    """`none`, `leave-one-model-out` (or `lomo`), `leave-one-gpu-out` (or `logo`), `kfold:K`; anything else
    is a ConfigError naming --cv."""
    t = text.strip().lower()
    if t == "none":
        return CvScheme("none")
    if t in ("leave-one-model-out", "lomo"):
        return CvScheme("lomo")
    if t in ("leave-one-gpu-out", "logo"):
        return CvScheme("logo")
    if t.startswith("kfold:"):
        try:
            k = int(t.split(":", 1)[1])
        except ValueError:
            k = 0
        if k >= 2:
            return CvScheme("kfold", k)
        raise ConfigError(f"--cv: kfold needs an integer K >= 2, got {text!r}")
    raise ConfigError(f"--cv: unknown scheme {text!r} (known: {', '.join(CV_CHOICES)})")


@dataclass(frozen=True)
class Split:
    """One train/test split by row index; `name` says what was held out."""

    name: str
    train: np.ndarray
    test: np.ndarray


def make_splits(rows: Sequence[Measurement], scheme: CvScheme, seed: int = 0) -> list[Split]:
    """The splits of a scheme; every row is tested exactly once, never by a split that trained on it."""
    n = len(rows)
    if n == 0:
        raise ModelError("evaluation needs at least one measurement")
    everything = np.arange(n)
    if scheme.kind == "none":
        return [Split("all", everything, everything)]
    if scheme.kind == "lomo":
        models = sorted({m.model for m in rows})
        if len(models) < 2:
            raise ModelError(f"leave-one-model-out needs at least 2 models, the data has {len(models)}")
        model_of = np.array([m.model for m in rows], dtype=object)
        return [Split(name, everything[model_of != name], everything[model_of == name]) for name in models]
    if scheme.kind == "logo":
        gpu_of = np.array([gpu_type(m.gpu) for m in rows], dtype=object)
        gpus = sorted(set(gpu_of))
        if len(gpus) < 2:
            raise ModelError(f"leave-one-gpu-out needs at least 2 GPU types, the data has {len(gpus)}")
        return [Split(name, everything[gpu_of != name], everything[gpu_of == name]) for name in gpus]
    if not 2 <= scheme.k <= n:
        raise ModelError(f"kfold:{scheme.k} needs 2 <= K <= rows ({n})")
    order = np.random.default_rng(seed).permutation(n)
    folds = np.array_split(order, scheme.k)
    return [
        Split(f"fold{i + 1}", np.sort(np.concatenate(folds[:i] + folds[i + 1 :])), np.sort(test))
        for i, test in enumerate(folds)
    ]


@functools.lru_cache(maxsize=256)
def gpu_type(name: str) -> str:
    """A row's GPU type: its catalogue key when the shipped catalogue knows the name, else the name."""
    cat = _shipped_catalogue()
    return cat.resolve(name) if name in cat else name.strip().lower()


@functools.lru_cache(maxsize=1)
def _shipped_catalogue() -> Catalogue:
    return load_catalogue()


def _signed_pct(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not math.isfinite(pred):
        return None
    return (pred - meas) / meas * 100.0


@dataclass(frozen=True)
class RowResult:
    """One measurement against one predictor; errors are signed (+ = predicted too high), in percent."""

    index: int
    model: str
    batch: int
    precision: str
    optimizer: str
    gpu: str
    n_gpus: int
    split: str
    time_s: float
    pred_time_s: float | None
    power_w: float | None
    pred_power_w: float | None
    power_limit_w: float | None = None

    @property
    def time_err_pct(self) -> float | None:
        return _signed_pct(self.pred_time_s, self.time_s)

    @property
    def power_err_pct(self) -> float | None:
        return _signed_pct(self.pred_power_w, self.power_w)


def _mape(errors: Sequence[float | None]) -> float | None:
    vals = [abs(e) for e in errors if e is not None]
    return float(np.mean(vals)) if vals else None


@dataclass(frozen=True)
class ModelScore:
    """MAPE (percent) of one group of rows; None when no row has both a measurement and a prediction."""

    model: str
    n_rows: int
    mape_time: float | None
    mape_power: float | None


@dataclass(frozen=True)
class MethodReport:
    """A predictor's results on every row, each predicted by the split that held it out."""

    method: str
    description: str
    cv: str
    rows: tuple[RowResult, ...]
    fit_wall_s: float

    @property
    def mape_time(self) -> float | None:
        return _mape([r.time_err_pct for r in self.rows])

    @property
    def mape_power(self) -> float | None:
        return _mape([r.power_err_pct for r in self.rows])

    @property
    def n_unpredicted(self) -> int:
        """Rows without a time prediction (infeasible in the model): left out of the MAPE, reported apart."""
        return sum(r.pred_time_s is None for r in self.rows)

    def per_gpu(self) -> list[ModelScore]:
        """Scores per GPU type (the `model` field names the GPU type)."""
        return self._per(lambda r: gpu_type(r.gpu))

    def per_model(self) -> list[ModelScore]:
        return self._per(lambda r: r.model)

    def _per(self, key: Callable[[RowResult], str]) -> list[ModelScore]:
        out = []
        for name in sorted({key(r) for r in self.rows}):
            mine = [r for r in self.rows if key(r) == name]
            out.append(
                ModelScore(
                    name,
                    len(mine),
                    _mape([r.time_err_pct for r in mine]),
                    _mape([r.power_err_pct for r in mine]),
                )
            )
        return out


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


#: what a forked worker of `evaluate_method` reads: fork inherits it, where a fitter (a closure) would not pickle
_FORKED_WORK: tuple[Sequence[Measurement], Sequence[Split], Fitter] | None = None


def _split_predictions(number: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Fit on split `number`'s training rows and predict its test rows (in this process or a forked one)."""
    assert _FORKED_WORK is not None
    rows, splits, fit = _FORKED_WORK
    split = splits[number]
    t, p = fit([rows[int(i)] for i in split.train], number)([rows[int(i)] for i in split.test])
    return number, np.asarray(t, float), np.asarray(p, float)


def _all_split_predictions(
    rows: Sequence[Measurement], splits: Sequence[Split], fit: Fitter, jobs: int
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Each split's predictions, as they finish: with `jobs` > 1 the splits are fitted in forked processes
    (each split's fit is seeded by its number alone, so the results do not depend on `jobs`)."""
    global _FORKED_WORK
    _FORKED_WORK = (rows, splits, fit)
    try:
        if jobs <= 1 or len(splits) <= 1:
            yield from map(_split_predictions, range(len(splits)))
            return
        with multiprocessing.get_context("fork").Pool(processes=min(jobs, len(splits))) as pool:
            yield from pool.imap_unordered(_split_predictions, range(len(splits)))
    finally:
        _FORKED_WORK = None


def evaluate_method(
    rows: Sequence[Measurement],
    splits: Sequence[Split],
    fit: Fitter,
    method: str,
    description: str,
    cv: str = "none",
    on_split: Callable[[int], None] | None = None,
    jobs: int = 1,
) -> MethodReport:
    """Fit on each split's training rows and predict its test rows; each row's result comes from its split.
    `jobs` > 1 fits that many splits at once, in forked processes: the same report, sooner."""
    results: dict[int, RowResult] = {}
    start = time.perf_counter()
    for number, t, p in _all_split_predictions(rows, splits, fit, jobs):
        split = splits[number]
        for j, i in enumerate(split.test):
            m = rows[int(i)]
            results[int(i)] = RowResult(
                index=int(i),
                model=m.model,
                batch=m.batch,
                precision=m.precision,
                optimizer=m.optimizer,
                gpu=m.gpu,
                n_gpus=m.n_gpus,
                split=split.name,
                time_s=m.step_time_s,
                pred_time_s=_finite(float(t[j])),
                power_w=m.avg_power_w,
                pred_power_w=_finite(float(p[j])),
                power_limit_w=m.power_limit_w,
            )
        if on_split is not None:
            on_split(number)
    wall = time.perf_counter() - start
    return MethodReport(method, description, cv, tuple(results[i] for i in sorted(results)), wall)


def oracle_predictor(params: OracleParams) -> Predictor:
    """The analytical oracle with fixed parameters; infeasible placements predict NaN."""
    oracle = Oracle(params)

    def predict(test: Sequence[Measurement]) -> tuple[np.ndarray, np.ndarray]:
        pred = oracle.predict_rows([m.workload() for m in test], placements_of(test))
        ok = np.ones(len(test), bool) if pred.feasible is None else pred.feasible.astype(bool)
        t = np.where(ok, pred.step_time_s, np.nan)
        return t, np.where(ok, pred.power_w, np.nan)

    return predict


def fixed_oracle(params: OracleParams) -> Fitter:
    """A fitter that ignores its training rows: the parameters as given (today's shipped set, or a file)."""
    predictor = oracle_predictor(params)
    return lambda train, number: predictor


def calibrating_oracle(
    base: OracleParams,
    *,
    maxiter: int,
    popsize: int,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> Fitter:
    """A fitter that runs `calibrate` on the training rows (seed + split number), starting from `base`.

    `progress` receives the number of differential-evolution generations done in this split.
    """

    def fit(train: Sequence[Measurement], number: int) -> Predictor:
        gen = [0]

        def tick(nfev: int, loss: float) -> None:
            gen[0] += 1
            if progress is not None:
                progress(gen[0])

        res = calibrate(
            train,
            base,
            maxiter=maxiter,
            popsize=popsize,
            seed=seed + number,
            progress=tick,
            skip_infeasible=True,
        )
        return oracle_predictor(res.params)

    return fit
