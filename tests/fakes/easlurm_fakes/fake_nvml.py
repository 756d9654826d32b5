"""A stand-in for pynvml with its real names, error codes and units, driven by EASLURM_FAKE_NVML_* variables.

Each GPU draws a constant power; its energy counter (mJ) is that power integrated over CLOCK_MONOTONIC
(system-wide: two processes reading one GPU agree, as with a real driver), so a test can compare measured
energy with power x duration. Settings are read at nvmlInit():
  EASLURM_FAKE_NVML_COUNT=8            number of GPUs (default 1)
  EASLURM_FAKE_NVML_POWER_W=250        one power for all, or a comma list per GPU (default 100)
  EASLURM_FAKE_NVML_POWER_BEFORE=400@1764218000.5
                                       every GPU drew 400 W until that unix time (s), its own power after:
                                       counter, power reads and the driver's sample buffer all show it
  EASLURM_FAKE_NVML_NO_ENERGY=0,2|all  GPUs without an energy counter (NOT_SUPPORTED, as before Volta)
  EASLURM_FAKE_NVML_NO_FIELD=1         nvmlDeviceGetFieldValues unsupported (old drivers)
  EASLURM_FAKE_NVML_LOST=1:0.5         GPU 1 raises GPU_IS_LOST once 0.5 s passed since nvmlInit
  EASLURM_FAKE_NVML_UNKNOWN_EVERY=5    every 5th reading raises NVML_ERROR_UNKNOWN (transient)
  EASLURM_FAKE_NVML_INIT_ERROR=12      nvmlInit raises that code (12 = LIBRARY_NOT_FOUND)
  EASLURM_FAKE_NVML_MIG=2              each GPU exposes that many MIG instances
  EASLURM_FAKE_NVML_COST_MS=energy=4,field=0.2,power=0.2,samples=0.2
                                       CPU each call burns in the calling thread (as measured on an H100,
                                       driver 580: the energy counter is the costly call; `samples` is one
                                       pynvml nvmlDeviceGetSamples call, an assumption; also `util`,
                                       `memory`, `procs` (compute processes) and `limit` (power limit),
                                       not measured yet); default none
  EASLURM_FAKE_NVML_SAMPLE_MS=100      the driver's power sample period for nvmlDeviceGetSamples (ms)
  EASLURM_FAKE_NVML_SAMPLE_BUFFER=120  samples the driver keeps per GPU (older ones are overwritten); the
                                       buffer is full at nvmlInit, as on a node that has been up a while
  EASLURM_FAKE_NVML_NO_SAMPLES=0,2|all GPUs whose nvmlDeviceGetSamples raises NOT_SUPPORTED
  EASLURM_FAKE_NVML_HANG_SHUTDOWN=1    nvmlShutdown never returns (a wedged driver; like ctypes, the GIL
                                       is released while it waits)
GPU processes (nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetProcessUtilization) come from a
registry directory that fake workloads (easlurm_fakes.gpu_load) write, shared by every process:
  EASLURM_FAKE_NVML_PROCS_DIR=/path    <pid>.json: {"pid", "gpu" (index), "sm_util" (%), "start_s" and,
                                       once it ended, "end_s" (unix s)}; without it no GPU has processes
  EASLURM_FAKE_NVML_NO_PROC_UTIL=1     nvmlDeviceGetProcessUtilization unsupported (NOT_SUPPORTED)
Utilisation samples are taken every 100 ms of unix time (the same instants for every process).
Device utilisation (nvmlDeviceGetUtilizationRates, %) and memory (nvmlDeviceGetMemoryInfo, bytes):
  EASLURM_FAKE_NVML_UTIL=80            one utilisation for all GPUs, or a comma list per GPU; without it,
                                       the summed sm_util of the GPU's running registry processes (max 100)
  EASLURM_FAKE_NVML_NO_UTIL=0,2|all    GPUs whose utilisation raises NOT_SUPPORTED (as some GPUs and
                                       every MIG-mode GPU do)
  EASLURM_FAKE_NVML_MEMORY_GB=80       total memory (decimal GB, default 80)
  EASLURM_FAKE_NVML_MEMORY_USED_MB=512 memory in use, one for all or a comma list per GPU; without it,
                                       512 MiB per running registry process (as usedGpuMemory says)
  EASLURM_FAKE_NVML_NO_MEMINFO=0,2|all GPUs whose memory information raises NOT_SUPPORTED
Power limits (mW in the API, as NVML), which outlive the process like a driver's setting when
EASLURM_FAKE_NVML_LIMITS_FILE names a JSON file ({index: mW}); in memory otherwise:
  EASLURM_FAKE_NVML_LIMIT_RANGE_W=100:700  min:max limit (default 100:700; the default limit is the max)
  EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION=1  setting a limit raises NO_PERMISSION (not root)
  EASLURM_FAKE_NVML_LIMIT_UNSUPPORTED=0,2|all  GPUs without power management (NOT_SUPPORTED)
Every limit set is also logged (what a test reads to see a cap held, and who restored it): one JSON line
{"t": unix time, "pid", "index", "from_mw", "to_mw"} per call, appended to `<limits file>.log` beside the
limits file, or to the in-memory `limit_log()` without one.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import string
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_NOT_READY = 27
NVML_ERROR_UNKNOWN = 999

NVML_FI_DEV_POWER_INSTANT = 186
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_TOTAL_POWER_SAMPLES = 0
NVML_GPU_UTILIZATION_SAMPLES = 1


class c_nvmlValue_t(ctypes.Union):
    """As pynvml: the value union of a sample (power samples use uiVal, mW)."""

    _fields_ = [
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    ]


class c_nvmlSample_t(ctypes.Structure):
    """As pynvml: one driver sample, timeStamp in CPU wall-clock microseconds."""

    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("sampleValue", c_nvmlValue_t)]


class NVMLError(Exception):
    """As pynvml: NVMLError(code) returns the subclass for that code; str() is NVML's message."""

    _valClassMapping: dict[int, type] = {}  # noqa: RUF012 - mirrors pynvml
    _errcode_to_string = {  # noqa: RUF012
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_NO_DATA: "No data",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _make_error_classes() -> None:
    this = sys.modules[__name__]
    for name in [n for n in dir(this) if n.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        code = getattr(this, name)

        def new(cls: type, *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)  # type: ignore[arg-type]

        cls = type(cls_name, (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        setattr(this, cls_name, cls)
        NVMLError._valClassMapping[code] = cls


_make_error_classes()


def _ints(text: str) -> set[int]:
    return {int(x) for x in text.split(",") if x.strip()}


def _indices(text: str, count: int) -> set[int]:
    """GPU indices of a `0,2|all` setting."""
    return {i for i in range(count) if text == "all" or i in _ints(text.replace("all", ""))}


@dataclass
class _Gpu:
    index: int
    power_w: float
    energy: bool = True
    lost_after_s: float | None = None
    reads: int = 0
    migs: list[str] = field(default_factory=list)
    #: (W, unix s, monotonic s): the power drawn until that instant (EASLURM_FAKE_NVML_POWER_BEFORE)
    before: tuple[float, float, float] | None = None

    def power_at(self, unix_s: float) -> float:
        """W drawn at a unix instant."""
        return self.before[0] if self.before is not None and unix_s < self.before[1] else self.power_w

    def energy_mj(self, mono_s: float) -> float:
        """mJ drawn from monotonic 0 to `mono_s` (the counter, less its offset)."""
        mj = self.power_w * mono_s * 1000.0
        if self.before is not None:
            mj += (self.before[0] - self.power_w) * min(mono_s, self.before[2]) * 1000.0
        return mj

    @property
    def uuid(self) -> str:
        return f"GPU-fa4e0000-0000-0000-0000-{self.index:012d}"


@dataclass
class _Mig:
    uuid: str
    parent: _Gpu


class _State:
    def __init__(self, env: dict[str, str]) -> None:
        count = int(env.get("EASLURM_FAKE_NVML_COUNT", "1"))
        powers = [float(x) for x in env.get("EASLURM_FAKE_NVML_POWER_W", "100").split(",")]
        no_energy = env.get("EASLURM_FAKE_NVML_NO_ENERGY", "")
        lost = dict(x.split(":") for x in env.get("EASLURM_FAKE_NVML_LOST", "").split(",") if x)
        self.no_field = env.get("EASLURM_FAKE_NVML_NO_FIELD", "") not in ("", "0")
        self.unknown_every = int(env.get("EASLURM_FAKE_NVML_UNKNOWN_EVERY", "0"))
        nmig = int(env.get("EASLURM_FAKE_NVML_MIG", "0"))
        self.cost_s = {
            k: float(v) / 1000.0
            for k, _, v in (
                x.partition("=") for x in env.get("EASLURM_FAKE_NVML_COST_MS", "").split(",") if x
            )
        }
        self.gpus = []
        for i in range(count):
            gpu = _Gpu(
                i,
                powers[i] if i < len(powers) else powers[-1],
                energy=not (no_energy == "all" or i in _ints(no_energy.replace("all", ""))),
                lost_after_s=float(lost[str(i)]) if str(i) in lost else None,
            )
            gpu.migs = [f"MIG-fa4e{i:04d}-0000-0000-0000-{j:012d}" for j in range(nmig)]
            self.gpus.append(gpu)
        self.migs = {u: _Mig(u, g) for g in self.gpus for u in g.migs}
        before = env.get("EASLURM_FAKE_NVML_POWER_BEFORE", "")
        if before:
            w, _, until = before.partition("@")
            mono_until = float(until) - (time.time() - time.monotonic())
            for gpu in self.gpus:
                gpu.before = (float(w), float(until), mono_until)
        self.t0 = time.monotonic()
        self.sample_period_us = round(float(env.get("EASLURM_FAKE_NVML_SAMPLE_MS", "100")) * 1000)
        self.sample_buffer = int(env.get("EASLURM_FAKE_NVML_SAMPLE_BUFFER", "120"))
        no_samples = env.get("EASLURM_FAKE_NVML_NO_SAMPLES", "")
        self.no_samples = {
            i for i in range(count) if no_samples == "all" or i in _ints(no_samples.replace("all", ""))
        }
        # The driver's sample grid (wall-clock us): a whole buffer already taken before nvmlInit, on
        # instants every process sees alike (the driver samples for the system, not for its callers).
        period = self.sample_period_us
        self.sample_origin_us = int(time.time() * 1e6) // period * period - self.sample_buffer * period
        self.offset_mj = 123_456_789  # energy since "driver load"
        self.procs_dir = env.get("EASLURM_FAKE_NVML_PROCS_DIR") or None
        self.no_proc_util = env.get("EASLURM_FAKE_NVML_NO_PROC_UTIL", "") not in ("", "0")
        lo, hi = env.get("EASLURM_FAKE_NVML_LIMIT_RANGE_W", "100:700").split(":")
        self.limit_range_mw = (round(float(lo) * 1000), round(float(hi) * 1000))
        self.limits_file = env.get("EASLURM_FAKE_NVML_LIMITS_FILE") or None
        self.limits_mw: dict[int, int] = {}
        self.limit_sets: list[dict[str, Any]] = []
        self.limit_no_permission = env.get("EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION", "") not in ("", "0")
        no_limit = env.get("EASLURM_FAKE_NVML_LIMIT_UNSUPPORTED", "")
        self.no_limit = {
            i for i in range(count) if no_limit == "all" or i in _ints(no_limit.replace("all", ""))
        }
        self.util = [float(x) for x in env.get("EASLURM_FAKE_NVML_UTIL", "").split(",") if x.strip()]
        self.no_util = _indices(env.get("EASLURM_FAKE_NVML_NO_UTIL", ""), count)
        self.memory_total_b = round(float(env.get("EASLURM_FAKE_NVML_MEMORY_GB", "80")) * 1e9)
        used = env.get("EASLURM_FAKE_NVML_MEMORY_USED_MB", "")
        self.memory_used_b = [round(float(x) * 2**20) for x in used.split(",") if x.strip()]
        self.no_meminfo = _indices(env.get("EASLURM_FAKE_NVML_NO_MEMINFO", ""), count)

    def limits(self) -> dict[int, int]:
        if self.limits_file is None:
            return self.limits_mw
        try:
            with open(self.limits_file) as f:
                return {int(k): int(v) for k, v in json.load(f).items()}
        except FileNotFoundError:
            return {}

    def store_limits(self, limits: dict[int, int]) -> None:
        if self.limits_file is None:
            self.limits_mw = limits
            return
        tmp = f"{self.limits_file}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({str(k): v for k, v in limits.items()}, f)
        os.replace(tmp, self.limits_file)

    def log_limit(self, entry: dict[str, Any]) -> None:
        if self.limits_file is None:
            self.limit_sets.append(entry)
            return
        with open(f"{self.limits_file}.log", "a") as f:
            f.write(json.dumps(entry) + "\n")


_state: _State | None = None
_lock = threading.Lock()
_init_count = 0


def nvmlInit() -> None:
    global _state, _init_count
    code = os.environ.get("EASLURM_FAKE_NVML_INIT_ERROR")
    if code:
        raise NVMLError(int(code))
    with _lock:
        if _state is None:
            _state = _State(dict(os.environ))
        _init_count += 1


def nvmlInitWithFlags(flags: int) -> None:
    nvmlInit()


def nvmlShutdown() -> None:
    global _state, _init_count
    if os.environ.get("EASLURM_FAKE_NVML_HANG_SHUTDOWN", "") not in ("", "0"):
        threading.Event().wait()
    with _lock:
        if _state is None:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _init_count -= 1
        if _init_count <= 0:
            _state, _init_count = None, 0


def _st() -> _State:
    if _state is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _state


def nvmlSystemGetDriverVersion() -> str:
    _st()
    return "550.00-fake"


def nvmlDeviceGetCount() -> int:
    return len(_st().gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> _Gpu:
    gpus = _st().gpus
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpus[index]


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Gpu | _Mig:
    u = uuid.decode() if isinstance(uuid, bytes) else uuid
    st = _st()
    for g in st.gpus:
        if g.uuid == u:
            return g
    if u in st.migs:
        return st.migs[u]
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetUUID(handle: _Gpu | _Mig) -> str:
    return handle.uuid


def nvmlDeviceGetIndex(handle: _Gpu) -> int:
    return handle.index


def nvmlDeviceGetName(handle: _Gpu) -> str:
    return "NVIDIA Fake H100"


def nvmlDeviceIsMigDeviceHandle(handle: Any) -> int:
    return int(isinstance(handle, _Mig))


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: Any) -> _Gpu:
    if not isinstance(handle, _Mig):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return handle.parent


def _check(handle: Any) -> tuple[_State, _Gpu, float]:
    st = _st()
    if not isinstance(handle, _Gpu):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # per-MIG energy/power is not reported by NVML
    elapsed = time.monotonic() - st.t0
    if handle.lost_after_s is not None and elapsed >= handle.lost_after_s:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    handle.reads += 1
    if st.unknown_every and handle.reads % st.unknown_every == 0:
        raise NVMLError(NVML_ERROR_UNKNOWN)
    return st, handle, elapsed


def _burn(call: str) -> None:
    """Spend the configured CPU time of one `call` (energy, field, power) in this thread."""
    cost = _st().cost_s.get(call, 0.0)
    t0 = time.thread_time()
    while time.thread_time() - t0 < cost:
        pass


def nvmlDeviceGetTotalEnergyConsumption(handle: _Gpu) -> int:
    """mJ since driver load (an unsigned long long in the real API)."""
    _burn("energy")
    st, gpu, _ = _check(handle)
    if not gpu.energy:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(st.offset_mj + gpu.energy_mj(time.monotonic()))


def nvmlDeviceGetPowerUsage(handle: _Gpu) -> int:
    """mW."""
    _burn("power")
    return _power_mw(handle)


def _power_mw(handle: _Gpu) -> int:
    _, gpu, _ = _check(handle)
    return round(gpu.power_at(time.time()) * 1000.0)


class _Value:
    def __init__(self, ui: int) -> None:
        self.uiVal = ui
        self.ullVal = ui
        self.dVal = float(ui)


class _FieldValue:
    def __init__(self, field_id: int, ret: int, ui: int) -> None:
        self.fieldId = field_id
        self.scopeId = 0
        self.timestamp = int(time.time() * 1e6)
        self.latencyUsec = 0
        self.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
        self.nvmlReturn = ret
        self.value = _Value(ui)


def nvmlDeviceGetFieldValues(handle: _Gpu, fieldIds: list[int]) -> list[_FieldValue]:
    st = _st()
    if st.no_field:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    _burn("field")
    out = []
    for fid in fieldIds:
        if fid == NVML_FI_DEV_POWER_INSTANT:
            out.append(_FieldValue(fid, NVML_SUCCESS, _power_mw(handle)))
        else:
            out.append(_FieldValue(fid, NVML_ERROR_NOT_SUPPORTED, 0))
    return out


def nvmlDeviceGetSamples(
    device: _Gpu, sampling_type: int, timeStamp: int
) -> tuple[int, list[c_nvmlSample_t]]:
    """As pynvml: (sample value type, samples newer than timeStamp (us), oldest first) from the driver's
    bounded buffer; timeStamp=0 returns the whole buffer; NOT_FOUND when no sample is newer."""
    _burn("samples")
    st, gpu, _ = _check(device)
    if sampling_type != NVML_TOTAL_POWER_SAMPLES or gpu.index in st.no_samples:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    period = st.sample_period_us
    newest = (int(time.time() * 1e6) - st.sample_origin_us) // period  # index of the newest sample
    first = max(newest - st.sample_buffer + 1, 0, (timeStamp - st.sample_origin_us) // period + 1)
    if first > newest:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    samples = (c_nvmlSample_t * (newest - first + 1))()
    for i, k in enumerate(range(first, newest + 1)):
        samples[i].timeStamp = st.sample_origin_us + k * period
        samples[i].sampleValue.uiVal = round(gpu.power_at(samples[i].timeStamp * 1e-6) * 1000.0)
    return NVML_VALUE_TYPE_UNSIGNED_INT, samples[0 : len(samples)]


def _limit_gpu(handle: Any) -> tuple[_State, _Gpu]:
    st = _st()
    if isinstance(handle, _Mig):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if handle.index in st.no_limit:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return st, handle


def nvmlDeviceGetPowerManagementLimitConstraints(handle: _Gpu) -> list[int]:
    """[min, max] in mW."""
    st, _ = _limit_gpu(handle)
    return list(st.limit_range_mw)


def nvmlDeviceGetPowerManagementDefaultLimit(handle: _Gpu) -> int:
    st, _ = _limit_gpu(handle)
    return st.limit_range_mw[1]


def nvmlDeviceGetPowerManagementLimit(handle: _Gpu) -> int:
    _burn("limit")
    st, gpu = _limit_gpu(handle)
    with _lock:
        return st.limits().get(gpu.index, st.limit_range_mw[1])


def nvmlDeviceSetPowerManagementLimit(handle: _Gpu, limit: int) -> None:
    """As NVML: root only, mW within the constraints, else INVALID_ARGUMENT."""
    st, gpu = _limit_gpu(handle)
    if st.limit_no_permission:
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    lo, hi = st.limit_range_mw
    if not isinstance(limit, int) or not lo <= limit <= hi:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    with _lock, _file_lock(st.limits_file):
        limits = st.limits()
        previous = limits.get(gpu.index, hi)
        limits[gpu.index] = limit
        st.store_limits(limits)
        st.log_limit(
            {"t": time.time(), "pid": os.getpid(), "index": gpu.index, "from_mw": previous, "to_mw": limit}
        )


def limit_log() -> list[dict[str, Any]]:
    """Every limit set since start: the log file's lines with a limits file, else this process's."""
    st = _st()
    if st.limits_file is None:
        return list(st.limit_sets)
    try:
        with open(f"{st.limits_file}.log") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def _file_lock(path: str | None) -> Iterator[None]:
    """Agents of several (virtual) nodes share one limits file: read-modify-write under flock."""
    if path is None:
        yield
        return
    with open(f"{path}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# -------------------------------------------------------------------------------- utilisation, memory


class c_nvmlUtilization_t(ctypes.Structure):
    """As pynvml: percent of the last sample period (1/6 s to 1 s) the GPU (kernels) and its memory
    (reads and writes) were busy."""

    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_nvmlMemory_t(ctypes.Structure):
    """As pynvml: device memory in bytes."""

    _fields_ = [("total", ctypes.c_ulong), ("free", ctypes.c_ulong), ("used", ctypes.c_ulong)]


def _activity_gpu(handle: Any, unsupported: set[int]) -> tuple[_State, _Gpu]:
    """The GPU behind a utilisation or memory call: MIG instances and listed GPUs are NOT_SUPPORTED, a
    lost GPU is lost (reads are not counted: UNKNOWN_EVERY paces the energy and power reads only)."""
    st = _st()
    if not isinstance(handle, _Gpu) or handle.index in unsupported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if handle.lost_after_s is not None and time.monotonic() - st.t0 >= handle.lost_after_s:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return st, handle


def _per_gpu(values: list[Any], index: int) -> Any:
    return values[index] if index < len(values) else values[-1]


def nvmlDeviceGetUtilizationRates(handle: _Gpu) -> c_nvmlUtilization_t:
    _burn("util")
    st, gpu = _activity_gpu(handle, _st().no_util)
    if st.util:
        pct = _per_gpu(st.util, gpu.index)
    else:
        pct = sum(p.sm_util for p in _procs(gpu) if _running(p))
    pct = max(0, min(100, round(pct)))
    return c_nvmlUtilization_t(pct, pct // 2)


def nvmlDeviceGetMemoryInfo(handle: _Gpu, version: int | None = None) -> c_nvmlMemory_t:
    _burn("memory")
    if version:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)  # the v2 struct is not faked: callers use v1
    st, gpu = _activity_gpu(handle, _st().no_meminfo)
    if st.memory_used_b:
        used = _per_gpu(st.memory_used_b, gpu.index)
    else:
        used = 512 * 1024 * 1024 * sum(1 for p in _procs(gpu) if _running(p))
    used = min(used, st.memory_total_b)
    return c_nvmlMemory_t(st.memory_total_b, st.memory_total_b - used, used)


# ---------------------------------------------------------------------------------------- processes
#: NVML samples process utilisation at the driver's own cadence; the fake every 100 ms of unix time.
SAMPLE_PERIOD_US = 100_000
NVML_VALUE_NOT_AVAILABLE_uint = 0xFFFFFFFF


class c_nvmlProcessUtilizationSample_t(ctypes.Structure):
    """As pynvml's: nvmlDeviceGetProcessUtilization returns a slice of an array of these."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    ]


class nvmlFriendlyObject:
    """As pynvml's: what nvmlDeviceGetComputeRunningProcesses returns per process."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@dataclass(frozen=True)
class _Proc:
    pid: int
    gpu: int
    sm_util: int
    start_s: float
    end_s: float | None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _procs(gpu: _Gpu) -> list[_Proc]:
    st = _st()
    if st.procs_dir is None:
        return []
    out = []
    try:
        names = os.listdir(st.procs_dir)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(st.procs_dir, name)) as f:
                d = json.load(f)
            proc = _Proc(int(d["pid"]), int(d["gpu"]), int(d["sm_util"]), float(d["start_s"]), d.get("end_s"))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours
        if proc.gpu == gpu.index:
            out.append(proc)
    return out


def _running(proc: _Proc) -> bool:
    return proc.end_s is None and _alive(proc.pid)


def nvmlDeviceGetComputeRunningProcesses(handle: _Gpu) -> list[nvmlFriendlyObject]:
    """Processes with a CUDA context on the GPU now ([] when none, as NVML)."""
    _burn("procs")
    _, gpu, _ = _check(handle)
    return [
        nvmlFriendlyObject(
            pid=p.pid,
            usedGpuMemory=512 * 1024 * 1024,
            gpuInstanceId=NVML_VALUE_NOT_AVAILABLE_uint,
            computeInstanceId=NVML_VALUE_NOT_AVAILABLE_uint,
        )
        for p in _procs(gpu)
        if _running(p)
    ]


nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses


def nvmlDeviceGetProcessUtilization(handle: _Gpu, timeStamp: int) -> list[c_nvmlProcessUtilizationSample_t]:
    """Samples newer than `timeStamp` (unix us) of every process on the GPU; NOT_FOUND when none."""
    st, gpu, _ = _check(handle)
    if st.no_proc_util:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    now_us = int(time.time() * 1e6)
    out = []
    for p in _procs(gpu):
        if p.end_s is None and not _alive(p.pid):
            continue  # died without saying when: its samples are gone with its context
        lo = max(int(timeStamp), int(p.start_s * 1e6))
        hi = min(now_us, int(p.end_s * 1e6)) if p.end_s is not None else now_us
        t = (lo // SAMPLE_PERIOD_US + 1) * SAMPLE_PERIOD_US
        while t <= hi:
            out.append(c_nvmlProcessUtilizationSample_t(p.pid, t, p.sm_util, p.sm_util // 2, 0, 0))
            t += SAMPLE_PERIOD_US
    if not out:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    out.sort(key=lambda x: (x.timeStamp, x.pid))
    return out
