"""Choosing how a job shards its state and checkpoints activations where it allows the oracle to choose."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from easlurm.model.oracle import Oracle, Placements, Prediction
from easlurm.model.workload import Sharding, Workload, parse_ckpt

#: what `shard=auto` tries: every ZeRO stage, each without and with full activation checkpointing
AUTO_SHARDING = tuple(Sharding)
AUTO_CKPT = ("", "full")


@dataclass(frozen=True)
class TrainingChoice:
    """Per placement, the sharding and activation checkpointing chosen and the prediction with them."""

    prediction: Prediction
    sharding: tuple[Sharding, ...]
    act_ckpt: tuple[str, ...]


def training_options(shard: str, ckpt: str | bool | None) -> list[tuple[Sharding, str]]:
    """The (sharding, checkpointing) pairs a job allows: `auto` tries every stage (and, unless the job says
    which, both without and with checkpointing); a named stage tries itself."""
    stages = list(AUTO_SHARDING) if shard.strip().lower() == "auto" else [Sharding.parse(shard)]
    if ckpt is None or (isinstance(ckpt, str) and ckpt.strip().lower() == "auto"):
        ckpts = list(AUTO_CKPT) if shard.strip().lower() == "auto" else [""]
    else:
        ckpts = [parse_ckpt(ckpt)]
    return [(s, c) for s in stages for c in ckpts]


def cheapest_training(
    oracle: Oracle,
    workload: Workload | Sequence[Workload],
    placements: Placements,
    options: Sequence[tuple[Sharding, str]],
) -> TrainingChoice:
    """For each placement, the option with the lowest energy per step among those that fit (ties: the
    first, i.e. the least sharding); a placement no option fits stays infeasible under the first option.
    `workload` is one job for every placement, or one per placement (rows, as `Oracle.predict_rows`).

    Sharding costs communication and checkpointing costs compute, so the cheapest feasible option is the
    least of both that fits the GPUs' memory: what a site running FSDP or ZeRO would configure."""
    if isinstance(workload, Workload):
        preds = [oracle.predict(workload.trained_with(s, c), placements) for s, c in options]
    else:
        preds = [
            oracle.predict_rows([w.trained_with(s, c) for w in workload], placements) for s, c in options
        ]
    energy = np.vstack([np.where(np.asarray(p.feasible, bool), p.energy_j, np.inf) for p in preds])
    pick = np.argmin(energy, axis=0)  # argmin keeps the first of equal energies
    rows = np.arange(len(placements))
    fields: dict[str, Any] = {}
    for name in Prediction.__dataclass_fields__:
        cols = [getattr(p, name) for p in preds]
        fields[name] = None if cols[0] is None else np.vstack(cols)[pick, rows]
    chosen = replace(preds[0], **fields)
    return TrainingChoice(chosen, tuple(options[i][0] for i in pick), tuple(options[i][1] for i in pick))
