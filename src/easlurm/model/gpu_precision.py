"""Which precision a job runs at on a GPU: the one asked where the GPU has it, else what it falls back to."""

from __future__ import annotations

from easlurm.model.hardware import GpuSpec
from easlurm.model.workload import Precision


def default_precision(spec: GpuSpec) -> Precision:
    """The precision a job that names none is predicted at on `spec`: BF16 where tensor cores run it, else
    FP16 where its rate is above FP32 (Volta and Turing tensor cores, the P100's packed FP16), else FP32 (a
    GeForce Pascal runs FP16 no faster)."""
    if Precision.BF16 in spec.tensor_core_precisions:
        return Precision.BF16
    if spec.peak_flops(Precision.FP16) > spec.peak_flops(Precision.FP32):
        return Precision.FP16
    return Precision.FP32


def precision_on(spec: GpuSpec, requested: Precision | None) -> tuple[Precision, str | None]:
    """Which precision runs on `spec` for a request (None: the GPU's default), and why, where that is not
    what was asked: the note a command prints (the oracle predicts what runs)."""
    if requested is None:
        runs = default_precision(spec)
        return runs, None if runs is Precision.BF16 else "no precision given; predicted at the GPU's default"
    runs = spec.runs_as(requested)
    if runs is requested:
        return runs, None
    return runs, f"no tensor cores for {requested.value}; predicted as it runs there"
