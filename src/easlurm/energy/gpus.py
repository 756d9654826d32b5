"""Which GPUs a job owns: SLURM_STEP_GPUS / CUDA_VISIBLE_DEVICES in index, UUID and MIG forms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from easlurm.errors import ConfigError

#: Values that mean "no GPU at all" (Slurm sets NoDevFiles when a step has none).
_NONE_VALUES = {"", "nodevfiles", "none", "void"}


@dataclass(frozen=True)
class GpuRef:
    """One GPU selector: a physical index, a GPU UUID, or a MIG instance (measured on its parent GPU)."""

    text: str
    index: int | None = None
    uuid: str | None = None
    mig: bool = False


def parse_gpu_ref(text: str) -> GpuRef:
    """'3' -> index; 'GPU-xxxx' -> uuid; 'MIG-xxxx' or 'MIG-GPU-xxxx/1/0' -> MIG (parent GPU-xxxx when given)."""
    t = text.strip()
    if t.isdigit():
        return GpuRef(t, index=int(t))
    if t.startswith("MIG-GPU-"):
        # The pre-R470 form names the parent: MIG-GPU-<uuid>/<gi>/<ci>.
        return GpuRef(t, uuid=t[len("MIG-") :].split("/")[0], mig=True)
    if t.startswith("MIG-"):
        return GpuRef(t, uuid=t, mig=True)
    if t.startswith("GPU-"):
        return GpuRef(t, uuid=t)
    raise ConfigError(f"GPU selector {text!r}: expected an index, a GPU-<uuid> or a MIG-<uuid>")


def job_gpus(
    explicit: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> list[GpuRef] | None:
    """The GPUs to measure; None means every GPU of the node (no restriction set).

    An explicit list wins; then SLURM_STEP_GPUS (physical indices), then CUDA_VISIBLE_DEVICES.
    """
    if explicit is not None:
        return [parse_gpu_ref(x) for x in explicit if x.strip()]
    env = environ if environ is not None else __import__("os").environ
    for var in ("SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(var)
        if value is None:
            continue
        if value.strip().lower() in _NONE_VALUES:
            return []
        return [parse_gpu_ref(x) for x in value.split(",") if x.strip()]
    return None
