"""Two jobs on one GPU: each job's speed and the GPU's power under time-slicing or MPS (docs/colocation.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from easlurm.errors import ConfigError, ModelError
from easlurm.model.equations import (
    RESERVED_BYTES,
    USABLE_MEMORY_FRACTION,
    clock_floor_w,
    clock_under_limit,
    power_under_limit,
)
from easlurm.model.hardware import GpuSpec
from easlurm.model.oracle import Placements
from easlurm.model.params import OracleParams
from easlurm.model.workload import Workload


class Sharing(StrEnum):
    """How a GPU may hold two processes: not at all, CUDA time-slicing (Slurm gres/shard) or MPS."""

    NONE = "none"
    TIME_SLICE = "time-slice"
    MPS = "mps"


def parse_sharing(value: Any, where: str) -> Sharing:
    """A sharing mode from configuration text; anything else is one ConfigError line naming `where`."""
    for mode in Sharing:
        if value == mode.value:
            return mode
    known = ", ".join(m.value for m in Sharing)
    raise ConfigError(f"{where}: sharing must be one of {known}, got {value!r}")


@dataclass(frozen=True)
class Solo:
    """One one-GPU job alone on its GPU, as the oracle predicts it.

    Busy fractions are of the step time; `compute_w`/`hbm_w` are the dynamic power the GPU draws per
    unit of compute-busy/HBM-busy fraction (the oracle's busy-fraction power model, eq. 4.14-4.15)."""

    step_time_s: float
    power_w: float
    compute_busy: float
    hbm_busy: float
    gpu_busy: float
    peak_mem_bytes: float
    compute_w: float
    hbm_w: float


@dataclass(frozen=True)
class GpuFacts:
    """What the rule needs of the GPU: idle and TDP power, the active floor, memory (bytes), and the
    lowest power limit it accepts (0: unknown, only the TDP is checked)."""

    idle_w: float
    tdp_w: float
    active_floor_w: float  # P0 idle + the dynamic share of a GPU that holds work but waits (u_idle)
    clock_floor_w: float  # power that does not follow the SM clock (equations.clock_floor_w)
    memory_bytes: float
    min_limit_w: float = 0.0

    @classmethod
    def of(cls, spec: GpuSpec, params: OracleParams) -> GpuFacts:
        dyn = (spec.tdp_w - spec.p0_w) * params["c_p"]
        return cls(
            idle_w=float(spec.idle_w),
            tdp_w=float(spec.tdp_w),
            active_floor_w=spec.p0_w + dyn * params["u_idle"],
            clock_floor_w=float(clock_floor_w(spec.tdp_w, spec.p0_w, params.values)),
            memory_bytes=spec.memory_gb * 1e9,
            min_limit_w=float(spec.min_power_limit_w),
        )


@dataclass(frozen=True)
class CoRun:
    """Outcome of two jobs sharing one GPU; speeds are fractions of each job's alone rate (1 = unslowed).

    `power_w` is the whole GPU's; `power_share` splits it between the jobs by their kernel-busy share,
    so the two jobs' powers add up to the GPU's exactly (never counted twice)."""

    feasible: bool
    speed: tuple[float, float]
    power_w: float
    power_share: tuple[float, float]
    reason: str = ""

    @property
    def slowdown(self) -> tuple[float, float]:
        """Shared step time / alone step time of each job (inf when infeasible)."""
        a, b = self.speed
        return (1.0 / a if a > 0 else math.inf, 1.0 / b if b > 0 else math.inf)

    @property
    def throughput(self) -> float:
        """System throughput (STP): work done per second relative to one job alone; > 1 is a gain over
        running the two jobs one after the other on this GPU."""
        return self.speed[0] + self.speed[1]

    def job_power_w(self, i: int) -> float:
        return self.power_w * self.power_share[i]


INFEASIBLE = CoRun(False, (0.0, 0.0), math.nan, (0.5, 0.5), "")


def solo_of(pred: Any, i: int, spec: GpuSpec, params: OracleParams) -> Solo:
    """Row `i` of an oracle Prediction (one GPU, no power limit) as a Solo."""
    dyn = (spec.tdp_w - spec.p0_w) * params["c_p"]

    def at(arr: Any) -> float:
        return math.nan if arr is None else float(arr[i])

    power, busy_c, busy_m = at(pred.power_w), at(pred.compute_busy), at(pred.hbm_busy)
    hbm_w = dyn * params["u_mem"]
    # what compute draws is what the solo's power leaves above its floor and HBM: a share of the range on
    # tensor cores, energy per FLOP on the CUDA cores (equations.evaluate)
    active_floor = GpuFacts.of(spec, params).active_floor_w
    compute_w = max(power - active_floor - busy_m * hbm_w, 0.0) / busy_c if busy_c > 0 else 0.0
    return Solo(
        step_time_s=at(pred.step_time_s),
        power_w=power,
        compute_busy=busy_c,
        hbm_busy=busy_m,
        gpu_busy=at(pred.gpu_busy),
        peak_mem_bytes=at(pred.peak_mem_gib) * 2**30,
        compute_w=compute_w,
        hbm_w=hbm_w,
    )


def predict_solo(oracle: Any, workload: Workload, batch: int, gpu_type: str) -> Solo | None:
    """The oracle's Solo of a workload on one GPU of a type at a batch, no power limit (None: does not fit)."""
    pred = oracle.predict(workload, Placements.of([1], [batch], [gpu_type]))
    if pred.feasible is not None and not bool(pred.feasible[0]):
        return None
    spec = oracle.catalogue.get(gpu_type)
    solo = solo_of(pred, 0, spec, oracle.params)
    if not (math.isfinite(solo.step_time_s) and math.isfinite(solo.gpu_busy)):
        return None
    return solo


def waterfill(d0: float, d1: float, capacity: float = 1.0) -> tuple[float, float]:
    """Max-min fair shares of `capacity` for two demands: the smaller demand is met when it is under half."""
    if d0 + d1 <= capacity:
        return d0, d1
    half = capacity / 2.0
    if d0 <= half:
        return d0, capacity - d0
    if d1 <= half:
        return capacity - d1, d1
    return half, half


def memory_fits(a: Solo, b: Solo, gpu: GpuFacts) -> bool:
    """Both jobs' peak memory and two CUDA contexts fit in the usable memory of the GPU."""
    need = a.peak_mem_bytes + b.peak_mem_bytes + 2.0 * RESERVED_BYTES
    return need <= gpu.memory_bytes * USABLE_MEMORY_FRACTION


def corun(
    a: Solo,
    b: Solo,
    gpu: GpuFacts,
    mode: Sharing,
    p: Mapping[str, float] | OracleParams,
    limit_w: float | None = None,
) -> CoRun:
    """The co-location rule (docs/colocation.md).

    Time-slicing: kernels of the two processes never overlap; each job asks for its kernel-busy fraction
    plus a context-switch overhead, the GPU's time is water-filled between the two demands, and a job's
    own host/launch gaps are filled by the other's kernels. MPS: kernels run concurrently; compute and HBM
    are water-filled separately on demands inflated by an interference factor, and the job is limited by
    its scarcer resource. Both: a job slows further by `coloc_queue` x the partner's occupancy. Power: the
    summed busy fractions (each capped at 1) through the oracle's busy-fraction power model. Above the
    GPU's limit (`limit_w`, the TDP when None; one limit for both jobs) the SM clock drops as for a job
    alone (equations.clock_under_limit above `clock_floor_w`), the GPU draws the limit (or, below what its lowest
    clock costs, that draw: equations.power_under_limit), and each job's
    compute time stretches with the clock and its HBM time below the memory knee, as a job's alone."""
    if mode is Sharing.NONE:
        return CoRun(False, (0.0, 0.0), math.nan, (0.5, 0.5), "the GPU is not shared")
    if not memory_fits(a, b, gpu):
        return CoRun(False, (0.0, 0.0), math.nan, (0.5, 0.5), "peak memories exceed the GPU's")
    jobs = (a, b)
    if any(not math.isfinite(j.gpu_busy) or j.gpu_busy <= 0 for j in jobs):
        raise ModelError("co-location: both jobs need a finite, positive kernel-busy fraction")
    q = float(p["coloc_queue"])
    if mode is Sharing.TIME_SLICE:
        demand = tuple(j.gpu_busy * (1.0 + float(p["coloc_switch_frac"])) for j in jobs)
        share = waterfill(demand[0], demand[1])
        base = tuple(min(1.0, share[i] / demand[i]) for i in range(2))
        occupancy = share
    else:
        infl = 1.0 + float(p["coloc_mps_interference"])
        dc = tuple(j.compute_busy * infl for j in jobs)
        dm = tuple(j.hbm_busy * infl for j in jobs)
        sc, sm = waterfill(dc[0], dc[1]), waterfill(dm[0], dm[1])
        base = tuple(min(1.0, _ratio(sc[i], dc[i]), _ratio(sm[i], dm[i])) for i in range(2))
        occupancy = (max(sc[0], sm[0]), max(sc[1], sm[1]))
    speed = [base[i] / (1.0 + q * occupancy[1 - i]) for i in range(2)]
    limit = gpu.tdp_w if limit_w is None else float(limit_w)
    if not (limit <= gpu.tdp_w * (1 + 1e-9) and limit >= gpu.min_limit_w * (1 - 1e-9)) or limit <= 0:
        raise ModelError(
            f"co-location: power limit {limit:g} W outside the GPU's {gpu.min_limit_w:g}-{gpu.tdp_w:g} W"
        )
    power = _power(jobs, speed, gpu)
    if power > limit:
        clock = float(clock_under_limit(power, limit, gpu.clock_floor_w, p))
        speed = [_clocked(speed[i], jobs[i], clock, p) for i in range(2)]
        power = float(power_under_limit(power, limit, gpu.clock_floor_w, clock, p))
    kernel = [speed[i] * jobs[i].gpu_busy for i in range(2)]
    total = kernel[0] + kernel[1]
    split = (kernel[0] / total, kernel[1] / total) if total > 0 else (0.5, 0.5)
    return CoRun(True, (speed[0], speed[1]), power, split)


def _clocked(speed: float, job: Solo, clock: float, p: Mapping[str, float] | OracleParams) -> float:
    """A job's speed once the SM clock drops to `clock`, by the oracle's rule for a job alone
    (equations.evaluate): its compute time follows the clock, its HBM time only below the memory knee;
    host and launch time do not. Times are per alone step at full clock; `speed` is the shared rate."""
    stretch = job.compute_busy * (1.0 / clock - 1.0)
    stretch += job.hbm_busy * (max(1.0, float(p["mem_clock_knee"]) / clock) - 1.0)
    return speed / (1.0 + speed * stretch)


def _ratio(share: float, demand: float) -> float:
    return 1.0 if demand <= 0 else share / demand


def _power(jobs: tuple[Solo, Solo], speed: list[float], gpu: GpuFacts) -> float:
    """Busy-fraction power of the shared GPU: the active floor, then compute and HBM busy (capped at 1)."""
    busy_c = [speed[i] * jobs[i].compute_busy for i in range(2)]
    busy_m = [speed[i] * jobs[i].hbm_busy for i in range(2)]
    scale_c = 1.0 / max(1.0, sum(busy_c))
    scale_m = 1.0 / max(1.0, sum(busy_m))
    dynamic = sum(
        busy_c[i] * jobs[i].compute_w * scale_c + busy_m[i] * jobs[i].hbm_w * scale_m for i in range(2)
    )
    return gpu.active_floor_w + dynamic


__all__ = [
    "INFEASIBLE",
    "CoRun",
    "GpuFacts",
    "Sharing",
    "Solo",
    "corun",
    "memory_fits",
    "parse_sharing",
    "predict_solo",
    "solo_of",
    "waterfill",
]
