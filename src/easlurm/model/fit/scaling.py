"""Multi-GPU rows as slowdowns over their one-GPU row, for fitting the communication terms alone."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from easlurm.errors import ModelError
from easlurm.model.fit.dataset import Measurement, placements_of
from easlurm.model.hardware import Catalogue
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams

log = logging.getLogger(__name__)


def _base_key(m: Measurement) -> tuple[Any, ...]:
    """What a multi-GPU row and its one-GPU row share: the same work per GPU on the same GPU type."""
    return (
        m.model,
        m.precision,
        m.seq_len,
        m.image_size,
        m.optimizer,
        m.gpu,
        m.power_limit_w,
        m.batch // m.n_gpus,
    )


def scaling_rows(
    rows: Sequence[Measurement], params: OracleParams, catalogue: Catalogue | None = None
) -> list[Measurement]:
    """Each multi-GPU row whose one-GPU row (same model, GPU, precision, per-GPU batch) is measured, its time
    set to the oracle's one-GPU time x the measured slowdown t_n / t_1.

    Fitting only the communication parameters to these rows fits the measured scaling (1 -> n GPU speedup)
    whatever error the oracle makes on one GPU's compute: that error cancels in the ratio. Rows faster than
    n x their one-GPU row (superlinear: a different setup, not communication) are left out, logged."""
    single = {_base_key(m): m for m in rows if m.n_gpus == 1}
    multi = [m for m in rows if m.n_gpus > 1 and _base_key(m) in single]
    superlinear = [m for m in multi if m.step_time_s < single[_base_key(m)].step_time_s]
    if superlinear:
        log.info(
            "%d multi-GPU row(s) scale superlinearly (e.g. %s x%d %s): left out",
            len(superlinear),
            superlinear[0].model,
            superlinear[0].n_gpus,
            superlinear[0].gpu,
        )
        multi = [m for m in multi if m not in superlinear]
    if not multi:
        raise ModelError("no multi-GPU row has a one-GPU row of the same model, GPU and per-GPU batch")
    ones = [single[_base_key(m)] for m in multi]
    oracle = Oracle(params, catalogue)
    t_one = oracle.predict_rows([m.workload() for m in ones], placements_of(ones)).step_time_s
    t_multi = oracle.predict_rows([m.workload() for m in multi], placements_of(multi)).step_time_s
    fits = np.isfinite(t_one) & np.isfinite(t_multi)
    if not fits.all():
        left = [m for m, ok in zip(multi, fits) if not ok]
        log.info(
            "%d multi-GPU row(s) out of memory in the model on one GPU or on theirs (e.g. %s x%d %s): left out",
            len(left),
            left[0].model,
            left[0].n_gpus,
            left[0].gpu,
        )
    if not fits.any():
        raise ModelError("every multi-GPU row with a one-GPU row is out of memory in the model")
    return [
        dataclasses.replace(m, step_time_s=float(t1) * m.step_time_s / one.step_time_s, avg_power_w=None)
        for m, one, t1, ok in zip(multi, ones, t_one, fits)
        if ok
    ]


def speedups(
    rows: Sequence[Measurement], params: OracleParams, catalogue: Catalogue | None = None
) -> list[tuple[Measurement, float, float]]:
    """(multi-GPU row, measured speedup n t_1 / t_n, predicted speedup) for rows with a one-GPU row."""
    single = {_base_key(m): m for m in rows if m.n_gpus == 1}
    multi = [m for m in rows if m.n_gpus > 1 and _base_key(m) in single]
    if not multi:
        return []
    ones = [single[_base_key(m)] for m in multi]
    oracle = Oracle(params, catalogue)
    p1 = oracle.predict_rows([m.workload() for m in ones], placements_of(ones)).step_time_s
    pn = oracle.predict_rows([m.workload() for m in multi], placements_of(multi)).step_time_s
    return [
        (m, m.n_gpus * one.step_time_s / m.step_time_s, m.n_gpus * float(a) / float(b))
        for m, one, a, b in zip(multi, ones, p1, pn)
    ]
