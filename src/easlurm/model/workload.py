"""A training workload characterised per sample (thesis 4.3.4): FLOPs by unit, bytes, kernels, weighted dimensions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from easlurm.errors import ModelError


class Precision(StrEnum):
    """Training precision; BF16/FP16 mean mixed precision (FP32 master weights and optimizer)."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element as stored in HBM."""
        return 2 if self in (Precision.BF16, Precision.FP16) else 4

    @property
    def mixed(self) -> bool:
        return self in (Precision.BF16, Precision.FP16)

    @classmethod
    def parse(cls, text: str | Precision) -> Precision:
        if isinstance(text, Precision):
            return text
        key = str(text).strip().lower().replace("amp-", "").replace("mixed-", "")
        try:
            return cls(key)
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise ModelError(f"unknown precision {text!r} (known: {known})") from None


class Optimizer(StrEnum):
    """Optimizer whose per-step work is modelled analytically (eq. 4.4-4.5)."""

    ADAMW = "adamw"
    ADAM = "adam"
    SGD = "sgd"

    @classmethod
    def parse(cls, text: str | Optimizer) -> Optimizer:
        if isinstance(text, Optimizer):
            return text
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            known = ", ".join(o.value for o in cls)
            raise ModelError(f"unknown optimizer {text!r} (known: {known})") from None


#: optimizer -> (FLOPs per parameter, FP32 state tensors per parameter)
_OPT_FLOPS_STATES = {Optimizer.ADAMW: (18.0, 2), Optimizer.ADAM: (16.0, 2), Optimizer.SGD: (4.0, 1)}

#: optimizer -> FP32 passes over the parameters per step in torch's default (foreach) implementation: every
#: _foreach_ operation reads its operands and writes its result in full. AdamW: lerp m (3), mul v (2),
#: addcmul v (3), sqrt (2), div (2), add eps (2), addcdiv p (4), decoupled weight decay on p (2) = 20.
#: SGD with momentum: buf mul+add (3), p add (3) = 6 (plus reading the gradient once more).
_OPT_PASSES = {Optimizer.ADAMW: 20.0, Optimizer.ADAM: 18.0, Optimizer.SGD: 7.0}

#: optimizer -> temporary FP32 parameter-sized tensors alive during the step (foreach Adam's sqrt(v) list)
_OPT_TEMP = {Optimizer.ADAMW: 1.0, Optimizer.ADAM: 1.0, Optimizer.SGD: 0.0}

#: foreach operations per optimizer step (each launches one kernel per chunk of tensors)
_OPT_OPS = {Optimizer.ADAMW: 10.0, Optimizer.ADAM: 9.0, Optimizer.SGD: 3.0}


@dataclass(frozen=True)
class Workload:
    """One model's training work, PER SAMPLE unless a field says otherwise, so a placement's batch scales it.

    FLOPs are split by functional unit and pass (forward `_f`, backward `_b`). Dimensions are FLOP-weighted
    means (eq. 4.6); `gemm_m` and `conv_spatial` are per sample and grow with the micro-batch.
    """

    name: str
    family: str
    precision: Precision
    optimizer: Optimizer
    n_params: int
    flops_gemm_f: float
    flops_gemm_b: float
    flops_conv_f: float
    flops_conv_b: float
    flops_alu_f: float
    flops_alu_b: float
    act_bytes: float  # HBM bytes read + written by activations, forward + backward, per sample
    weight_bytes: float  # HBM bytes of weights/gradients touched per micro-batch pass (batch-independent)
    kernels: float  # kernel launches per micro-batch forward + backward (batch-independent)
    gemm_m: float  # FLOP-weighted GEMM M per sample
    gemm_k: float
    gemm_n: float
    conv_c: float  # FLOP-weighted convolution reduction depth (C_in * k * k / groups)
    conv_spatial: float  # FLOP-weighted output pixels per sample
    elem: float  # elements processed by non-GEMM/conv operations per sample (Sigma_elem)
    act_mem_bytes: float  # activation memory held for the backward pass per sample
    working_set_bytes: float  # largest layer's activation footprint per sample (L2 factor, eq. 4.13)
    working_set_fixed_bytes: float  # largest layer's weights (batch-independent part of the working set)
    seq_len: int | None = None
    image_size: int | None = None
    flops_attn_f: float = 0.0  # fused attention core (SDPA): tensor cores only in 16-bit precision
    flops_attn_b: float = 0.0
    conv_io_bytes: float = (
        0.0  # activations in/out of tensor-core convolutions, fwd + bwd (layout transforms)
    )
    host_ops: float = 0.0  # forward operations the host dispatches per micro-batch (backward follows them)
    #: depthwise (and other thin grouped) convolutions, kept apart from the ALU work: their kernels reach a
    #: small fraction of the CUDA-core peak (`beta_dw`), whatever their FLOP count says
    flops_dw_f: float = 0.0
    flops_dw_b: float = 0.0
    #: the samples come from a real data loader (decoding, augmentation on host workers); False: synthetic
    #: tensors already on the GPU, as the benchmarks the oracle is mostly fitted on
    real_input: bool = False

    @property
    def flops_gemm(self) -> float:
        return self.flops_gemm_f + self.flops_gemm_b

    @property
    def flops_conv(self) -> float:
        return self.flops_conv_f + self.flops_conv_b

    @property
    def flops_attn(self) -> float:
        return self.flops_attn_f + self.flops_attn_b

    @property
    def flops_alu(self) -> float:
        return self.flops_alu_f + self.flops_alu_b

    @property
    def flops_dw(self) -> float:
        return self.flops_dw_f + self.flops_dw_b

    @property
    def flops_forward(self) -> float:
        """Forward FLOPs per sample (2 per multiply-add)."""
        return self.flops_gemm_f + self.flops_conv_f + self.flops_alu_f + self.flops_attn_f + self.flops_dw_f

    @property
    def macs_forward(self) -> float:
        """Forward multiply-accumulates of GEMMs and convolutions per sample (the usual 'GFLOPs' of papers)."""
        return (self.flops_gemm_f + self.flops_conv_f + self.flops_attn_f) / 2.0

    @property
    def flops_total(self) -> float:
        return self.flops_gemm + self.flops_conv + self.flops_alu + self.flops_attn + self.flops_dw

    @property
    def grad_bytes(self) -> float:
        """Gradient volume all-reduced per step (FP32 buckets in DDP, also under autocast)."""
        return 4.0 * self.n_params

    @property
    def opt_flops(self) -> float:
        """Optimizer FLOPs per step (18 per parameter for AdamW, thesis 4.3.4)."""
        return _OPT_FLOPS_STATES[self.optimizer][0] * self.n_params

    @property
    def opt_bytes(self) -> float:
        """Optimizer HBM traffic per step: FP32 passes of torch's foreach implementation (eq. 4.4-4.5 counted
        per operation, since each foreach operation reads and writes whole parameter lists)."""
        return 4.0 * _OPT_PASSES[self.optimizer] * self.n_params

    @property
    def opt_ops(self) -> float:
        """Host operations of one optimizer step (foreach: per parameter list, not per parameter)."""
        return _OPT_OPS[self.optimizer]

    @property
    def opt_temp_bytes(self) -> float:
        """Temporary memory of the optimizer step (FP32 parameter-sized lists)."""
        return 4.0 * _OPT_TEMP[self.optimizer] * self.n_params

    @property
    def static_mem_bytes(self) -> float:
        """Memory that does not depend on batch: FP32 weights, gradients and optimizer states."""
        states = _OPT_FLOPS_STATES[self.optimizer][1]
        extra = 2.0 if self.precision.mixed else 0.0  # low-precision weight copies cached by autocast
        return self.n_params * (8.0 + 4.0 * states + extra)
