"""A site calibration's leave-one-model-out over many GPU types at once: each GPU type's rows of a file as a site."""

from __future__ import annotations

import multiprocessing
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.model.fit.calibrate import FitReport, score
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements
from easlurm.model.fit.site import SITE_PRIOR_SIGMA_LOG10, HeldOut, site_leave_one_model_out
from easlurm.model.hardware import Catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams


@dataclass(frozen=True)
class SiteLomo:
    """One site (`<file stem>:<GPU type>`): the base parameters' errors on all its rows, and each of its
    models held out and predicted by the site factors fitted on the others."""

    key: str
    before: FitReport
    held: tuple[HeldOut, ...]

    @property
    def n_rows(self) -> int:
        return self.before.n_rows


@dataclass(frozen=True)
class Sites:
    """Rows grouped into sites (GPU types with rows of two models or more, by file), and how many rows the
    base parameters find out of memory (left out, as `easlurm model evaluate` scores them apart)."""

    rows: dict[str, list[Measurement]]
    left_out: int


def sites_of(paths: Sequence[str | Path], base: OracleParams, catalogue: Catalogue) -> Sites:
    """Each file's rows by GPU type, the types with two models or more, in key order."""
    oracle = Oracle(base, catalogue)
    by_gpu: dict[str, list[Measurement]] = defaultdict(list)
    left_out = 0
    for path in paths:
        rows = read_measurements(path)
        fits = oracle.predict_rows([m.workload() for m in rows], placements_of(rows)).feasible
        for m, ok in zip(rows, fits if fits is not None else [True] * len(rows)):
            if ok:
                by_gpu[f"{Path(path).stem}:{catalogue.resolve(m.gpu)}"].append(m)
            left_out += not ok
    sites = {k: rows for k, rows in sorted(by_gpu.items()) if len({m.model for m in rows}) > 1}
    return Sites(sites, left_out)


#: what forked workers read (set before the pool forks, as `evaluate` does for its splits)
_JOB: dict[str, Any] = {}


def _one_site(key: str) -> SiteLomo:
    rows: list[Measurement] = _JOB["sites"][key]
    base, catalogue, kw = _JOB["base"], _JOB["catalogue"], _JOB["kw"]
    held = site_leave_one_model_out(rows, base, catalogue, **kw)
    return SiteLomo(key, score(base, rows, catalogue), tuple(held))


def lomo_sweep(
    sites: Mapping[str, list[Measurement]],
    base: OracleParams,
    catalogue: Catalogue,
    *,
    sigma_log10: float = SITE_PRIOR_SIGMA_LOG10,
    maxiter: int = 60,
    popsize: int = 8,
    seed: int = 0,
    jobs: int = 1,
) -> list[SiteLomo]:
    """Every site's leave-one-model-out at one prior width, in key order. `jobs` > 1 runs that many sites at
    once in forked processes: each fit is seeded alone, so the result does not depend on `jobs`."""
    kw = {"maxiter": maxiter, "popsize": popsize, "seed": seed, "sigma_log10": sigma_log10}
    _JOB.update(sites=sites, base=base, catalogue=catalogue, kw=kw)
    try:
        keys = list(sites)
        if jobs <= 1 or len(keys) <= 1:
            return [_one_site(k) for k in keys]
        with multiprocessing.get_context("fork").Pool(processes=min(jobs, len(keys))) as pool:
            return pool.map(_one_site, keys, chunksize=1)
    finally:
        _JOB.clear()
