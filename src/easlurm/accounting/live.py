"""The node agent's live watch of its step's GPUs: idle episodes (with the site's action) and the step's
metrics file, every `metrics.interval_s` while the step runs (docs/metrics.md)."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.accounting.metrics import GpuMetrics, metrics_file, remove_step, render_step, write_step
from easlurm.config import Config
from easlurm.energy.gpu_watch import GpuReader, GpuReading, IdleRule, IdleTracker
from easlurm.errors import EaslurmError

log = logging.getLogger(__name__)

#: How long the step's end waits for a read in progress (a wedged driver must not hold up the record).
STOP_WAIT_S = 2.0


@dataclass(frozen=True)
class WatchSettings:
    """The site's settings for the watch (idle.* and metrics.*), checked by easlurm.config."""

    rule: IdleRule
    interval_s: float = 10.0
    metrics_dir: Path | None = None
    action: list[str] | None = None
    action_timeout_s: float = 60.0

    @classmethod
    def from_config(cls, cfg: Config) -> WatchSettings:
        action = cfg.get("idle.action")
        directory = cfg.get("metrics.dir")
        return cls(
            rule=IdleRule(float(cfg.get("idle.gpu_util_pct")), float(cfg.get("idle.after_s"))),
            interval_s=float(cfg.get("metrics.interval_s")),
            metrics_dir=Path(directory) if directory else None,
            action=None
            if action is None
            else shlex.split(action)
            if isinstance(action, str)
            else list(action),
            action_timeout_s=float(cfg.get("idle.action_timeout_s")),
        )


@dataclass(frozen=True)
class WatchedStep:
    """Which step the watch is for (from Slurm, never from the user's text)."""

    job_id: int
    step_key: str
    node_id: int
    node_name: str
    gpus: list[int]


class LiveWatch:
    """A named daemon thread that reads the step's GPUs every interval: feeds each GPU's IdleTracker with
    its reading and its energy so far (`energy_of()`: {"gpu0": (monotonic s, J since the step began)} of
    the latest reading, the profiler's integrators), runs the site's action when an episode starts, and rewrites the step's metrics file.
    Never raises into the agent: a failure is logged and the step's record goes on."""

    def __init__(
        self,
        step: WatchedStep,
        settings: WatchSettings,
        energy_of: Callable[[], dict[str, tuple[float, float]]],
        reader: Any,
    ) -> None:
        self.step = step
        self.settings = settings
        self.energy_of = energy_of
        self.reader = reader
        self.trackers = {i: IdleTracker(f"gpu{i}", settings.rule) for i in step.gpus}
        self.file = (
            metrics_file(settings.metrics_dir, step.job_id, step.step_key, step.node_id)
            if settings.metrics_dir is not None
            else None
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[int, tuple[float, float]] = {}  # gpu: the previous (monotonic s, J) reading
        self._power: dict[int, float] = {}  # gpu: W between its last two energy readings
        self._lock = threading.Lock()
        self.actions: list[threading.Thread] = []

    @classmethod
    def for_step(
        cls,
        step: WatchedStep,
        settings: WatchSettings,
        energy_of: Callable[[], dict[str, tuple[float, float]]],
        nvml: str,
    ) -> LiveWatch | None:
        """A started watch over NVML, None (logged) when NVML cannot be opened for these GPUs."""
        reader = GpuReader(step.gpus, nvml)
        try:
            reader.open()
        except EaslurmError as exc:
            log.warning("job %d: GPUs not watched for idling or metrics (%s)", step.job_id, exc)
            return None
        watch = cls(step, settings, energy_of, reader)
        if settings.metrics_dir is not None:
            try:
                settings.metrics_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            except OSError as exc:  # idle episodes still go into the record
                log.warning("metrics.dir %s: %s; no metrics file for this step", settings.metrics_dir, exc)
                watch.file = None
        watch.start()
        return watch

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="easlurm-gpu-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.settings.interval_s)

    def tick(self, now: float | None = None, mono: float | None = None) -> None:
        """One read of every GPU (the times are injectable for tests)."""
        now = time.time() if now is None else now
        mono = time.monotonic() if mono is None else mono
        try:
            with self._lock:  # the step's end waits for a write in progress, then removes the file
                readings = self.reader.read(mono)
                if self._stop.is_set():
                    return  # the step ended while this read hung: its episodes are closed, its file gone
                energy = self.energy_of()
                rows = [self._observe(r, now, energy.get(f"gpu{r.index}")) for r in readings]
                if self.file is not None:
                    st = self.step
                    text = render_step(
                        st.job_id, st.step_key, st.node_name, rows, os.getpid(), self.settings.interval_s
                    )
                    write_step(self.file, text)
        except Exception as exc:  # the watch must never cost the step its record
            log.warning("job %d: GPU watch read failed: %s", self.step.job_id, exc)

    def _observe(self, r: GpuReading, now: float, reading: tuple[float, float] | None) -> GpuMetrics:
        """One GPU's tick: the idle rule, then its metrics. Power is the energy's rate between the GPU's
        last two energy readings (the profiler drains the driver's power samples every few seconds: a rate
        over this tick alone would read 0 W, then twice the power)."""
        energy_j = None if reading is None else reading[1]
        tracker = self.trackers[r.index]
        idle_s = tracker.observe(now, r, energy_j)
        if idle_s is not None:
            self._act(r.index, idle_s)
        prev = self._last.get(r.index)
        if reading is not None and (prev is None or reading[0] > prev[0]):
            if prev is not None and reading[1] >= prev[1]:
                self._power[r.index] = (reading[1] - prev[1]) / (reading[0] - prev[0])
            self._last[r.index] = reading
        return GpuMetrics(
            gpu=r.index,
            power_w=self._power.get(r.index),
            energy_j=energy_j,
            util_pct=r.util_pct,
            memory_used_bytes=r.memory_used_bytes,
            memory_total_bytes=r.memory_total_bytes,
            power_limit_w=r.power_limit_w,
            processes=r.processes,
            idle=tracker.idle,
            idle_s=tracker.idle_s(now),
            idle_energy_j=tracker.idle_energy_j(energy_j),
        )

    def _act(self, gpu: int, idle_s: float) -> None:
        log.warning(
            "job %d step %s: gpu%d on %s idle for %.0f s (no compute process, utilisation <= %g %%)",
            self.step.job_id,
            self.step.step_key,
            gpu,
            self.step.node_name,
            idle_s,
            self.settings.rule.util_pct,
        )
        if self.settings.action is None:
            return
        env = {
            **os.environ,
            "EASLURM_JOB_ID": str(self.step.job_id),
            "EASLURM_STEP": self.step.step_key,
            "EASLURM_NODE": self.step.node_name,
            "EASLURM_GPU": str(gpu),
            "EASLURM_IDLE_S": f"{idle_s:.0f}",
        }
        th = threading.Thread(
            target=run_action, args=(self.settings.action, env, self.settings.action_timeout_s), daemon=True
        )
        th.start()
        self.actions.append(th)

    def stop(self, end_time: float | None = None) -> list[dict[str, Any]]:
        """Stop the thread, close every open episode at `end_time` (the step's end), remove the metrics
        file; the step's idle episodes, by start time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
        end = time.time() if end_time is None else end_time
        free = self._lock.acquire(timeout=STOP_WAIT_S)  # not free: a read hangs in the driver
        if not free:
            log.warning(
                "job %d: a GPU read still hangs at the step's end; episodes closed without it",
                self.step.job_id,
            )
        try:
            try:
                energy = self.energy_of()
            except Exception:
                energy = {}
            for index, tracker in self.trackers.items():
                reading = energy.get(f"gpu{index}")
                tracker.close(end, None if reading is None else reading[1])
            if free:
                self.reader.close()
        finally:
            if free:
                self._lock.release()
        if self.file is not None:
            remove_step(self.file)
        for th in self.actions:
            th.join(timeout=0.1)  # an action still running goes on alone (it is bounded by its timeout)
        episodes = [e.to_dict() for t in self.trackers.values() for e in t.episodes]
        return sorted(episodes, key=lambda e: (e["start"], e["gpu"]))


def run_action(argv: list[str], env: dict[str, str], timeout_s: float) -> bool:
    """Run the site's idle action (no shell); its failure is logged, never raised: the job goes on."""
    where = f"idle.action {argv[0]}"
    try:
        res = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("%s (job %s, gpu %s): %s", where, env.get("EASLURM_JOB_ID"), env.get("EASLURM_GPU"), exc)
        return False
    if res.returncode != 0:
        log.error(
            "%s (job %s, gpu %s): exit %d: %s",
            where,
            env.get("EASLURM_JOB_ID"),
            env.get("EASLURM_GPU"),
            res.returncode,
            (res.stderr or res.stdout).strip()[-300:],
        )
        return False
    return True
