"""Choosing how a job shards its state and checkpoints activations where it lets the oracle choose."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from easlurm.model.oracle import Oracle, Placements, Prediction, cheapest_of
from easlurm.model.workload import Sharding, Workload, options_of, parse_ckpt
from easlurm.model.zoo import get_workload


def declared_workload(
    model: str, precision: str | None = None, shard: str | None = None, ckpt: str | None = None
) -> Workload:
    """The workload a job declares (SPEC model=, precision=, shard=, ckpt=): the zoo model at its precision
    (bf16 where it names none), trained as it says; shard=auto without ckpt= leaves both to the oracle."""
    workload = get_workload(model, precision=precision or "bf16")
    if shard is None and ckpt is None:
        return workload
    sharding = Sharding.parse(shard or "none")
    if ckpt is None:
        ckpt = "auto" if sharding is Sharding.AUTO else ""
    return workload.trained_with(sharding, ckpt)


@dataclass(frozen=True)
class TrainingChoice:
    """Per placement, the sharding and activation checkpointing chosen and the prediction with them."""

    prediction: Prediction
    sharding: tuple[Sharding, ...]
    act_ckpt: tuple[str, ...]


def training_options(shard: str, ckpt: str | bool | None) -> list[tuple[Sharding, str]]:
    """The (sharding, checkpointing) pairs a job allows (`Workload.training_options`): `auto` tries every
    stage and, unless the job says which, both without and with full checkpointing."""
    sharding = Sharding.parse(shard)
    if ckpt is None:
        ckpt = "auto" if sharding is Sharding.AUTO else ""
    return options_of(sharding, parse_ckpt(ckpt))


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
    least of both that fits the GPUs' memory: what a site running FSDP or ZeRO would configure. The oracle
    makes the same choice for a job that says auto (`Oracle.predict`); this one also says which it took."""
    if isinstance(workload, Workload):
        preds = [oracle.predict(workload.trained_with(s, c), placements) for s, c in options]
    else:
        preds = [
            oracle.predict_rows([w.trained_with(s, c) for w in workload], placements) for s, c in options
        ]
    chosen, pick = cheapest_of(preds)
    return TrainingChoice(chosen, tuple(options[i][0] for i in pick), tuple(options[i][1] for i in pick))
