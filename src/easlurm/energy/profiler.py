"""EnergyProfiler: start/stop/read sensors around a run, with regions, marks, run directory and MPI."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from easlurm.energy import rundir
from easlurm.energy.cpu_share import CpuShareWatch
from easlurm.energy.discovery import Discovery, discover, parse_devices
from easlurm.energy.dram import DramModelSensor
from easlurm.energy.gpus import parse_gpu_ref
from easlurm.energy.lead_in import HOLD_MIN_S, cover_lead_in, extend, lead_in_s
from easlurm.energy.result import DeviceEnergy, DeviceKind, ProfileResult, RegionEnergy
from easlurm.energy.sampler import SampleLog, SamplingThread, SensorSampler, sampling_threads
from easlurm.errors import ConfigError, SensorError

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
#: Below this interval a Python sampler cannot keep up and only burns CPU.
MIN_INTERVAL_S = 0.001


class EnergyProfiler:
    """Measure GPU, CPU and DRAM energy between start() and stop(); usable as a context manager.

    Sensor failures never raise: the device is reported with `error` set. With mpi=True, start and stop
    are collective (every rank calls them), one rank per node reads CPU/DRAM, and rank 0 gets
    `cluster` (per-node and total energies).

    `lead_in_from` (unix s): when the measured work began, before start() (a Slurm step whose agent
    starts after it): the result's window and each device's energy then reach back to it, at most
    easlurm.energy.lead_in.LEAD_IN_MAX_S, from the samples a device kept and else extrapolated.
    """

    def __init__(
        self,
        devices: str | Sequence[str] = "gpu,cpu,dram",
        interval_s: float = 0.1,
        out_dir: str | Path | None = None,
        gpus: Sequence[str] | None = None,
        pid: int | None = None,
        powercap_root: str | Path = "/sys/class/powercap",
        nvml_module: str = "pynvml",
        sample_log: bool = True,
        command: Sequence[str] | None = None,
        mpi: bool = False,
        comm: Any = None,
        proc_root: str | Path = "/proc",
        cgroup_root: str | Path = "/sys/fs/cgroup",
        lead_in_from: float | None = None,
    ) -> None:
        self.kinds = parse_devices(devices)
        self.lead_in_from = lead_in_from
        if not interval_s >= MIN_INTERVAL_S:
            raise ConfigError(f"interval {interval_s!r} s: must be >= {MIN_INTERVAL_S} s")
        self.interval_s = float(interval_s)
        self.gpus = list(gpus) if gpus is not None else None
        if self.gpus:
            for ref in self.gpus:
                parse_gpu_ref(ref)  # a bad selector is the caller's error: say so now
        self.pid = pid if pid is not None else os.getpid()
        self.powercap_root = Path(powercap_root)
        self.nvml_module = nvml_module
        self.sample_log = sample_log
        self.command = list(command) if command is not None else None
        # whose share of the node's CPU/DRAM energy this is: `pid`'s job's CPU time among the node's jobs
        self._cpu_watch: CpuShareWatch | None = CpuShareWatch(self.pid, Path(proc_root), Path(cgroup_root))
        self.mpi = None
        if mpi or comm is not None:
            from easlurm.energy.mpi import MpiContext  # here: MPI runs only; spares the SPANK agent's start

            self.mpi = MpiContext(comm)
        self.run_root = Path(out_dir) if out_dir is not None else None
        self.out_dir: Path | None = None
        if self.run_root is not None:
            # Under MPI every rank keeps its own run directory below the shared one.
            sub = self.run_root / f"rank-{self.mpi.rank}" if self.mpi is not None else self.run_root
            self.out_dir = rundir.check_run_dir(sub)
        self.result: ProfileResult | None = None
        self.cluster: Any = None  # ClusterResult on MPI rank 0
        self._discovery: Discovery | None = None
        self._samplers: list[SensorSampler] = []
        self._threads: list[SamplingThread] = []
        self._log: SampleLog | None = None
        self._t0 = 0.0
        self._start_time = 0.0
        self._probes = 0
        self._regions: list[list[Any]] = []  # [record, start probe, end probe]
        self._marks: list[tuple[RegionEnergy, int]] = []
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Discover and open sensors, write run.json, take the first reading of every sensor."""
        if self._discovery is not None:
            raise SensorError("profiler already started")
        pids = [self.pid]
        node_level = True
        if self.mpi is not None:
            pids = self.mpi.node_pids(self.pid)
            node_level = self.mpi.is_node_leader
        self._discovery = discover(
            self.kinds,
            self.interval_s,
            self.gpus,
            pids,
            self.powercap_root,
            self.nvml_module,
            node_level=node_level,
        )
        if self.mpi is not None:
            self.mpi.barrier()
        if not (node_level and ({DeviceKind.CPU, DeviceKind.DRAM} & set(self.kinds))):
            self._cpu_watch = None
        if self._cpu_watch is not None:
            self._cpu_watch.start()
        self._start_time = time.time()
        self._t0 = time.monotonic()
        if self.out_dir is not None:
            self._open_run_dir()
        self._samplers = [SensorSampler(s, self._log) for s in self._discovery.sensors]
        self._threads = sampling_threads(self._samplers, self.interval_s, phase_t0=self._t0)
        for thread in self._threads:
            thread.start()

    def _open_run_dir(self) -> None:
        assert self.out_dir is not None and self._discovery is not None
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            config = {
                "devices": ",".join(k.value for k in self.kinds),
                "interval_s": self.interval_s,
                "gpus": self.gpus,
                "powercap_root": str(self.powercap_root),
                "nvml_module": self.nvml_module,
                "mpi": self.mpi is not None,
            }
            extra = {"mpi_rank": self.mpi.rank} if self.mpi is not None else {}
            doc = rundir.run_document(self.command, config, self._discovery.statuses, self._start_time, extra)
            rundir.write_json(self.out_dir / rundir.RUN_FILE, doc)
            if self.sample_log:
                self._log = SampleLog(self.out_dir / rundir.SAMPLES_FILE, self._t0)
        except OSError as exc:
            log.error("run directory %s: %s; profiling without it", self.out_dir, exc)
            self.out_dir = None

    @property
    def no_sensor(self) -> dict[str, str]:
        """Requested kinds with no sensor on this host, and why (empty before start)."""
        return dict(self._discovery.no_sensor) if self._discovery is not None else {}

    def live_energy(self) -> dict[str, tuple[float, float]]:
        """Each working sensor's latest reading as (monotonic s, J since start), by sensor name ("gpu0"),
        for a live view while the run goes on; read from the integrators, no sensor is asked."""
        return {
            sp.sensor.name: (sp.integrator.t_last, sp.integrator.energy_j)
            for sp in self._samplers
            if sp.error is None and sp.integrator.samples > 0 and sp.integrator.t_last is not None
        }

    def stop(self) -> ProfileResult:
        """Stop sampling and build the result (idempotent). Collective under MPI."""
        if self.result is not None:
            return self.result
        if self._discovery is None:
            raise SensorError("profiler was never started")
        if self.mpi is not None:
            self.mpi.barrier()
        t_stop = time.monotonic()
        for thread in self._threads:
            thread.request_stop()
        for thread in self._threads:
            thread.stop()
        cpu_share = self._cpu_watch.stop() if self._cpu_watch is not None else None
        self._discovery.close()
        if self._log is not None:
            self._log.close()
        self.result = self._build(t_stop - self._t0)
        self.result.cpu_share = cpu_share
        self._cover_lead_in(self.result)
        if self.out_dir is not None:
            try:
                rundir.write_json(self.out_dir / rundir.SUMMARY_FILE, self.result.to_dict())
                (self.out_dir / rundir.SUMMARY_CSV).write_text(self.result.to_csv())
            except OSError as exc:
                log.error("cannot write summary to %s: %s", self.out_dir, exc)
        if self.mpi is not None:
            self.cluster = self.mpi.gather(self.result, self.run_root)
        return self.result

    def discard(self) -> None:
        """Stop and remove what this run wrote (the command never ran: leave nothing half-written)."""
        self.stop()
        if self.out_dir is None:
            return
        for name in (rundir.RUN_FILE, rundir.SUMMARY_FILE, rundir.SUMMARY_CSV, rundir.SAMPLES_FILE):
            (self.out_dir / name).unlink(missing_ok=True)
        with suppress(OSError):
            self.out_dir.rmdir()

    def _build(self, duration_s: float) -> ProfileResult:
        assert self._discovery is not None
        devices = []
        for sp in self._samplers:
            s, integ = sp.sensor, sp.integrator
            ok = integ.samples > 0 and (integ.samples > 1 or sp.error is None)
            act = s.activity()
            devices.append(
                DeviceEnergy(
                    name=s.name,
                    kind=s.kind.value,
                    energy_j=integ.energy_j if ok else None,
                    mean_power_w=integ.mean_power_w if ok else None,
                    peak_power_w=integ.peak_power_w if ok else None,
                    samples=integ.samples,
                    modelled=s.modelled,
                    source=s.source,
                    error=sp.error,
                    in_total=s.in_total,
                    duration_s=integ.duration_s,
                    mean_util_pct=None if act is None else act.mean_util_pct,
                    peak_memory_bytes=None if act is None else act.peak_memory_bytes,
                    memory_total_bytes=None if act is None else act.memory_total_bytes,
                )
            )
        for s, why in self._discovery.failed:
            devices.append(
                DeviceEnergy(
                    s.name,
                    s.kind.value,
                    None,
                    modelled=s.modelled,
                    source=s.source,
                    error=why,
                    in_total=s.in_total,
                )
            )

        def at(sp: SensorSampler, key: int | None) -> float | None:
            return None if key is None else sp.integrator.resolved.get(key)

        regions = []
        for region, k0, k1 in self._regions:
            for sp in self._samplers:
                e0, e1 = at(sp, k0), at(sp, k1)
                region.energy_j[sp.sensor.name] = None if e0 is None or e1 is None else e1 - e0
            regions.append(region)
        marks = []
        for mark, k in self._marks:
            for sp in self._samplers:
                mark.energy_j[sp.sensor.name] = at(sp, k)
            marks.append(mark)
        return ProfileResult(
            host=socket.gethostname(),
            start_time=self._start_time,
            duration_s=duration_s,
            devices=devices,
            regions=regions,
            marks=marks,
            interval_s=self.interval_s,
            sampler_cpu_s=sum(th.cpu_s for th in self._threads),
            no_sensor=sorted(self._discovery.no_sensor),
        )

    def _cover_lead_in(self, result: ProfileResult) -> None:
        """Reach back to `lead_in_from`: each device from its first sample, the window from start()."""
        since = self.lead_in_from
        if since is None or lead_in_s(since, self._start_time) is None:
            return
        for sp, dev in zip(self._samplers, result.devices, strict=False):  # the samplers' devices first
            integ = sp.integrator
            if dev.energy_j is None or integ.t_first is None:
                continue
            until = self._start_time + (integ.t_first - self._t0)
            if lead_in_s(since, until) is None:
                continue
            first_w = integ.first_power_w if integ.first_power_w is not None else integ.mean_power_w
            hold_s = max(HOLD_MIN_S, 2 * sp.sensor.update_period_s)
            lead = cover_lead_in(sp.sensor.history(), since, until, first_w, hold_s)
            if lead is not None:
                extend(dev, lead)
        shift = result.start_time - since
        result.duration_s += shift
        result.start_time = since
        for r in (*result.regions, *result.marks):  # their times count from the result's start
            r.start_s += shift
            r.end_s = None if r.end_s is None else r.end_s + shift

    def track_pid(self, pid: int) -> None:
        """Feed the DRAM model with this process tree instead (e.g. the wrapped command's child)."""
        self.pid = pid
        for sp in self._samplers:
            if isinstance(sp.sensor, DramModelSensor):
                sp.sensor.set_pids([pid])

    # -- regions and marks -----------------------------------------------------------------------
    def _probe(self) -> tuple[int, float]:
        with self._lock:
            self._probes += 1
            key = self._probes
        t = time.monotonic()
        for sp in self._samplers:
            sp.integrator.request(key, t)
        return key, t - self._t0

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        """Energy per device while the block runs; regions may nest and overlap."""
        if self._discovery is None or self.result is not None:
            raise SensorError(f"region {name!r}: profiler is not running")
        k0, t0 = self._probe()
        record = RegionEnergy(name, t0, None)
        entry: list[Any] = [record, k0, None]
        with self._lock:
            self._regions.append(entry)
        try:
            yield
        finally:
            k1, t1 = self._probe()
            record.end_s = t1
            entry[2] = k1
            floor_s = max([self.interval_s] + [sp.sensor.update_period_s for sp in self._samplers])
            if t1 - t0 < floor_s:
                log.warning(
                    "region %r lasted %.3f s, shorter than the sampling interval or a counter's update "
                    "period (%.3f s): its energy is mostly interpolated",
                    name,
                    t1 - t0,
                    floor_s,
                )

    def mark(self, name: str) -> None:
        """Cumulative energy per device at this instant."""
        if self._discovery is None or self.result is not None:
            raise SensorError(f"mark {name!r}: profiler is not running")
        k, t = self._probe()
        with self._lock:
            self._marks.append((RegionEnergy(name, t, t), k))

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> EnergyProfiler:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def profile(func: F | None = None, **options: Any) -> Any:
    """Decorator: `@profile` or `@profile(devices="gpu", interval_s=0.05)`; the last result is kept
    on the wrapper as `.last_result`."""

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prof = EnergyProfiler(**options)
            with prof:
                out = f(*args, **kwargs)
            wrapper.last_result = prof.result  # type: ignore[attr-defined]
            return out

        wrapper.last_result = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate(func) if func is not None else decorate
