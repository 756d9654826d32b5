"""Check and calibrate the oracle's power per workload class against energy measured in the trace.

For every replayed job with an easlurm energy record, the oracle's energy at the recorded placement
(power x recorded runtime, GPUs only) is compared with the measured GPU energy (all devices when
the record has no GPU part). Per model, the median measured/predicted ratio becomes a power scale
that `CalibratedOracle` applies; the error before and after is reported. Runtime needs no scale:
the mapping already derives each job's work from its recorded runtime.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.model.build import default_catalogue
from easlurm.model.hardware import Catalogue


@dataclass(frozen=True)
class ClassCheck:
    """Oracle vs measurement for one model class; errors are mean absolute percentage errors."""

    model: str
    jobs: int
    power_scale: float
    mape_before: float
    mape_after: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Calibrator:
    """Collects (predicted, measured) energy pairs per model; `checks()` gives scales and errors."""

    def __init__(self, min_jobs: int = 1) -> None:
        self.min_jobs = min_jobs
        self._pairs: dict[str, tuple[list[float], list[float]]] = {}

    def add(self, model: str, predicted_j: float, measured_j: float | None) -> None:
        if measured_j is None or not (measured_j > 0 and math.isfinite(predicted_j) and predicted_j > 0):
            return
        pred, meas = self._pairs.setdefault(model, ([], []))
        pred.append(predicted_j)
        meas.append(measured_j)

    def checks(self) -> list[ClassCheck]:
        out = []
        for model in sorted(self._pairs):
            pred = np.asarray(self._pairs[model][0])
            meas = np.asarray(self._pairs[model][1])
            if len(pred) < self.min_jobs:
                continue
            scale = float(np.median(meas / pred))
            before = float(np.mean(np.abs(meas - pred) / meas)) * 100.0
            after = float(np.mean(np.abs(meas - scale * pred) / meas)) * 100.0
            out.append(ClassCheck(model, len(pred), scale, before, after))
        return out

    def scales(self) -> dict[str, float]:
        return {c.model: c.power_scale for c in self.checks()}


class CalibratedOracle:
    """An oracle whose power (hence energy and EDP) is scaled per workload name; time is unchanged.

    Power stays capped at the GPUs' TDP (or the placement's power limit), as the noisy oracle's does.
    Other attributes are the wrapped oracle's.
    """

    def __init__(self, base: Any, power_scale: Mapping[str, float]) -> None:
        self.base = base
        self.power_scale = dict(power_scale)

        cat = getattr(base, "catalogue", None)
        self._catalogue = cat if isinstance(cat, Catalogue) else default_catalogue()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def predict(self, workload: Any, placements: Any) -> Any:
        pred = self.base.predict(workload, placements)
        scale = self.power_scale.get(getattr(workload, "name", ""), 1.0)
        if scale == 1.0:
            return pred
        tdp = np.array([self._catalogue.get(str(g)).tdp_w for g in placements.gpu], dtype=np.float64)
        limit = np.asarray(placements.power_limit_w, dtype=np.float64)
        per_gpu = np.where(np.isnan(limit), tdp, np.minimum(limit, tdp))
        power = np.minimum(np.asarray(pred.power_w) * scale, per_gpu * np.asarray(placements.n_gpus))
        energy = power * np.asarray(pred.step_time_s)
        return dataclasses.replace(pred, power_w=power, energy_j=energy, edp=energy * pred.step_time_s)
