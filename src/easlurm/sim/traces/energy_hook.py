"""easlurm's own energy records in AdminComment -> the job's measured energy and workload hints."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from easlurm.accounting.step_record import decode_admin_document
from easlurm.energy.spec import parse_spec
from easlurm.errors import ConfigError, TraceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnergyInfo:
    """What a job's AdminComment records say; None where they do not."""

    energy_j: float | None = None  # all devices (GPU + CPU + DRAM)
    gpu_energy_j: float | None = None
    model: str | None = None  # from the --energy-profile SPEC's model= hint
    steps: int | None = None  # steps= hint


def _job_energy(values: dict[str, float | None]) -> float | None:
    """The batch step spans the whole script, srun steps run inside it: max(batch, sum of the others).

    Summing every step would count the srun steps twice when the batch step is profiled too; the max
    keeps multi-node srun steps (whose nodes the batch step does not cover) when they weigh more.
    """
    batch = values.pop("batch", None)
    known = [v for v in values.values() if v is not None]
    others = sum(known) if known else None
    if batch is None:
        return others
    return batch if others is None else max(batch, others)


def decode_energy(admin_comment: str | None) -> EnergyInfo | None:
    """The job's measured energy from easlurm step records in AdminComment; None when it holds none.

    A damaged record raises TraceError (the reader reports it as a bad field AdminComment).
    """
    if not admin_comment or "easlurm" not in admin_comment.lower():
        return None

    try:
        doc = decode_admin_document(admin_comment)
    except TraceError as exc:
        raise TraceError(f"field AdminComment: {exc}") from None
    records = doc.steps
    if not records and not doc.totals:
        return None
    total = _job_energy({r.step: r.total_energy_j for r in records})
    gpu = _job_energy({r.step: r.gpu_energy_j for r in records})
    if doc.totals:  # steps left out of the record: its last run's carried total covers them all
        total, gpu = doc.totals[-1].total_energy_j, doc.totals[-1].gpu_energy_j
    model = steps = None
    for r in records:
        try:
            spec = parse_spec(r.spec) if r.spec else None
        except ConfigError:
            log.debug("job %s: unparsable energy-profile spec %r", r.job_id, r.spec)
            spec = None
        if spec is not None and spec.model and model is None:
            model, steps = spec.model, spec.steps
    return EnergyInfo(energy_j=total, gpu_energy_j=gpu, model=model, steps=steps)
