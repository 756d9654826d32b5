"""The power-limit response on measured sweeps: the energy of the limit the oracle would choose vs the best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from easlurm.model.fit.evaluate import MethodReport, RowResult, gpu_type


@dataclass(frozen=True)
class LimitChoice:
    """One job (GPU type, model, batch, precision, GPUs) measured at several power limits.

    Energies are per step (all GPUs), from measured time x measured power. `excess_pct` is how much more
    energy the limit with the lowest predicted energy costs, measured, than the measured best limit;
    `ratio_err_pct` is the mean error of the predicted energy relative to the top limit's (the response
    shape a policy relies on), over the group's other limits."""

    gpu: str
    model: str
    batch: int
    precision: str
    n_gpus: int
    limits_w: tuple[float, ...]
    measured_j: tuple[float, ...]
    predicted_j: tuple[float, ...]
    chosen_w: float
    best_w: float
    excess_pct: float
    ratio_err_pct: float | None


def _key(r: RowResult) -> tuple[str, str, int, str, int]:
    return (gpu_type(r.gpu), r.model, r.batch, r.precision, r.n_gpus)


def limit_choices(report: MethodReport) -> list[LimitChoice]:
    """Every group of rows that differ only in their power limit (two limits or more, with measured power and
    a predicted time and power for each); rows without a limit are not part of a sweep."""
    groups: dict[tuple[str, str, int, str, int], list[RowResult]] = {}
    for r in report.rows:
        if r.power_limit_w is None or r.power_w is None or r.pred_time_s is None or r.pred_power_w is None:
            continue
        groups.setdefault(_key(r), []).append(r)
    out = []
    for key, rows in sorted(groups.items()):
        by_limit = {r.power_limit_w: r for r in rows}  # a repeated limit keeps its last row
        if len(by_limit) < 2:
            continue
        limits = sorted(float(x) for x in by_limit if x is not None)
        sel = [by_limit[x] for x in limits]
        meas = np.array([r.time_s * (r.power_w or math.nan) for r in sel])
        pred = np.array([(r.pred_time_s or math.nan) * (r.pred_power_w or math.nan) for r in sel])
        chosen, best = int(np.argmin(pred)), int(np.argmin(meas))
        top = len(sel) - 1
        ratio = np.abs((pred[:top] / pred[top]) / (meas[:top] / meas[top]) - 1.0) * 100.0
        out.append(
            LimitChoice(
                gpu=key[0],
                model=key[1],
                batch=key[2],
                precision=key[3],
                n_gpus=key[4],
                limits_w=tuple(limits),
                measured_j=tuple(float(x) for x in meas),
                predicted_j=tuple(float(x) for x in pred),
                chosen_w=limits[chosen],
                best_w=limits[best],
                excess_pct=float((meas[chosen] / meas[best] - 1.0) * 100.0),
                ratio_err_pct=float(np.mean(ratio)) if top else None,
            )
        )
    return out


@dataclass(frozen=True)
class LimitSummary:
    """Mean over groups (per GPU type, or all): energy excess of the oracle's choice, groups where it chose
    the measured best, and the energy-ratio error."""

    gpu: str
    groups: int
    mean_excess_pct: float
    max_excess_pct: float
    best_chosen: int
    mean_ratio_err_pct: float | None


def summarise_limits(choices: Sequence[LimitChoice]) -> list[LimitSummary]:
    """One summary per GPU type, then one over all groups ('all'); empty without sweeps."""
    out = []
    for gpu in [*sorted({c.gpu for c in choices}), "all"]:
        mine = [c for c in choices if gpu in ("all", c.gpu)]
        if not mine:
            continue
        ratios = [c.ratio_err_pct for c in mine if c.ratio_err_pct is not None]
        out.append(
            LimitSummary(
                gpu=gpu,
                groups=len(mine),
                mean_excess_pct=float(np.mean([c.excess_pct for c in mine])),
                max_excess_pct=float(np.max([c.excess_pct for c in mine])),
                best_chosen=sum(c.chosen_w == c.best_w for c in mine),
                mean_ratio_err_pct=float(np.mean(ratios)) if ratios else None,
            )
        )
    return out
