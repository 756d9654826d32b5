"""Each host's data-loader floor, and the typical host's, which a row that names no host is predicted with.

A real data loader's time per step (`t_input_step_s`) belongs to the machine that runs it (its CPUs, storage,
loader settings), not to the GPU: the public Zeus P100/RTX 6000 machine waits about 64 ms a step, Gavel's
machines about 27 ms. A parameter fitted on one machine's rows gives every other machine that machine's
floor. Here each host named by the rows' `host` column gets its own floor, fitted on its real-input rows with
every other parameter kept, and the global value becomes the geometric mean of the hosts' floors (each host
counts once, whatever its number of rows): the floor of an unknown host (docs/oracle-gpus.md, "Real data
loading")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from easlurm.errors import ModelError
from easlurm.model.fit.calibrate import score, sweep_times
from easlurm.model.fit.dataset import Measurement
from easlurm.model.fit.site import LOADER_PARAM
from easlurm.model.hardware import Catalogue
from easlurm.model.params import HOST_FACTOR_PREFIX, PARAM_SPECS, OracleParams, is_host_factor

#: a row is loader-bound where the host's floor lengthens its predicted step by more than this
BOUND_MARGIN = 1.05
#: the floors searched (s per step): a log grid over the parameter's range above 1 ms, then a finer one
GRID_POINTS = 241
FLOOR_MIN_S = 1e-3


@dataclass(frozen=True)
class HostFloor:
    """One host's fitted floor and what its rows say of it."""

    host: str
    rows: int  # real-input rows that name the host
    bound_rows: int  # of which the fitted floor sets the step (loader-bound)
    floor_s: float  # the host's loader time per step
    mape_before_pct: float  # time MAPE of its rows with the starting parameters
    mape_after_pct: float  # ... with its own floor


@dataclass(frozen=True)
class HostFit:
    """The hosts' floors, the typical one (their geometric mean) and the parameters that carry them."""

    hosts: tuple[HostFloor, ...]
    typical_s: float
    params: OracleParams


def host_rows(rows: Sequence[Measurement]) -> dict[str, list[Measurement]]:
    """Real-input rows by the host they name (rows of no host, or synthetic input, inform no host)."""
    out: dict[str, list[Measurement]] = {}
    for m in rows:
        if m.input == "real" and m.host:
            out.setdefault(m.host, []).append(m)
    return out


def without_hosts(params: OracleParams) -> OracleParams:
    """The parameters with no host factor: every row at the global floor."""
    scalars = {k: v for k, v in params.scalars.items() if not is_host_factor(k)}
    return dataclasses.replace(params, scalars=scalars)


def _mape(t: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.asarray(np.mean(np.abs(t - measured) / measured, axis=-1) * 100.0)


def fit_floor(rows: Sequence[Measurement], base: OracleParams, catalogue: Catalogue) -> tuple[float, float]:
    """(floor, time MAPE) of the floor that predicts `rows` best, every other parameter of `base` kept: a log
    grid over the parameter's range, then a finer grid around its best point (the error is flat below the
    steps the GPU sets and has kinks, so no gradient search)."""
    plain = without_hosts(base)
    measured = np.array([m.step_time_s for m in rows])
    grid = np.geomspace(FLOOR_MIN_S, PARAM_SPECS[LOADER_PARAM][2], GRID_POINTS)
    err = _mape(sweep_times(rows, plain, LOADER_PARAM, grid, catalogue), measured)
    i = int(np.argmin(err))  # the first of equal errors: the smallest floor that explains the rows
    fine = np.geomspace(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], GRID_POINTS)
    fine_err = _mape(sweep_times(rows, plain, LOADER_PARAM, fine, catalogue), measured)
    j = int(np.argmin(fine_err))
    return float(fine[j]), float(fine_err[j])


def bound_rows(rows: Sequence[Measurement], base: OracleParams, floor: float, catalogue: Catalogue) -> int:
    """How many rows the floor sets: their step with it is over `BOUND_MARGIN` times their step without."""
    t = sweep_times(rows, without_hosts(base), LOADER_PARAM, np.array([floor, 0.0]), catalogue)
    return int(np.sum(t[0] > BOUND_MARGIN * t[1]))


def fit_hosts(rows: Sequence[Measurement], base: OracleParams, catalogue: Catalogue) -> HostFit:
    """Fit each named host's floor on its own rows and make the global floor the typical host's.

    Hosts `base` already names and the rows do not keep their floors, and count in the typical one."""
    by_host = host_rows(rows)
    if not by_host:
        raise ModelError("no real-input rows that name a host (the measurement CSV's `host` column)")
    global_s = base[LOADER_PARAM]
    floors = {h: global_s * f for h, f in base.host_factors().items()}
    fitted = []
    for host, hrows in sorted(by_host.items()):
        before = score(base, hrows, catalogue).mape_time
        floor, after = fit_floor(hrows, base, catalogue)
        floors[host] = floor
        fitted.append(
            HostFloor(host, len(hrows), bound_rows(hrows, base, floor, catalogue), floor, before, after)
        )
    typical = math.exp(sum(math.log(f) for f in floors.values()) / len(floors))
    scalars = {k: v for k, v in base.scalars.items() if not is_host_factor(k)}
    scalars.update(
        {f"{HOST_FACTOR_PREFIX}{h}.{LOADER_PARAM}": f / typical for h, f in sorted(floors.items())}
    )
    params = dataclasses.replace(base.replace([LOADER_PARAM], [typical]), scalars=scalars)
    return HostFit(tuple(fitted), typical, params)
