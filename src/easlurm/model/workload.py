"""A training workload characterised per sample (thesis 4.3.4): FLOPs by unit, bytes, kernels, weighted dimensions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from easlurm.errors import ModelError


class Precision(StrEnum):
    """Training precision as PyTorch runs it; the value is the name a user writes (SPEC, `predict`, CSVs).

    - `fp32-strict`: FP32 everywhere, TF32 off (`torch.backends.cudnn.allow_tf32 = False`,
      `torch.set_float32_matmul_precision("highest")`).
    - `fp32`: PyTorch's defaults (torch >= 1.12): cuDNN convolutions in TF32 on GPUs with TF32 tensor cores
      (`cudnn.allow_tf32` defaults to True), matmuls and linear layers in FP32 (the default float32 matmul
      precision is "highest"). On GPUs without TF32 tensor cores it is `fp32-strict`.
    - `tf32`: convolutions and matmuls in TF32 (`set_float32_matmul_precision("high")`, NGC containers).
    - `amp-bf16`, `amp-fp16`: autocast over FP32 master weights and optimizer; GEMMs and convolutions in
      16 bit, while autocast keeps norms, softmax and losses in FP32 (`layers.py` counts their FP32 traffic).

    Old names map here (`PRECISION_ALIASES`): bf16, fp16 and mixed-* are the AMP names they always meant.
    """

    FP32_STRICT = "fp32-strict"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "amp-bf16"
    FP16 = "amp-fp16"

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element as stored in HBM."""
        return 2 if self.mixed else 4

    @property
    def mixed(self) -> bool:
        return self in (Precision.BF16, Precision.FP16)

    @property
    def key(self) -> str:
        """The short name parameter files and calibration scalars use ('<precision>.<op>'): fp32, tf32, bf16
        or fp16. Both FP32 names share 'fp32': their GEMMs run alike, and shipped parameters mean what they
        meant (their FP32 rows ran with TF32 off, or on GPUs without TF32)."""
        return _PARAM_KEYS[self]

    @property
    def gemm(self) -> Precision:
        """What the matmuls (linear layers, unfused attention) of this precision run at."""
        return Precision.FP32_STRICT if self is Precision.FP32 else self

    @property
    def conv(self) -> Precision:
        """What the convolutions of this precision run at (cuDNN takes TF32 under PyTorch's defaults)."""
        return Precision.TF32 if self is Precision.FP32 else self

    @classmethod
    def parse(cls, text: str | Precision) -> Precision:
        if isinstance(text, Precision):
            return text
        key = str(text).strip().lower().replace("_", "-")
        key = PRECISION_ALIASES.get(key, key)
        try:
            return cls(key)
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise ModelError(
                f"unknown precision {text!r} (known: {known}; old names bf16, fp16 are amp-bf16, amp-fp16)"
            ) from None


_PARAM_KEYS = {
    Precision.FP32_STRICT: "fp32",
    Precision.FP32: "fp32",
    Precision.TF32: "tf32",
    Precision.BF16: "bf16",
    Precision.FP16: "fp16",
}

#: names accepted for a precision besides its value: the old short names (same meaning) and common spellings
PRECISION_ALIASES = {
    "bf16": "amp-bf16",
    "fp16": "amp-fp16",
    "mixed-bf16": "amp-bf16",
    "mixed-fp16": "amp-fp16",
    "fp32-highest": "fp32-strict",
}


class Sharding(StrEnum):
    """How data-parallel GPUs hold the model (ZeRO stages; PyTorch FSDP's FULL_SHARD is zero3 and
    SHARD_GRAD_OP zero2): each stage divides one more kind of state by the GPUs of the job."""

    NONE = "none"  # DDP: every GPU holds everything; gradients all-reduced
    ZERO1 = "zero1"  # optimizer state sharded; gradients reduce-scattered, parameters all-gathered
    ZERO2 = "zero2"  # + gradients sharded
    ZERO3 = "zero3"  # + parameters sharded, all-gathered layer by layer in forward and backward
    #: the job lets the oracle choose: the cheapest stage that fits (`Oracle.predict`)
    AUTO = "auto"

    @property
    def stage(self) -> int:
        if self is Sharding.AUTO:
            raise ModelError("sharding 'auto' has no stage: the oracle resolves it per placement")
        return _SHARD_STAGES.index(self)

    @classmethod
    def parse(cls, text: str | Sharding) -> Sharding:
        if isinstance(text, Sharding):
            return text
        key = str(text).strip().lower().replace("_", "-")
        key = SHARDING_ALIASES.get(key, key)
        try:
            return cls(key)
        except ValueError:
            known = ", ".join([*(s.value for s in cls if s is not Sharding.AUTO), "fsdp", "auto"])
            raise ModelError(f"unknown sharding {text!r} (known: {known})") from None


_SHARD_STAGES = (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3)

#: other names of the stages (PyTorch FSDP's sharding strategies, DeepSpeed's stage numbers)
SHARDING_ALIASES = {
    "ddp": "none",
    "no": "none",
    "0": "none",
    "no-shard": "none",
    "1": "zero1",
    "2": "zero2",
    "3": "zero3",
    "fsdp": "zero3",
    "full-shard": "zero3",
    "shard-grad-op": "zero2",
}


#: activation checkpointing names: what each means for the oracle (Workload.act_ckpt); 'auto' lets the
#: oracle choose none or full, the cheaper that fits
CKPT_NAMES = {"": "", "0": "", "no": "", "none": "", "false": "", "1": "full", "full": "full", "true": "full"}
CKPT_NAMES.update(selective="selective", auto="auto")


def parse_ckpt(value: str | bool | None) -> str:
    """'' (none), 'full', 'selective' or 'auto' from a flag or a name (1/0, full, selective, none, auto)."""
    if isinstance(value, bool) or value is None:
        return "full" if value else ""
    name = CKPT_NAMES.get(str(value).strip().lower())
    if name is None:
        raise ModelError(f"unknown activation checkpointing {value!r} (known: 0, 1, full, selective, auto)")
    return name


def options_of(sharding: Sharding, act_ckpt: str) -> list[tuple[Sharding, str]]:
    """(sharding, checkpointing) pairs: every stage where sharding is auto, none and full checkpointing
    where it is auto, else the one given."""
    stages = list(_SHARD_STAGES) if sharding is Sharding.AUTO else [sharding]
    ckpts = ["", "full"] if act_ckpt == "auto" else [act_ckpt]
    return [(s, c) for s in stages for c in ckpts]


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
    #: summed reduction depth of the convolution kernels (forward, weight and input gradients): each kernel's
    #: last wave of output tiles leaves SMs idle for a time that grows with its depth, not with the batch
    conv_tail_depth: float = 0.0
    #: the output tiles of one sample in those kernels, weighted by depth: a kernel with fewer tiles than SMs
    #: runs smaller ones, and its last wave costs less
    conv_tail_tiles: float = 0.0
    #: the samples come from a real data loader (decoding, augmentation on host workers); False: synthetic
    #: tensors already on the GPU, as the benchmarks the oracle is mostly fitted on
    real_input: bool = False
    #: the host whose data loader feeds a real-input job ("": an unknown host): a named host's loader time
    #: is its own (`host:<name>.t_input_step_s` in the parameters), an unknown one the typical host's
    input_host: str = ""
    #: activation bytes per sample kept under per-block activation checkpointing (0: not known, no saving)
    ckpt_act_mem_bytes: float = 0.0
    #: repeated blocks of the model (transformer layers): the units FSDP wraps and gathers one at a time
    blocks: int = 1
    #: how the job is trained (docs/oracle-llm.md): state sharded over its data-parallel GPUs, and
    #: activation checkpointing: "" none, "full" (each block's forward recomputed in the backward pass),
    #: "selective" (matmul outputs kept, the element-wise operations recomputed)
    sharding: Sharding = Sharding.NONE
    act_ckpt: str = ""

    def trained_with(self, sharding: str | Sharding, act_ckpt: str | bool = "") -> Workload:
        """The same model trained with this sharding and activation checkpointing (True: full)."""
        return dataclasses.replace(self, sharding=Sharding.parse(sharding), act_ckpt=parse_ckpt(act_ckpt))

    @property
    def training_options(self) -> list[tuple[Sharding, str]]:
        """The (sharding, checkpointing) pairs this job allows: itself, or every stage and/or none and full
        checkpointing where it says auto (the oracle predicts the cheapest that fits)."""
        return options_of(self.sharding, self.act_ckpt)

    @property
    def chooses_training(self) -> bool:
        """True where the job leaves its sharding or checkpointing to the oracle."""
        return self.sharding is Sharding.AUTO or self.act_ckpt == "auto"

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
        """Memory that does not depend on batch: FP32 weights, gradients and optimizer states (unsharded)."""
        return self.param_mem_bytes + self.grad_mem_bytes + self.opt_state_bytes

    @property
    def param_mem_bytes(self) -> float:
        """FP32 weights, and the low-precision copies autocast caches."""
        return self.n_params * (4.0 + (2.0 if self.precision.mixed else 0.0))

    @property
    def grad_mem_bytes(self) -> float:
        """FP32 gradients."""
        return 4.0 * self.n_params

    @property
    def opt_state_bytes(self) -> float:
        """The optimizer's FP32 state tensors (Adam: two per parameter)."""
        return 4.0 * _OPT_FLOPS_STATES[self.optimizer][1] * self.n_params

    @property
    def param_comm_bytes(self) -> float:
        """Parameter bytes a sharded job all-gathers: in the compute precision (FSDP's mixed-precision
        param_dtype, DeepSpeed's 16-bit copies), FP32 otherwise."""
        return self.n_params * float(self.precision.act_bytes)
