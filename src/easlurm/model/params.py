"""The oracle's parameter vector theta_H (thesis 4.3.5-4.3.6): defaults, bounds, targeted scalars, versioned YAML."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from easlurm.config import read_yaml_file
from easlurm.errors import ModelError
from easlurm.files import write_text_atomic
from easlurm.inputs import mapping, number

SCHEMA_VERSION = 1

#: name -> (default, lower bound, upper bound, meaning). Times in s, ratios dimensionless.
PARAM_SPECS: dict[str, tuple[float, float, float, str]] = {
    "beta_gemm": (0.60, 0.05, 1.0, "achievable fraction of the GEMM peak (eq. 4.10)"),
    "beta_conv": (0.60, 0.05, 1.0, "achievable fraction of the convolution peak"),
    "beta_attn": (0.40, 0.05, 1.0, "achievable fraction of the peak in fused attention (SDPA) kernels"),
    "beta_alu": (0.50, 0.01, 1.0, "achievable fraction of the FP32 ALU peak"),
    # depthwise convolutions are a few % of a MobileNet/ShuffleNet's FLOPs and a large share of its GPU time
    "beta_dw": (0.01, 1e-3, 1.0, "achieved fraction of the FP32 CUDA-core peak in depthwise convolutions"),
    "r_gemm_m": (256.0, 1.0, 1e5, "GEMM M saturation reference (eq. 4.11)"),
    "r_gemm_k": (64.0, 1.0, 1e5, "GEMM K saturation reference"),
    "r_gemm_n": (64.0, 1.0, 1e5, "GEMM N saturation reference"),
    "r_conv_c": (64.0, 1.0, 1e5, "convolution depth saturation reference"),
    "r_conv_spatial": (2048.0, 1.0, 1e6, "convolution pixels (x micro-batch) saturation reference"),
    "c_fp32": (1.0, 0.2, 5.0, "GEMM/convolution time factor in FP32 (CUDA cores) relative to the peak"),
    "c_tf32": (
        1.0,
        0.2,
        5.0,
        "GEMM/convolution time factor in TF32 relative to 16-bit tensor-core efficiency",
    ),
    "c_gemm": (1.0, 1e-3, 50.0, "GEMM time calibration factor (eq. 4.9)"),
    "c_conv": (1.0, 1e-3, 50.0, "convolution time calibration factor"),
    "c_alu": (1.0, 1e-3, 50.0, "ALU time calibration factor"),
    "c_mem": (1.4, 0.5, 5.0, "HBM time factor: 1 / achieved fraction of the peak bandwidth (eq. 4.13)"),
    "k_layout": (2.0, 0.0, 10.0, "extra HBM passes of NCHW activations around tensor-core convolutions"),
    "lambda_miss": (1.0, 0.01, 1.0, "incompressible L2 miss rate"),
    "t_kern_s": (3e-6, 1e-7, 3e-5, "GPU time per kernel beyond its work (launch gap, tail)"),
    # half a wave of 128x64 output tiles per unit of reduction depth on one SM at the FP32 rate of a Pascal to
    # Ampere SM (64 FP32 lanes at ~1.5 GHz, ~190 GFLOP/s): 0.5 * 2 * 128 * 64 / 1.9e11 s (docs/oracle-gpus.md)
    "t_conv_wave_s": (
        4.3e-8,
        1e-9,
        1e-6,
        "time per unit of reduction depth of a convolution kernel's last wave of output tiles (FP32 rate)",
    ),
    "r_conv_wave_tiles": (
        80.0,
        1.0,
        1e4,
        "output tiles of a convolution kernel at which its last wave costs half its full time (about an SM count)",
    ),
    "t_host_op_s": (8e-5, 5e-6, 3e-4, "host time per forward operation, its backward and launches included"),
    "t_fixed_s": (2e-3, 0.0, 0.5, "fixed per-step overhead (sync, data loading)"),
    # real data loading (docs/oracle-gpus.md): wall-clock host time of a real loader per step (handing a
    # batch from the workers to the training process) and per sample on its workers. Priors: the ~60 ms floor
    # of small-batch Zeus epochs, ~0.3 ms per CIFAR sample (PIL augmentation on 4 workers), and JPEG decoding
    # that scales with the pixels (~1 ms per 224x224 ImageNet sample); synthetic-input rows never use them
    "t_input_step_s": (0.03, 0.0, 0.5, "host time per step of a real data loader, whatever the batch"),
    "t_input_sample_s": (5e-5, 0.0, 5e-3, "host time per sample of a real data loader beyond its pixels"),
    "t_input_px_s": (2e-9, 0.0, 1e-6, "host time per input pixel of a real data loader (decode, augment)"),
    "t_sync_s": (2e-3, 0.0, 0.1, "multi-GPU synchronisation/straggler overhead per doubling of GPUs"),
    # gradient all-reduce (eq. 4.8, docs/oracle-comm.md): achieved fraction of each link kind's catalogue
    # bandwidth in a ring all-reduce. Priors: 5-7 GB/s measured over PCIe Gen3 x16 (15.75 GB/s) and 0.45 GB/s
    # per ring between nodes on one shared 50 Gb/s Ethernet adapter; NVLink and InfiniBand from nccl-tests-like
    # bus bandwidths of about 70 and 80 % of the link
    "l_hop_s": (2e-5, 1e-7, 1e-3, "ring all-reduce per-hop latency inside a node (eq. 4.8)"),
    "l_hop_net_s": (5e-5, 1e-7, 1e-2, "ring all-reduce per-hop latency when the ring crosses nodes"),
    "bw_eff_nvlink": (0.70, 0.05, 1.0, "achieved fraction of the NVLink bandwidth in a ring all-reduce"),
    "bw_eff_pcie": (0.40, 0.05, 1.0, "achieved fraction of the PCIe bandwidth in a ring all-reduce"),
    "bw_eff_ib": (0.80, 0.01, 1.0, "achieved fraction of a node's InfiniBand bandwidth in a ring all-reduce"),
    "bw_eff_eth": (0.08, 0.01, 1.0, "achieved fraction of a node's Ethernet bandwidth in a ring all-reduce"),
    "ddp_bucket_mb": (25.0, 1.0, 1000.0, "gradient bucket size (MB) of data-parallel training (DDP default)"),
    "bwd_frac": (
        0.67,
        0.0,
        1.0,
        "share of a micro-batch pass in the backward, under which gradient buckets all-reduce",
    ),
    "c_p": (1.0, 0.3, 1.5, "scale of the power shares of the range above the P0 idle power (eq. 4.14)"),
    "u_comp": (0.90, 0.0, 1.5, "dynamic power share while tensor/SM compute is busy"),
    # the dynamic energy of the same FP32 step on a P100 and an RTX 6000 (16 and 12 nm) agrees within a few %
    # (docs/oracle-gpus.md); the prior was set after seeing those two sweeps
    "e_simt_pj": (20.0, 1.0, 100.0, "energy per FLOP of work run on the CUDA cores (pJ; FP32 rate)"),
    "u_mem": (0.65, 0.0, 1.5, "dynamic power share while HBM-bound work runs"),
    "u_comm": (0.25, 0.0, 1.0, "dynamic power share while communicating"),
    "u_idle": (
        0.05,
        0.0,
        1.0,
        "dynamic power share, above the P0 idle power, of a GPU a process holds while it waits on the host",
    ),
    # between f*V^2 with V ~ f (alpha 3) and a voltage already at its floor at low limits (alpha 1); with a
    # fifth of the dynamic range that does not follow the clock (memory, fans, leakage)
    "cap_alpha": (2.0, 1.0, 4.0, "SM dynamic power ~ clock^alpha under a power limit"),
    "p_floor_frac": (
        0.1,
        0.0,
        0.8,
        "share of (TDP - P0 idle) above the P0 idle power that does not follow the SM clock (HBM, leakage)",
    ),
    # a power cap lowers the SM clock only so far; a limit below what that clock costs is not held (the board
    # runs there, above it). Not fitted: the prior is the deepest clock the fitted response reaches in a public
    # sweep, where the board held its limit (RTX 6000, ResNet-50 at batch 256 and 100 W: 0.394), so no public
    # row moves; a board known to go deeper would lower it
    "cap_clock_min": (0.39, 0.05, 1.0, "lowest SM clock fraction a power limit drives the board to"),
    "mem_clock_knee": (0.8, 0.1, 1.0, "SM clock fraction below which memory-bound work slows down"),
    "mem_act_scale": (1.0, 0.1, 5.0, "activation memory held for backward relative to the layer count"),
    # co-location of two jobs on one GPU (model/colocation.py, docs/colocation.md); priors, not yet fitted
    "coloc_switch_frac": (
        0.10,
        0.0,
        1.0,
        "time-slicing: GPU time lost to context switches, as a fraction of each job's kernel time",
    ),
    "coloc_queue": (
        0.30,
        0.0,
        2.0,
        "slowdown per unit of the partner's GPU occupancy (own kernels queue behind or contend with it)",
    ),
    "coloc_mps_interference": (
        0.50,
        0.0,
        3.0,
        "MPS: inflation of each job's compute and HBM demand by concurrent kernels (SM sharing, L2 thrash)",
    ),
}

#: parameters earlier versions had; a parameter file naming them (or their architecture factors) still loads
#: (the value is ignored): u_simt, a share of the TDP range, became e_simt_pj, energy per FLOP; p_floor_limit_frac,
#: a bound on the floor under a cap, became cap_clock_min, the lowest clock a cap reaches
RETIRED_PARAMS = frozenset({"bw_eff_frac", "u_simt", "p_floor_limit_frac"})

#: the communication parameters (fitted on multi-GPU rows only: `easlurm model calibrate --free comm`)
COMM_PARAMS = (
    "t_sync_s",
    "bw_eff_nvlink",
    "bw_eff_pcie",
    "bw_eff_ib",
    "bw_eff_eth",
    "l_hop_s",
    "l_hop_net_s",
)

#: the parameters of the co-location rule (fitted by `model.colocation.fit_colocation`, not by `calibrate`)
COLOC_PARAMS = ("coloc_switch_frac", "coloc_queue", "coloc_mps_interference")

#: operations a targeted scalar may modulate (time multipliers).
SCALAR_OPS = ("gemm", "conv", "alu", "mem")

#: GPU architectures that may carry their own factors (oldest first; the catalogue's `architecture` field).
ARCHITECTURES = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")

#: global parameters an architecture may scale: '<arch>.<param>' multiplies the shared value on that
#: architecture's GPUs (prior 1.0: the shared physics). Efficiencies, launch and host costs, power.
ARCH_PARAMS = (
    "beta_gemm",
    "beta_conv",
    "beta_attn",
    "beta_alu",
    "c_fp32",
    "c_tf32",
    "c_mem",
    "k_layout",
    "t_kern_s",
    "t_host_op_s",
    "t_fixed_s",
    "c_p",
    "u_comp",
    "e_simt_pj",
    "u_mem",
    "u_idle",
    "cap_alpha",
    "p_floor_frac",
    "mem_clock_knee",
)
#: search bounds of a per-architecture factor
ARCH_FACTOR_BOUNDS = (0.2, 5.0)

#: a per-GPU-type factor is keyed 'gpu:<catalogue key>.<param>' (a site's own calibration,
#: docs/oracle-calibrate.md): it multiplies the parameter on that GPU type's rows only
GPU_FACTOR_PREFIX = "gpu:"
#: what a GPU type's factors may scale: the architecture's, the depthwise efficiency, the communication and
#: the data loader's step floor (a host's, which only a site's own loader-bound rows can set)
GPU_PARAMS = (
    *ARCH_PARAMS,
    "beta_dw",
    "t_sync_s",
    "bw_eff_nvlink",
    "bw_eff_pcie",
    "bw_eff_ib",
    "bw_eff_eth",
    "t_input_step_s",
)


#: a host's factor is keyed 'host:<name>.<param>': it multiplies the parameter on the real-input rows whose
#: measurement names that host (the `host` column), whose data loader is the host's and not the GPU's
#: (docs/oracle-gpus.md, "Real data loading"); a row of no named host gets the global value, the typical
#: host's (`easlurm model calibrate --hosts`)
HOST_FACTOR_PREFIX = "host:"
#: what a host's factors may scale: the data loader's time per step
HOST_PARAMS = ("t_input_step_s",)
#: the characters of a host's name (it is a parameter-file key and a CSV cell)
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_host_factor(name: str) -> bool:
    """'host:zeus-nsdi23.t_input_step_s': a multiplier of a global parameter on one host's rows."""
    group, _, param = name.rpartition(".")
    host = group[len(HOST_FACTOR_PREFIX) :]
    return (
        group.startswith(HOST_FACTOR_PREFIX)
        and HOST_NAME.fullmatch(host) is not None
        and param in HOST_PARAMS
    )


def is_arch_factor(name: str) -> bool:
    """'volta.beta_gemm' and the like: a per-architecture multiplier of a global parameter."""
    arch, _, param = name.partition(".")
    return arch in ARCHITECTURES and param in ARCH_PARAMS


def is_gpu_factor(name: str) -> bool:
    """'gpu:h100-sxm.beta_gemm' and the like: a per-GPU-type multiplier of a global parameter."""
    group, _, param = name.rpartition(".")
    return group.startswith(GPU_FACTOR_PREFIX) and len(group) > len(GPU_FACTOR_PREFIX) and param in GPU_PARAMS


def is_factor(name: str) -> bool:
    """A multiplier of a global parameter on some GPUs' rows (per architecture or per GPU type)."""
    return is_arch_factor(name) or is_gpu_factor(name)


@dataclass(frozen=True)
class OracleParams:
    """A full parameter set: global values plus targeted time scalars keyed '<family|precision>.<op>' and
    per-architecture factors keyed '<arch>.<param>' (multipliers of a global parameter on that architecture).

    `architectures` are those the parameters were calibrated on; a GPU of another architecture is predicted
    with the shared physics (its factors stay at 1.0), and predictions say so (`Prediction.shared_physics`).
    """

    values: Mapping[str, float] = field(default_factory=lambda: {k: v[0] for k, v in PARAM_SPECS.items()})
    scalars: Mapping[str, float] = field(default_factory=dict)
    version: str = "builtin"
    meta: Mapping[str, Any] = field(default_factory=dict)
    architectures: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        merged = {k: v[0] for k, v in PARAM_SPECS.items()}
        for key, value in self.values.items():
            if key in RETIRED_PARAMS:
                continue
            if key not in PARAM_SPECS:
                raise ModelError(f"unknown oracle parameter {key!r} (known: {', '.join(PARAM_SPECS)})")
            merged[key] = _finite(value, key)
        object.__setattr__(self, "values", merged)
        scalars = {}
        for key, value in self.scalars.items():
            group, _, op = key.partition(".")
            if group in ARCHITECTURES and op in RETIRED_PARAMS:
                continue
            if key.startswith(HOST_FACTOR_PREFIX):
                if not is_host_factor(key):
                    raise ModelError(
                        f"bad host factor {key!r}: expected 'host:<name>.<{'|'.join(HOST_PARAMS)}>' (a name of "
                        "letters, digits, '.', '_' and '-')"
                    )
            elif key.startswith(GPU_FACTOR_PREFIX):
                if not is_gpu_factor(key):
                    raise ModelError(
                        f"bad GPU-type factor {key!r}: expected 'gpu:<gpu>.<{'|'.join(GPU_PARAMS)}>'"
                    )
            elif group in ARCHITECTURES:
                if op not in ARCH_PARAMS:
                    raise ModelError(
                        f"bad architecture factor {key!r}: expected '{group}.<{'|'.join(ARCH_PARAMS)}>'"
                    )
            elif not group or op not in SCALAR_OPS:
                raise ModelError(
                    f"bad scalar name {key!r}: expected '<family|precision>.<{'|'.join(SCALAR_OPS)}>' "
                    f"or '<architecture>.<parameter>'"
                )
            scalars[key] = _finite(value, key)
        object.__setattr__(self, "scalars", scalars)
        archs = tuple(dict.fromkeys(str(a).strip().lower() for a in self.architectures))
        for arch in archs:
            if arch not in ARCHITECTURES:
                raise ModelError(f"unknown architecture {arch!r} (known: {', '.join(ARCHITECTURES)})")
        object.__setattr__(self, "architectures", archs)

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    @property
    def physics(self) -> dict[str, float]:
        """What the equations read: the global values and the per-architecture factors."""
        return {**self.values, **{k: v for k, v in self.scalars.items() if is_factor(k)}}

    def host_factor(self, host: str, param: str = "t_input_step_s") -> float:
        """A host's factor of `param` (1.0 for a host the parameters do not name, or no host)."""
        return self.scalars.get(f"{HOST_FACTOR_PREFIX}{host}.{param}", 1.0) if host else 1.0

    def host_factors(self) -> dict[str, float]:
        """The hosts' loader factors, by host name."""
        return {
            k[len(HOST_FACTOR_PREFIX) :].rpartition(".")[0]: v
            for k, v in self.scalars.items()
            if is_host_factor(k)
        }

    def arch_factors(self, arch: str) -> dict[str, float]:
        """The factors of one architecture, by parameter (only those that are set)."""
        return {k.partition(".")[2]: v for k, v in self.scalars.items() if k.partition(".")[0] == arch}

    def scalar(self, family: str, precision: str, op: str) -> float:
        """Product of the family's and the precision's scalar for one operation (1.0 when absent)."""
        return self.scalars.get(f"{family}.{op}", 1.0) * self.scalars.get(f"{precision}.{op}", 1.0)

    def names(self) -> list[str]:
        return list(self.values) + sorted(self.scalars)

    def vector(self, names: Sequence[str]) -> list[float]:
        return [self.values[n] if n in self.values else self.scalars.get(n, 1.0) for n in names]

    def replace(self, names: Sequence[str], vector: Sequence[float], **kw: Any) -> OracleParams:
        """A copy with the named global parameters or scalars set."""
        values = dict(self.values)
        scalars = dict(self.scalars)
        for n, v in zip(names, vector, strict=True):
            (values if n in PARAM_SPECS else scalars)[n] = float(v)
        return OracleParams(
            values,
            scalars,
            kw.get("version", self.version),
            kw.get("meta", self.meta),
            kw.get("architectures", self.architectures),
        )


def bounds(name: str) -> tuple[float, float]:
    """Search bounds of a global parameter; per-architecture factors (0.2, 5); targeted scalars (0.05, 20)."""
    if name in PARAM_SPECS:
        return PARAM_SPECS[name][1], PARAM_SPECS[name][2]
    if is_factor(name):
        return ARCH_FACTOR_BOUNDS
    return 0.05, 20.0


def _finite(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ModelError(f"oracle parameter {name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ModelError(f"oracle parameter {name} must be finite, got {value!r}")
    return v


def params_from_doc(doc: Any, source: str) -> OracleParams:
    """Parse a parameter YAML document; the schema version must match."""
    if not isinstance(doc, Mapping):
        raise ModelError(f"{source}: expected a mapping")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(
            f"{source}: schema_version {doc.get('schema_version')!r} unsupported (want {SCHEMA_VERSION})"
        )
    values = mapping(doc.get("params"), source, "section 'params'", ModelError)
    scalars = mapping(doc.get("scalars"), source, "section 'scalars'", ModelError)
    archs = doc.get("architectures") or ()
    if not isinstance(archs, list | tuple):
        raise ModelError(f"{source}: architectures must be a list, got {archs!r}")
    for section, entries in (("params", values), ("scalars", scalars)):
        for name, value in entries.items():
            _in_bounds(value, str(name), f"{source}: {section}.{name}")
    return OracleParams(
        values=values,
        scalars=scalars,
        version=str(doc.get("params_version", "unversioned")),
        meta=mapping(doc.get("calibration"), source, "section 'calibration'", ModelError),
        architectures=tuple(archs),
    )


def _in_bounds(value: Any, name: str, where: str) -> None:
    """A value a parameter file sets is finite and has the sign of the parameter's search range (bounds):
    a negative c_p gives negative power, a zero bandwidth share a step time of inf. Hand-set values outside
    the search range itself are allowed; unknown names are left to OracleParams."""
    if name in RETIRED_PARAMS or name.partition(".")[2] in RETIRED_PARAMS:
        return
    if name not in PARAM_SPECS and "." not in name:
        return
    lo, _ = bounds(name)
    if lo >= 0:
        number(value, where, 0.0, None, error=ModelError, lo_open=lo > 0)


def params_to_doc(params: OracleParams) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "params_version": params.version,
        "calibration": dict(params.meta),
        "architectures": list(params.architectures),
        "params": {k: float(f"{v:.6g}") for k, v in params.values.items()},
        "scalars": {k: float(f"{v:.6g}") for k, v in sorted(params.scalars.items())},
    }


def load_params(path: str | Path | None = None) -> OracleParams:
    """Parameters from a YAML file, or the calibrated defaults shipped with the package."""
    if path is None:
        ref = resources.files("easlurm.model").joinpath("params/default.yaml")
        return params_from_doc(yaml.safe_load(ref.read_text()), "params/default.yaml")
    p = Path(path)
    return params_from_doc(read_yaml_file(p, "oracle parameters"), str(p))


def save_params(params: OracleParams, path: str | Path) -> None:
    """Write a versioned parameter file that `load_params` (and so `Oracle`) reads back (atomically)."""
    write_text_atomic(path, yaml.safe_dump(params_to_doc(params), sort_keys=False), "--out")
