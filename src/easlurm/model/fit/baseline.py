"""Data-driven baseline (in the spirit of per-operation regressors): features summed over the network, then a fit.

The oracle's workload already sums each layer's operations by class; here those sums become regression features
(per-GPU FLOPs of GEMM/convolution/ALU forward and backward over the precision's peak, activation and weight bytes
over HBM bandwidth, kernel launches, batch, precision, the GPU's peaks), and a random forest (scikit-learn, extra
`easlurm[baseline]`) or a numpy ridge regression in log space learns step time and power. It knows no physics, so
the evaluation shows where the oracle's structure pays off against plain curve fitting.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.model.fit.dataset import Measurement
from easlurm.model.fit.evaluate import Fitter, Predictor
from easlurm.model.hardware import Catalogue, load_catalogue
from easlurm.model.workload import Precision

#: feature names, in column order
FEATURES = (
    "t_gemm_f",
    "t_gemm_b",
    "t_conv_f",
    "t_conv_b",
    "t_alu_f",
    "t_alu_b",
    "t_act_bytes",
    "t_weight_bytes",
    "kernels",
    "batch_per_gpu",
    "n_params",
    "n_gpus",
    "fp32",
    "tf32",
    "mixed",
    "peak_tflops",
    "hbm_gbs",
    "tdp_w",
    "limit_frac",
)
KINDS = ("auto", "rf", "ridge", "none")


def sklearn_available() -> bool:
    return importlib.util.find_spec("sklearn") is not None


def resolve_kind(kind: str) -> str:
    """`auto` -> random forest when scikit-learn is installed, else ridge; `rf` without it is a ConfigError."""
    k = kind.strip().lower()
    if k not in KINDS:
        raise ConfigError(f"--baseline: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    if k == "auto":
        return "rf" if sklearn_available() else "ridge"
    if k == "rf" and not sklearn_available():
        raise ConfigError("--baseline rf needs scikit-learn: pip install 'easlurm[baseline]' (or use ridge)")
    return k


def features(rows: Sequence[Measurement], catalogue: Catalogue | None = None) -> np.ndarray:
    """(rows, len(FEATURES)): per-GPU, per-step quantities, log1p-compressed (times in ms, counts as is)."""
    cat = catalogue or load_catalogue()
    out = np.empty((len(rows), len(FEATURES)))
    for i, m in enumerate(rows):
        w = m.workload()
        spec = cat.get(cat.resolve(m.gpu))
        prec = Precision.parse(m.precision)
        peak = spec.peak_flops(prec)
        alu_peak = spec.fp32_tflops * 1e12
        hbm = spec.hbm_gbs * 1e9
        b = m.batch / m.n_gpus
        limit = 1.0 if m.power_limit_w is None else m.power_limit_w / spec.tdp_w
        ms = np.array(
            [
                b * w.flops_gemm_f / peak,
                b * w.flops_gemm_b / peak,
                b * w.flops_conv_f / peak,
                b * w.flops_conv_b / peak,
                b * w.flops_alu_f / alu_peak,
                b * w.flops_alu_b / alu_peak,
                b * w.act_bytes / hbm,
                (w.weight_bytes + w.opt_bytes) / hbm,
            ]
        )
        out[i, :8] = np.log1p(ms * 1e3)
        out[i, 8:] = [
            math.log1p(w.kernels),
            math.log1p(b),
            math.log1p(w.n_params / 1e6),
            math.log2(m.n_gpus),
            float(prec is Precision.FP32),
            float(prec is Precision.TF32),
            float(prec.mixed),
            peak / 1e12,
            spec.hbm_gbs,
            spec.tdp_w,
            limit,
        ]
    return out


class Ridge:
    """Ridge regression on centred columns with an unpenalised intercept (closed form, deterministic).

    Columns are not divided by their spread: a feature that barely varies in training (a ViT's one patch
    convolution when no CNN is in the training set) would otherwise get a huge weight and explode elsewhere.
    """

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha

    def fit(self, x: np.ndarray, y: np.ndarray) -> Ridge:
        self.mean = x.mean(axis=0)
        z = x - self.mean
        self.y0 = float(y.mean())
        a = z.T @ z + self.alpha * np.eye(z.shape[1])
        self.coef = np.linalg.solve(a, z.T @ (y - self.y0))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray((x - self.mean) @ self.coef + self.y0)


def _regressor(kind: str, seed: int) -> Any:
    if kind == "rf":
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(n_estimators=300, min_samples_leaf=1, random_state=seed, n_jobs=1)
    return Ridge(alpha=1.0)


def _tdp(rows: Sequence[Measurement], cat: Catalogue) -> np.ndarray:
    return np.array([cat.get(cat.resolve(m.gpu)).tdp_w * m.n_gpus for m in rows])


def baseline_fitter(kind: str, seed: int = 0, catalogue: Catalogue | None = None) -> Fitter:
    """Fit log(step time) and power / (n_gpus x TDP) on the training rows' features; predict others.

    Power is fitted on the rows that have it; with none, power predictions are NaN.
    """
    cat = catalogue or load_catalogue()
    if kind not in ("rf", "ridge"):
        raise ConfigError(f"baseline kind must be rf or ridge, got {kind!r}")

    def fit(train: Sequence[Measurement], number: int) -> Predictor:
        x = features(train, cat)
        t_model = _regressor(kind, seed + number)
        t_model.fit(x, np.log([m.step_time_s for m in train]))
        has_p = np.array([m.avg_power_w is not None for m in train])
        p_model = None
        if has_p.any():
            frac = np.array([m.avg_power_w or math.nan for m in train]) / _tdp(train, cat)
            p_model = _regressor(kind, seed + number)
            p_model.fit(x[has_p], frac[has_p])

        def predict(test: Sequence[Measurement]) -> tuple[np.ndarray, np.ndarray]:
            xt = features(test, cat)
            t = np.exp(np.asarray(t_model.predict(xt), dtype=np.float64))
            if p_model is None:
                return t, np.full(len(test), np.nan)
            frac_t = np.asarray(p_model.predict(xt), dtype=np.float64)
            return t, frac_t * _tdp(test, cat)

        return predict

    return fit
