"""Vectorised step-time and power equations (thesis eq. 4.7-4.15) with a GPU power-limit dimension."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from easlurm.model.hardware import GpuSpec
from easlurm.model.params import ARCHITECTURES, GPU_FACTOR_PREFIX, PARAM_SPECS, OracleParams
from easlurm.model.workload import Precision, Workload

#: memory kept free on each GPU (CUDA context, allocator fragmentation), bytes
RESERVED_BYTES = 1.5e9
USABLE_MEMORY_FRACTION = 0.92


#: a precision's code in WorkloadArrays.prec_code and its bit in HardwareArrays.tensor_mask (both FP32 names
#: share code 0: they differ in what their convolutions run at, `Precision.conv`, kept in conv_code)
PRECISION_CODE = {
    Precision.FP32_STRICT: 0,
    Precision.FP32: 0,
    Precision.TF32: 1,
    Precision.BF16: 2,
    Precision.FP16: 3,
}


@dataclass(frozen=True)
class WorkloadArrays:
    """Workload features as arrays (one entry per row, or length-1 to broadcast) with per-row scalars."""

    gemm: np.ndarray
    conv: np.ndarray
    alu: np.ndarray
    act_bytes: np.ndarray
    weight_bytes: np.ndarray
    kernels: np.ndarray
    gemm_m: np.ndarray
    gemm_k: np.ndarray
    gemm_n: np.ndarray
    conv_c: np.ndarray
    conv_spatial: np.ndarray
    act_mem: np.ndarray
    ws: np.ndarray
    ws_fixed: np.ndarray
    static_mem: np.ndarray
    opt_flops: np.ndarray
    opt_bytes: np.ndarray
    grad_bytes: np.ndarray
    prec_code: np.ndarray  # 0 fp32, 1 tf32, 2 bf16, 3 fp16 (as requested; the GPU decides how it runs)
    s_gemm: np.ndarray
    s_conv: np.ndarray
    s_alu: np.ndarray
    s_mem: np.ndarray
    attn: np.ndarray
    conv_io: np.ndarray
    host_ops: np.ndarray
    opt_ops: np.ndarray
    opt_temp: np.ndarray
    #: 1.0 where the samples come from a real data loader, with the pixels of one input image (0: not an image)
    input_real: np.ndarray
    input_px: np.ndarray
    dw: np.ndarray  # depthwise convolution FLOPs per sample (Workload.flops_dw)
    conv_tail: np.ndarray  # summed reduction depth of the convolution kernels (Workload.conv_tail_depth)
    conv_tiles: np.ndarray  # their output tiles per sample, weighted by depth (Workload.conv_tail_tiles)
    conv_code: np.ndarray  # the code convolutions are asked at (TF32 under `fp32`, PyTorch's defaults)
    #: sharding stage (0 DDP .. 3 ZeRO-3/FSDP) and the unsharded state it divides (bytes): FP32 weights with
    #: autocast's copies, FP32 gradients, optimizer state; parameter bytes all-gathered (compute precision)
    shard: np.ndarray
    param_mem: np.ndarray
    grad_mem: np.ndarray
    opt_mem: np.ndarray
    param_comm: np.ndarray
    units: np.ndarray  # blocks a sharded job gathers and reduces one at a time (Workload.blocks, + the rest)
    #: the loader's time per step on this row's host relative to the typical host's (its `host:` factor)
    input_step_scale: np.ndarray

    @staticmethod
    def row(w: Workload, params: OracleParams) -> tuple[float, ...]:
        """One workload's features in field order (memoised by the oracle).

        Activation checkpointing recomputes each block's forward in the backward pass: the forward FLOPs
        once more, and the forward's share of HBM traffic, kernels and host operations; the activations
        kept shrink to the checkpointed blocks' inputs (`Workload.ckpt_act_mem_bytes`)."""
        code = PRECISION_CODE[w.precision.gemm]
        prec = w.precision.key
        ck = 1.0 if w.act_ckpt == "full" else 0.0
        sel = 1.0 if w.act_ckpt == "selective" else 0.0
        redo = 1.0 + (ck * w.flops_forward + sel * w.flops_alu_f) / max(w.flops_total, 1e-30)
        act_mem = w.act_mem_bytes
        if w.act_ckpt and w.ckpt_act_mem_bytes > 0:
            # selective keeps the matmul outputs: counted as half way between keeping all and full checkpointing
            act_mem = w.ckpt_act_mem_bytes if ck else (w.act_mem_bytes + w.ckpt_act_mem_bytes) / 2.0
        return (
            w.flops_gemm + ck * w.flops_gemm_f,
            w.flops_conv + ck * w.flops_conv_f,
            w.flops_alu + (ck + sel) * w.flops_alu_f,
            w.act_bytes * redo,
            w.weight_bytes,
            w.kernels * redo,
            w.gemm_m,
            w.gemm_k,
            w.gemm_n,
            w.conv_c,
            w.conv_spatial,
            act_mem,
            w.working_set_bytes,
            w.working_set_fixed_bytes,
            w.static_mem_bytes,
            w.opt_flops,
            w.opt_bytes,
            w.grad_bytes,
            float(code),
            *(params.scalar(w.family, prec, op) for op in ("gemm", "conv", "alu", "mem")),
            w.flops_attn + ck * w.flops_attn_f,
            w.conv_io_bytes * redo,
            (w.host_ops if w.host_ops > 0 else w.kernels / 3.0) * redo,
            w.opt_ops,
            w.opt_temp_bytes,
            1.0 if w.real_input else 0.0,
            float(w.image_size**2) if w.real_input and w.image_size else 0.0,
            w.flops_dw + ck * w.flops_dw_f,
            w.conv_tail_depth,
            w.conv_tail_tiles,
            float(PRECISION_CODE[w.precision.conv]),
            float(w.sharding.stage),
            w.param_mem_bytes,
            w.grad_mem_bytes,
            w.opt_state_bytes,
            w.param_comm_bytes,
            float(w.blocks + 1),
            params.host_factor(w.input_host) if w.real_input else 1.0,
        )

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[float, ...]]) -> WorkloadArrays:
        table = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(fields(cls)))
        return cls(**{f.name: np.ascontiguousarray(table[:, i]) for i, f in enumerate(fields(cls))})

    @classmethod
    def of(cls, workloads: Sequence[Workload], params: OracleParams) -> WorkloadArrays:
        """Stack workloads (one row each)."""
        return cls.from_rows([cls.row(w, params) for w in workloads])

    def take(self, index: np.ndarray | slice) -> WorkloadArrays:
        """Rows selected by an index array (to align workloads with placements)."""
        return WorkloadArrays(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def reshape(self, *shape: int) -> WorkloadArrays:
        """Reshape every feature, e.g. to (J, 1) so that J workloads broadcast against (1, P) placements."""
        return WorkloadArrays(**{f.name: getattr(self, f.name).reshape(shape) for f in fields(self)})


@dataclass(frozen=True)
class HardwareArrays:
    """GPU specs as per-row arrays, looked up from a small table by GPU index."""

    peak_fp32: np.ndarray  # FLOP/s, CUDA cores
    peak_tf32: np.ndarray
    peak_bf16: np.ndarray
    hbm_bw: np.ndarray
    l2_bytes: np.ndarray
    mem_bytes: np.ndarray
    tdp_w: np.ndarray
    idle_w: np.ndarray
    p0_w: np.ndarray  # P0 idle: clocks up, no kernel running (GpuSpec.p0_w)
    min_limit_w: np.ndarray  # the lowest power limit the board accepts
    link_bw: np.ndarray
    net_bw: np.ndarray
    gpus_per_node: np.ndarray
    #: index into ARCHITECTURES (-1: none given), and a bit mask of the precision codes run on tensor cores
    arch: np.ndarray
    tensor_mask: np.ndarray
    nvlink: np.ndarray  # 1.0 where the GPUs of a node talk over NVLink, 0.0 over PCIe
    infiniband: np.ndarray  # 1.0 where nodes talk over InfiniBand (RDMA), 0.0 over Ethernet
    nics_per_node: np.ndarray
    gpu_key: np.ndarray  # each row's catalogue key (per-GPU-type factors: 'gpu:<key>.<param>')

    @classmethod
    def table(cls, specs: Sequence[GpuSpec]) -> HardwareArrays:
        """One row per GPU type; index it with `take`."""
        return cls(
            peak_fp32=np.array([s.fp32_tflops * 1e12 for s in specs]),
            peak_tf32=np.array([s.tf32_tflops * 1e12 for s in specs]),
            peak_bf16=np.array([s.bf16_tflops * 1e12 for s in specs]),
            hbm_bw=np.array([s.hbm_gbs * 1e9 for s in specs]),
            l2_bytes=np.array([s.l2_mb * 1e6 for s in specs]),
            mem_bytes=np.array([s.memory_gb * 1e9 for s in specs]),
            tdp_w=np.array([s.tdp_w for s in specs], dtype=np.float64),
            idle_w=np.array([s.idle_w for s in specs], dtype=np.float64),
            p0_w=np.array([s.p0_w for s in specs], dtype=np.float64),
            min_limit_w=np.array([s.min_power_limit_w for s in specs], dtype=np.float64),
            link_bw=np.array([s.link_gbs * 1e9 for s in specs]),
            net_bw=np.array([s.net_gbs * 1e9 for s in specs]),
            gpus_per_node=np.array([s.gpus_per_node for s in specs], dtype=np.float64),
            arch=np.array(
                [ARCHITECTURES.index(s.architecture) if s.architecture else -1 for s in specs],
                dtype=np.float64,
            ),
            tensor_mask=np.array(
                [sum(1 << PRECISION_CODE[q] for q in s.tensor_core_precisions) for s in specs], dtype=np.int64
            ),
            nvlink=np.array([s.link_kind == "nvlink" for s in specs], dtype=np.float64),
            infiniband=np.array([s.net_kind == "infiniband" for s in specs], dtype=np.float64),
            nics_per_node=np.array([s.nics_per_node for s in specs], dtype=np.float64),
            gpu_key=np.array([s.key for s in specs], dtype=object),
        )

    def take(self, index: np.ndarray) -> HardwareArrays:
        return HardwareArrays(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def reshape(self, *shape: int) -> HardwareArrays:
        return HardwareArrays(**{f.name: getattr(self, f.name).reshape(shape) for f in fields(self)})


@dataclass(frozen=True)
class StepResult:
    """Per-row outcome; infeasible rows (model does not fit, batch < GPUs) have inf time and NaN power."""

    step_time_s: np.ndarray
    power_w: np.ndarray  # all GPUs of the job together
    feasible: np.ndarray
    grad_accum: np.ndarray
    t_pass_s: np.ndarray
    t_comm_s: np.ndarray  # gradient all-reduce time NOT hidden under the backward pass (exposed)
    clock_scale: np.ndarray
    peak_mem_bytes: np.ndarray  # one GPU's peak allocated memory at the micro-batch used
    #: fractions of the step during which one GPU's tensor/SM compute, HBM, or any kernel (compute, HBM,
    #: per-kernel gaps, optimizer) is busy; 1 - gpu_busy is host/launch/overhead time another process
    #: could fill (docs/colocation.md)
    compute_busy: np.ndarray
    hbm_busy: np.ndarray
    gpu_busy: np.ndarray


def _sat(x: np.ndarray) -> np.ndarray:
    """Sigmoid saturation (eq. 4.12)."""
    return 1.0 / (1.0 + np.exp(-x))


def with_arch_factors(p: Mapping[str, float], hw: HardwareArrays) -> Mapping[str, float]:
    """Global parameters with each row's architecture factors ('<arch>.<param>' keys of p) applied.

    A factor scales the shared value on its architecture's rows only, within the parameter's bounds; the
    result broadcasts like hw (and like p's values, which calibration passes as (S, 1) columns). A GPU type's
    factors ('gpu:<key>.<param>', a site's calibration) scale its own rows the same way."""
    keys = [k for k in p if "." in k]
    if not keys:
        return p
    out: dict[str, float] = {k: v for k, v in p.items() if "." not in k}
    scale: dict[str, np.ndarray] = {}
    for key in keys:
        group, _, name = key.rpartition(".")
        if group.startswith(GPU_FACTOR_PREFIX):
            on = hw.gpu_key == group[len(GPU_FACTOR_PREFIX) :]
        else:
            on = hw.arch == ARCHITECTURES.index(group)
        if np.any(on):
            scale[name] = scale.get(name, 1.0) * np.where(on, p[key], 1.0)
    for name, f in scale.items():
        lo, hi = PARAM_SPECS[name][1], PARAM_SPECS[name][2]
        out[name] = np.clip(out[name] * f, lo, hi)  # type: ignore[assignment]
    return out


def peak_memory(
    w: WorkloadArrays, micro: np.ndarray, p: Mapping[str, float], n: np.ndarray | float = 1.0
) -> np.ndarray:
    """Peak memory of one GPU: FP32 weights, gradients and optimizer state, the optimizer's temporaries, and the
    activations kept for the backward pass of one micro-batch; sharded over `n` GPUs per `static_memory`."""
    return static_memory(w, n) + p["mem_act_scale"] * w.act_mem * micro


def static_memory(w: WorkloadArrays, n: np.ndarray | float) -> np.ndarray:
    """One GPU's batch-independent memory when the job's `n` data-parallel GPUs shard it (ZeRO stages): stage
    1 divides the optimizer state and its temporaries, stage 2 the gradients too, stage 3 the parameters,
    which are then gathered two layers at a time (the layer computed and the one prefetched)."""
    n = np.maximum(np.asarray(n, np.float64), 1.0)
    s = w.shard
    opt = np.where(s >= 1, (w.opt_mem + w.opt_temp) / n, w.opt_mem + w.opt_temp)
    grad = np.where(s >= 2, w.grad_mem / n, w.grad_mem)
    param = np.where(s >= 3, w.param_mem / n + 2.0 * w.ws_fixed, w.param_mem)
    return opt + grad + param


def clock_floor_w(tdp_w: Any, p0_w: Any, p: Mapping[str, float]) -> Any:
    """Power that does not follow the SM clock under a limit (memory, leakage, board): the P0 idle power and
    `p_floor_frac` of the range above it. A board whose floor is high against its minimum limit (the example
    A40: 102.8 of 100 W) cannot hold that limit: the clock stops at `cap_clock_min` (clock_under_limit) and
    the board draws what that clock costs (power_under_limit)."""
    return p0_w + p["p_floor_frac"] * (tdp_w - p0_w)


def clock_under_limit(power_w: Any, limit_w: Any, floor_w: Any, p: Mapping[str, float] | OracleParams) -> Any:
    """SM clock fraction at which a draw of `power_w` at full clock fits under `limit_w`: the part above
    `floor_w` scales as clock^cap_alpha (thesis 6.3.3). 1.0 where the draw is already under the limit; never
    below `cap_clock_min`, the lowest clock a power cap drives the board to."""
    ratio = np.where(power_w > limit_w, (limit_w - floor_w) / np.maximum(power_w - floor_w, 1e-9), 1.0)
    return np.maximum(
        np.clip(ratio, 1e-3, 1.0) ** (1.0 / p["cap_alpha"]), min(float(p["cap_clock_min"]), 1.0)
    )


def power_under_limit(
    power_w: Any, limit_w: Any, floor_w: Any, clock: Any, p: Mapping[str, float] | OracleParams
) -> Any:
    """What a board draws under `limit_w` at `clock` (clock_under_limit): the limit, or, where the limit lies
    below what its lowest clock costs, that draw (the board cannot hold such a limit: it runs at that clock
    above it); never more than the draw at full clock."""
    at_clock = floor_w + (power_w - floor_w) * clock ** p["cap_alpha"]
    return np.minimum(power_w, np.maximum(limit_w, at_clock))


def all_reduce(
    grad_bytes: np.ndarray,
    hw: HardwareArrays,
    n: np.ndarray,
    n_nodes: np.ndarray | None,
    p: Mapping[str, float],
    bucket_bytes: np.ndarray | None = None,
    passes: float = 2.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(all buckets, last bucket) time of a bucketed ring all-reduce of the gradients over n GPUs (eq. 4.8),
    or with `passes` 1 a reduce-scatter or all-gather (one pass around the ring: half the steps and traffic).
    Buckets are DDP's `ddp_bucket_mb` unless `bucket_bytes` says otherwise (FSDP's per-block collectives).

    The ring runs at its slowest link: NVLink or PCIe inside a node, and between nodes the network adapters
    the job's GPUs on a node share (rings across nodes are as many as the adapters in use, at most one per
    GPU there), each kind at its achieved fraction of the catalogue's bandwidth. Each bucket pays the per-hop
    latency of the ring's passes x (n-1) steps; on m nodes only passes x (m-1) of them cross the network (at
    `l_hop_net_s`), the rest stay on the node's links (`l_hop_s`), as NCCL's own ring model counts them
    (src/graph/tuning.cc). Spreading the same GPUs over more nodes never raises the bandwidth nor lowers the
    latency."""
    m = np.ceil(n / hw.gpus_per_node) if n_nodes is None else np.asarray(n_nodes, np.float64)
    bw = hw.link_bw * np.where(hw.nvlink > 0, p["bw_eff_nvlink"], p["bw_eff_pcie"])
    steps = passes * (n - 1.0)
    latency: np.ndarray | float = steps * p["l_hop_s"]
    spread = m > 1.0
    if np.any(spread):  # packed placements (the common case) skip the network terms
        k = np.ceil(n / np.maximum(m, 1.0))  # GPUs on the fullest node
        nic_bw = hw.net_bw * hw.gpus_per_node / hw.nics_per_node
        eff_net = np.where(hw.infiniband > 0, p["bw_eff_ib"], p["bw_eff_eth"])
        bw_out = np.minimum(k, hw.nics_per_node) * nic_bw * eff_net
        bw = np.where(spread, np.minimum(bw, bw_out), bw)
        net_steps = np.where(spread, passes * (m - 1.0), 0.0)
        latency = (steps - net_steps) * p["l_hop_s"] + net_steps * np.maximum(p["l_hop_net_s"], p["l_hop_s"])
    bucket = p["ddp_bucket_mb"] * 1e6 if bucket_bytes is None else np.maximum(bucket_bytes, 1.0)
    buckets = np.maximum(np.ceil(grad_bytes / bucket), 1.0)
    share = steps / n
    t_all = buckets * latency + share * grad_bytes / bw
    t_last = latency + share * np.minimum(grad_bytes, bucket) / bw
    return t_all, t_last


@dataclass(frozen=True)
class _PassTimes:
    """The time terms of a step at full SM clock (s): `_step_at` scales the clock-bound ones to a clock."""

    tc: np.ndarray  # tensor/SM compute of one micro-batch: GEMMs, convolutions, attention
    alu: np.ndarray  # element-wise work on the CUDA cores
    dw: np.ndarray  # depthwise convolutions
    mem: np.ndarray  # HBM traffic
    kern: np.ndarray  # per-kernel gaps
    host: np.ndarray  # the host's dispatch of one micro-batch
    opt: np.ndarray  # the optimizer step
    ar: np.ndarray  # the gradient all-reduce, all buckets
    ar_last: np.ndarray  # ... its last bucket (sharded: the gradients' reduce-scatter, and its last bucket)
    over: np.ndarray  # fixed per-step overhead and synchronisation
    input: np.ndarray  # the host's preparation of each GPU's samples (real data loaders)
    g_acc: np.ndarray  # micro-batches per step (gradient accumulation)
    shard: np.ndarray  # sharding stage (0 DDP .. 3 ZeRO-3/FSDP)
    ag: np.ndarray  # one all-gather of the parameters (sharded stages), all buckets
    ag_last: np.ndarray  # ... its last bucket


def evaluate(
    w: WorkloadArrays,
    hw: HardwareArrays,
    n_gpus: np.ndarray,
    batch: np.ndarray,
    power_limit_w: np.ndarray,
    p: Mapping[str, float],
    n_nodes: np.ndarray | None = None,
) -> StepResult:
    """Step time (eq. 4.7) and mean power (eq. 4.14-4.15) for every row, under each row's power limit.

    A micro-batch pass takes the longer of the GPU's work and the host's dispatch of it: GEMMs, convolutions
    and fused attention at per-class efficiencies of their peak, element-wise work at HBM bandwidth, a
    per-kernel gap; the host spends a fixed time per dispatched operation (small batches are launch-bound).
    Power follows the busy fractions of tensor/SM compute and HBM over the step (EnergAIzer-style); a step
    that demands more than its power limit (the TDP unless one is given) runs at a lower SM clock, draws the
    limit (or, below what the lowest clock a cap reaches costs, that draw) and takes the time that costs. Each row's architecture scales the shared parameters by its factors
    (`with_arch_factors`) and decides which precisions run on tensor cores. All inputs broadcast: workload features of shape (J, 1) against placement/hardware arrays of shape
    (1, P) give (J, P) results, and workload-only terms are computed J times, not J*P times.
    Rows whose workload reads real input (`Workload.real_input`) take at least the host's preparation time of
    each GPU's samples per step; the GPU draws its waiting power meanwhile.
    `n_nodes` is how many nodes the GPUs span (None: the fewest that hold them); only the part of the gradient
    all-reduce that does not fit under the backward pass is added to the step (`all_reduce`).
    """
    p = with_arch_factors(p, hw)
    n = n_gpus.astype(np.float64)
    b = batch.astype(np.float64)
    per_gpu, feasible, g_acc, micro = _micro_batches(w, hw, n, b, p)
    on_tc, code, peak, mixed = _compute_paths(w, hw)
    t = _pass_times(w, hw, n, n_nodes, per_gpu, g_acc, micro, code, peak, mixed, p)
    dyn, simt_j = _energy_terms(w, hw, micro, g_acc, on_tc, code, p)

    ones = np.ones_like(t.tc)
    step, busy_c, busy_m, busy_g, t_comm = _step_at(t, ones, p)
    p_full = _power_at(hw, p, on_tc, dyn, simt_j, step, busy_c, busy_m, t_comm)
    # power limit: the SM clock drops until the step fits under the limit. Only the part of the power above a
    # floor (HBM, leakage) scales, as clock^alpha. Compute time follows the clock; memory time does not until
    # the clock falls below a knee, so memory-bound work keeps its speed at lower limits (thesis 6.3.3).
    limit = np.where(np.isnan(power_limit_w), hw.tdp_w, power_limit_w)
    over = p_full > limit
    floor = clock_floor_w(hw.tdp_w, hw.p0_w, p)
    clock = clock_under_limit(p_full, limit, floor, p)
    if np.any(over):
        step, busy_c, busy_m, busy_g, t_comm = _step_at(t, clock * ones, p)
    power = n * power_under_limit(p_full, limit, floor, clock, p)
    mem = peak_memory(w, micro, p, n)
    power = np.where(feasible, power, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac_c, frac_m, frac_g = (
            np.where(feasible, np.minimum(x / step, 1.0), np.nan) for x in (busy_c, busy_m, busy_g)
        )
    step = np.where(feasible, step, np.inf)
    return StepResult(
        step,
        power,
        feasible,
        g_acc,
        t.tc * g_acc,
        t_comm * ones,
        clock * ones,
        mem * ones,
        frac_c,
        frac_m,
        frac_g,
    )


def _micro_batches(
    w: WorkloadArrays, hw: HardwareArrays, n: np.ndarray, b: np.ndarray, p: Mapping[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(samples per GPU, feasible, micro-batches per step, micro-batch size): the largest micro-batch whose
    activations fit next to the static memory decides the gradient accumulation; a row is infeasible when
    not even one sample fits or the batch has fewer samples than GPUs."""
    per_gpu = np.ceil(b / n)
    act_per_sample = p["mem_act_scale"] * w.act_mem
    free = hw.mem_bytes * USABLE_MEMORY_FRACTION - RESERVED_BYTES - static_memory(w, n)
    mb_max = np.floor(free / act_per_sample)
    feasible = (b >= n) & (mb_max >= 1.0)
    g_acc = np.ceil(per_gpu / np.maximum(mb_max, 1.0))
    micro = per_gpu / g_acc
    return per_gpu, feasible, g_acc, micro


def _compute_paths(
    w: WorkloadArrays, hw: HardwareArrays
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(on tensor cores, precision code run, its peak FLOP/s, 16-bit tensor-core convolutions) of the GEMMs:
    the GPU, not the request, decides how a precision runs. Power takes the tensor-core flag of the class
    that does most of the work (convolutions run TF32 under `fp32` where matmuls stay FP32)."""
    on_tc, code, peak = _path(w.prec_code, hw)
    on_tc_conv, code_conv, _ = _path(w.conv_code, hw)
    # cuDNN runs 16-bit tensor-core convolutions in NHWC: NCHW models pay layout transforms around each
    mixed = on_tc_conv & (code_conv >= 2)
    on_tc = np.where(w.conv > w.gemm + w.attn, on_tc_conv, on_tc)
    return on_tc, code, peak, mixed


def _path(asked_code: np.ndarray, hw: HardwareArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(on tensor cores, code run, peak FLOP/s) of work asked at a precision code on each row's GPU."""
    asked = asked_code.astype(np.intp)
    on_tc = ((hw.tensor_mask >> asked) & 1 == 1) & (asked > 0)
    # without tensor cores for it, TF32 and BF16 run as FP32; FP16 keeps its (packed CUDA-core) peak
    code = np.where(on_tc | (asked == 3), asked, 0)
    peak = np.choose(code, (hw.peak_fp32, hw.peak_tf32, hw.peak_bf16, hw.peak_bf16))
    return on_tc, code, peak


def _pass_times(
    w: WorkloadArrays,
    hw: HardwareArrays,
    n: np.ndarray,
    n_nodes: np.ndarray | None,
    per_gpu: np.ndarray,
    g_acc: np.ndarray,
    micro: np.ndarray,
    code: np.ndarray,
    peak: np.ndarray,
    mixed: np.ndarray,
    p: Mapping[str, float],
) -> _PassTimes:
    """Each time term of a step at full clock: compute per operation class (eq. 4.9-4.12), HBM (eq. 4.13),
    kernel gaps, host dispatch, optimizer, all-reduce, overhead and input preparation."""
    # fused SDPA kernels: FP32 math on the CUDA cores, TF32 or 16-bit on tensor cores like the GEMMs
    peak_attn = peak
    # eq. 4.9-4.12: T_op = F / (P * beta * prod S_sat(D/R)) * C, per operation class
    e_gemm = (
        p["beta_gemm"]
        * _sat(w.gemm_m * micro / p["r_gemm_m"])
        * _sat(w.gemm_k / p["r_gemm_k"])
        * _sat(w.gemm_n / p["r_gemm_n"])
    )
    e_conv = (
        p["beta_conv"] * _sat(w.conv_c / p["r_conv_c"]) * _sat(w.conv_spatial * micro / p["r_conv_spatial"])
    )
    # one efficiency per precision, GEMM and conv; convolutions may run at another precision (`fp32`: TF32)
    c_prec = np.choose(code, (p["c_fp32"], p["c_tf32"], 1.0, 1.0))
    _, code_conv, peak_conv = _path(w.conv_code, hw)
    c_prec_conv = np.choose(code_conv, (p["c_fp32"], p["c_tf32"], 1.0, 1.0))
    t_tc = micro * (
        c_prec * w.gemm / (peak * e_gemm) * (p["c_gemm"] * w.s_gemm)
        + c_prec_conv * w.conv / (peak_conv * e_conv) * (p["c_conv"] * w.s_conv)
        + w.attn / (peak_attn * p["beta_attn"])
    )
    t_alu = micro * w.alu / (hw.peak_fp32 * p["beta_alu"]) * (p["c_alu"] * w.s_alu)
    # depthwise convolutions: CUDA-core kernels with little reuse, added to the rest (they do not overlap it)
    t_dw = micro * w.dw / (hw.peak_fp32 * p["beta_dw"])
    # eq. 4.13: HBM time with the L2 factor; tensor-core convolutions of NCHW tensors add layout transforms
    f_l2 = np.clip((w.ws * micro + w.ws_fixed) / hw.l2_bytes, p["lambda_miss"], 1.0)
    c_mem = p["c_mem"] * w.s_mem
    hbm_bytes = w.act_bytes * micro + w.weight_bytes + np.where(mixed, p["k_layout"], 0.0) * w.conv_io * micro
    t_mem = hbm_bytes / hw.hbm_bw * f_l2 * c_mem
    # each convolution kernel's last wave of output tiles leaves most SMs idle: on average half a wave, whose
    # time grows with the kernel's reduction depth at one SM's rate, whatever the batch; a kernel with fewer
    # tiles than SMs runs smaller ones. Small images have few tiles per kernel, so it weighs on them
    # (docs/oracle-gpus.md, small-image convolutions). Like the gaps between kernels it is GPU time, not busy
    # compute: it draws no compute power and MPS can fill it
    tiles = micro * w.conv_tiles / p["r_conv_wave_tiles"]
    t_wave = w.conv_tail * p["t_conv_wave_s"] * tiles / (1.0 + tiles) * hw.peak_fp32 / peak_conv
    t_kern = w.kernels * p["t_kern_s"] + t_wave
    t_host = w.host_ops * p["t_host_op_s"]
    # a sharded optimizer (ZeRO stage >= 1) updates each GPU's shard of the parameters only
    t_opt = np.where(w.shard >= 1, 1.0 / np.maximum(n, 1.0), 1.0) * np.maximum(
        np.maximum(w.opt_flops / (hw.peak_fp32 * p["beta_alu"]), w.opt_bytes / hw.hbm_bw * c_mem),
        w.opt_ops * p["t_host_op_s"],
    )
    t_ar, t_ar_last = all_reduce(w.grad_bytes, hw, n, n_nodes, p)
    # sharded stages reduce-scatter the gradients and all-gather parameters: one pass around the ring each,
    # (n-1) steps moving (n-1)/n of its bytes (half an all-reduce), one block at a time (as FSDP wraps them)
    t_rs, t_rs_last = all_reduce(w.grad_bytes, hw, n, n_nodes, p, w.grad_bytes / w.units, passes=1.0)
    t_ag, t_ag_last = all_reduce(w.param_comm, hw, n, n_nodes, p, w.param_comm / w.units, passes=1.0)
    sharded = w.shard >= 1
    t_ar, t_ar_last = np.where(sharded, t_rs, t_ar), np.where(sharded, t_rs_last, t_ar_last)
    t_over = p["t_fixed_s"] + p["t_sync_s"] * np.log2(n)
    # a real data loader prepares each GPU's samples on the host while the GPU trains on the previous batch:
    # the step takes at least their preparation time, and the GPU waits (at its active floor) for the rest
    t_input = w.input_real * (
        p["t_input_step_s"] * w.input_step_scale
        + per_gpu * (p["t_input_sample_s"] + p["t_input_px_s"] * w.input_px)
    )
    return _PassTimes(
        t_tc,
        t_alu,
        t_dw,
        t_mem,
        t_kern,
        t_host,
        t_opt,
        t_ar,
        t_ar_last,
        t_over,
        t_input,
        g_acc,
        w.shard,
        t_ag,
        t_ag_last,
    )


def _step_at(
    t: _PassTimes, clock: np.ndarray, p: Mapping[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(step time, compute-busy, memory-busy, kernel-busy, exposed communication time) at an SM clock
    fraction."""
    t_c = t.tc / clock
    t_m = np.maximum(t.mem * np.maximum(1.0, p["mem_clock_knee"] / clock), t.alu / clock) + t.dw / clock
    t_gpu = t_c + t_m + t.kern
    t_micro = np.maximum(t_gpu, t.host)
    t_pass = t_micro * t.g_acc
    # buckets all-reduce while the last micro-batch's backward runs; the last bucket waits for its end
    hidden = p["bwd_frac"] * t_micro
    t_comm = np.maximum(t.ar - t.ar_last - hidden, 0.0) + t.ar_last
    if np.any(t.shard > 0):
        t_comm = t_comm + _sharded_comm(t, t_micro, hidden)
    busy = (t_c * t.g_acc, t_m * t.g_acc + t.opt, t_gpu * t.g_acc + t.opt)
    return np.maximum(t_pass + t.opt + t_comm + t.over, t.input), *busy, t_comm


def _sharded_comm(t: _PassTimes, t_micro: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """Exposed communication a sharded step adds to the gradient term of `_step_at` (s).

    Stage 1 reduce-scatters the gradients once per step, stage 2 after every micro-batch (its gradient
    shard cannot hold a sum); stages 1 and 2 all-gather the updated parameters after the optimizer step,
    exposed. Stage 3 (FSDP) gathers each layer's parameters before its forward, hidden under the forward
    but for the first layer, and again in the backward, where they share the backward with the
    reduce-scatter."""
    s = t.shard
    per_micro = np.maximum(t.g_acc - 1.0, 0.0) * (
        np.maximum(t.ar - t.ar_last - hidden, 0.0) + t.ar_last
    )  # stage >= 2: the micro-batches before the last reduce-scatter too
    fwd = t_micro - hidden
    gather_fwd = np.maximum(t.ag - t.ag_last - fwd, 0.0) + t.ag_last
    # stage 3's backward gathers again: only what the reduce-scatter's overlap leaves of the backward hides it
    gather_bwd = np.maximum(t.ag - np.maximum(hidden - t.ar, 0.0), 0.0)
    return np.where(s >= 2, per_micro, 0.0) + np.where(
        s >= 3, t.g_acc * (gather_fwd + gather_bwd), np.where(s >= 1, t.ag, 0.0)
    )


def _energy_terms(
    w: WorkloadArrays,
    hw: HardwareArrays,
    micro: np.ndarray,
    g_acc: np.ndarray,
    on_tc: np.ndarray,
    code: np.ndarray,
    p: Mapping[str, float],
) -> tuple[np.ndarray, np.ndarray]:
    """(dynamic power range W, CUDA-core energy J per step) of `_power_at`.

    Eq. 4.14-4.15, by busy fractions: the GPU at P0 (clocks up, memory clocked: nvidia-smi's reading of a
    GPU with nothing running), a small active share while a process holds it, tensor-core compute and HBM
    on top. Work on the CUDA cores costs energy per FLOP instead: a board's TDP is not what its CUDA cores
    draw at full rate (a P100's is sized for its FP64 units, a T4's holds far less than its FP32 rate),
    while the energy of the same work is close on GPUs of one process generation (docs/oracle-gpus.md)."""
    dyn = (hw.tdp_w - hw.p0_w) * p["c_p"]
    # FLOPs per sample on the CUDA cores; packed FP16 (Pascal) does two per FP32 operation
    on_gemm, _, _ = _path(w.prec_code, hw)
    on_conv, _, _ = _path(w.conv_code, hw)
    simt_flops = (np.where(on_gemm, 0.0, w.gemm + w.attn) + np.where(on_conv, 0.0, w.conv)) * np.where(
        code == 3, 0.5, 1.0
    )
    simt_j = p["e_simt_pj"] * 1e-12 * micro * g_acc * simt_flops
    return dyn, simt_j


def _power_at(
    hw: HardwareArrays,
    p: Mapping[str, float],
    on_tc: np.ndarray,
    dyn: np.ndarray,
    simt_j: np.ndarray,
    step: np.ndarray,
    busy_c: np.ndarray,
    busy_m: np.ndarray,
    t_comm: np.ndarray,
) -> np.ndarray:
    """One GPU's mean power (W) over a step with these busy times, before any power limit."""
    u_c = np.where(on_tc, p["u_comp"], 0.0)
    dynamic = p["u_idle"] * step + u_c * busy_c + p["u_mem"] * busy_m + p["u_comm"] * t_comm
    return hw.p0_w + (dyn * dynamic + simt_j) / step
