"""The per-step node agent that the SPANK plugin starts in slurmstepd: profile, record, gather, publish.

Run as `python -m easlurm.accounting.agent --job J --step S ...` by the plugin (root, no shell). It profiles
the step's devices until its stdin reaches EOF (the plugin writes `stop <unix time>` and shuts the
socket when the step's last local task ended), writes `node-<id>.json`, and on node 0 waits (bounded)
for the other nodes' records, writes `step-<step>.json` and republishes the job's AdminComment.

Node records meet in the spool (easlurm.accounting.spool describes its layout); when it is not shared
between nodes, node 0 publishes a `partial` record naming the missing nodes. A node whose record comes
after node 0 gave up waiting fills itself into the step record and republishes it
(easlurm.accounting.publish).

The plugin waits for the agent at most `timeout_ms` at step end; an agent still busy then (an
overloaded node) is left to finish in the background, never killed, so its record arrives late rather
than never. The agent bounds itself: `spank.late_limit_s` after the stop, SIGALRM ends it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from easlurm.accounting.live import LiveWatch, WatchedStep, WatchSettings
from easlurm.accounting.publish import (
    gather_step,
    publish_from_spool,
    published_steps,
    set_admin_comment,
    warn_partial,
)
from easlurm.accounting.spool import (
    Spool,
    SpoolLogHandler,
    check_owned_dir,
    is_full,
    job_lock,
    make_private_dir,
    move_aside,
    read_json,
    write_record,
)
from easlurm.accounting.step_record import (
    NodeRecord,
    StepRecord,
    encode_admin_comment,
    run_step_key,
)
from easlurm.config import load_config
from easlurm.energy.cpu_share import apportion_node_devices
from easlurm.energy.power_limits import StepCap
from easlurm.energy.profiler import EnergyProfiler
from easlurm.energy.spec import parse_spec
from easlurm.errors import EaslurmError
from easlurm.slurm.client import CliSlurmClient
from easlurm.slurm.hostlist import expand_hostlist

log = logging.getLogger(__name__)

#: Share of the plugin's timeout that node 0 may spend waiting for other nodes (the rest publishes).
GATHER_SHARE = 0.5
#: Longest wait for one Slurm command while publishing.
SLURM_CMD_TIMEOUT_S = 30.0


@dataclass
class StepContext:
    """What the plugin tells the agent about the step (all from Slurm, never from the user's SPEC)."""

    job_id: int
    step: str
    nnodes: int
    node_id: int
    spool: Path
    uid: int = 0
    gid: int = 0
    stepd_pid: int | None = None
    timeout_s: float = 2.0
    step_start_time: float | None = None
    spec: str = ""
    gpus: list[str] | None = None
    #: Slurm's name for this node (virtual nodes share one hostname); the hostname when None.
    node_name: str | None = None
    #: How long the agent may go on after the step's stop (spank.late_limit_s).
    late_limit_s: float = 120.0
    #: The job's run (SLURM_RESTART_COUNT): each run of a requeued job has its own step files.
    restart: int = 0
    #: The job's gres/shard count on this node (SLURM_SHARDS_ON_NODE): only a step on shards can meet
    #: another job on its GPU, so only such a step watches its GPUs for other jobs (NVML calls cost CPU).
    shards: int = 0

    def __post_init__(self) -> None:
        if not (self.step == "batch" or self.step.isdigit()):
            raise EaslurmError(f"step {self.step!r}: expected 'batch' or a number")
        if self.step == "batch":
            self.nnodes, self.node_id = 1, 0  # the batch script runs on the first node only
        if self.restart < 0:
            raise EaslurmError(f"restart count {self.restart}: expected >= 0")
        if self.job_id <= 0 or self.node_id < 0 or self.nnodes < 1 or self.node_id >= self.nnodes:
            raise EaslurmError(f"bad job/node ids: job {self.job_id} node {self.node_id}/{self.nnodes}")
        if self.node_name is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", self.node_name):
            raise EaslurmError(f"node name {self.node_name!r}: unexpected characters")

    @property
    def paths(self) -> Spool:
        """The spool's layout: every path below is named there."""
        return Spool(self.spool)

    @property
    def job_dir(self) -> Path:
        return self.paths.job_dir(self.job_id)

    @property
    def step_key(self) -> str:
        return run_step_key(self.step, self.restart)

    @property
    def step_dir(self) -> Path:
        return self.paths.step_dir(self.job_id, self.step_key)

    def node_file(self, node_id: int) -> Path:
        return self.paths.node_file(self.job_id, self.step_key, node_id)

    @property
    def step_file(self) -> Path:
        return self.paths.step_file(self.job_id, self.step_key)

    @property
    def manifest_file(self) -> Path:
        return self.paths.manifest_file(self.job_id)

    @property
    def run_dir(self) -> Path:
        """This node's profiler run directory (samples)."""
        return self.paths.node_run_dir(self.job_id, self.step_key, self.node_id)

    @property
    def log_file(self) -> Path:
        """This node's agent log."""
        return self.paths.node_log(self.job_id, self.step_key, self.node_id)


# ------------------------------------------------------------------------------------------ agent


class NodeAgent:
    """One step on one node. `profiler_factory(**kwargs)` returns an object with start()/stop() as
    easlurm.energy.EnergyProfiler; `client` is a SlurmClient (both injectable for tests)."""

    def __init__(
        self,
        ctx: StepContext,
        client: Any = None,
        profiler_factory: Callable[..., Any] | None = None,
        profiler_settings: dict[str, Any] | None = None,
        watch_settings: WatchSettings | None = None,
    ) -> None:
        self.ctx = ctx
        #: idle GPUs and per-job metrics (None: not watched); the watch itself once started
        self.watch_settings = watch_settings
        self.watch: LiveWatch | None = None
        self.client = client
        self.profiler_factory = profiler_factory
        self.settings = profiler_settings or {}
        self.profiler: Any = None
        self.error: str | None = None
        self.stop_time: float | None = None
        self.spool_ok = False
        #: Why the spool could not take this step's files (it is full), for the published record.
        self.spool_error: str | None = None
        self._stop = threading.Event()
        self.power_cap: StepCap | None = None
        self.share_watcher: Any = None

    def prepare_spool(self) -> bool:
        """Create the job and step directories; False (logged) when the spool cannot take records.
        A job directory that already holds this very (run, step, node) is left from an earlier job with
        the same ID (controller state lost, IDs reused): it is moved aside, never profiled into."""
        try:
            check_owned_dir(self.ctx.spool)
            make_private_dir(self.ctx.job_dir, self.ctx.gid)
            if self._mine_exists():
                move_aside(self.ctx.job_dir)
                make_private_dir(self.ctx.job_dir, self.ctx.gid)
            make_private_dir(self.ctx.step_dir, self.ctx.gid)
            return True
        except OSError as exc:
            if is_full(exc):
                self.spool_error = f"spool full: {exc.strerror}"
            log.error("spool %s unusable: %s; no file records for this step", self.ctx.spool, exc)
            return False

    def _mine_exists(self) -> bool:
        return self.ctx.node_file(self.ctx.node_id).exists() or self.ctx.run_dir.exists()

    def start(self) -> None:
        """Start profiling; a failure is recorded as the node's error, never raised."""
        spool_ok = self.spool_ok = self.prepare_spool()
        self.power_cap = StepCap(
            self.ctx.spool,
            self.ctx.job_id,
            self.ctx.step,
            self.ctx.node_name or socket.gethostname(),
            [int(g) for g in self.ctx.gpus or []],
            self.settings.get("nvml_module", "pynvml"),
        )
        self.power_cap.start()  # never raises
        try:
            spec = parse_spec(self.ctx.spec)
            factory = self.profiler_factory
            if factory is None:
                factory = EnergyProfiler
            out_dir = self.ctx.run_dir if spool_ok else None
            self.profiler = factory(
                devices=",".join(spec.devices),
                interval_s=spec.interval_s or float(self.settings.get("interval_s", 0.1)),
                out_dir=out_dir,
                gpus=self.ctx.gpus if self.ctx.gpus is not None else [],
                pid=self.ctx.stepd_pid,
                powercap_root=self.settings.get("powercap_root", "/sys/class/powercap"),
                nvml_module=self.settings.get("nvml_module", "pynvml"),
                sample_log=bool(self.settings.get("sample_log", True)) and out_dir is not None,
                lead_in_from=self.ctx.step_start_time,  # the agent starts after its step: reach back
            )
            self.profiler.start()
            if "gpu" in spec.devices and self.ctx.gpus and self.ctx.shards > 0:
                self._watch_sharing()
            if "gpu" in spec.devices and self.ctx.gpus and self.watch_settings is not None:
                self._watch_gpus(self.watch_settings)
        except Exception as exc:  # a profiler must never hurt the job: record why and go on
            log.error("step %d.%s: profiler did not start: %s", self.ctx.job_id, self.ctx.step, exc)
            self.error = f"profiler did not start: {exc}"
            self.profiler = None

    def _watch_sharing(self) -> None:
        """Watch the step's GPUs for other jobs' processes (co-location on gres/shard): a GPU shared
        with another job is apportioned in the record (see easlurm.energy.gpu_share)."""
        from easlurm.energy.gpu_share import ShareWatcher  # here: start-up latency; only steps on shards

        watcher = ShareWatcher(
            [int(g) for g in self.ctx.gpus or []],
            self.ctx.stepd_pid,
            self.settings.get("nvml_module", "pynvml"),
            since=self.ctx.step_start_time,
        )
        if watcher.start():
            self.share_watcher = watcher

    def _watch_gpus(self, settings: WatchSettings) -> None:
        """Watch the step's GPUs live: idle episodes into the record, the step's metrics file."""
        step = WatchedStep(
            self.ctx.job_id,
            self.ctx.step_key,
            self.ctx.node_id,
            self.ctx.node_name or socket.gethostname(),
            [int(g) for g in self.ctx.gpus or []],
        )
        energy_of = getattr(self.profiler, "live_energy", dict)
        self.watch = LiveWatch.for_step(step, settings, energy_of, self.settings.get("nvml_module", "pynvml"))

    def _stop_watch(self, end: float) -> list[dict[str, Any]]:
        """The step's idle episodes (closed at `end`); the metrics file is gone after this."""
        if self.watch is None:
            return []
        try:
            return self.watch.stop(end)
        except Exception as exc:  # never the record's failure
            log.warning("step %d.%s: GPU watch: %s", self.ctx.job_id, self.ctx.step, exc)
            return []
        finally:
            self.watch = None

    def _apportion(self, rec: NodeRecord) -> None:
        """Replace each shared GPU's whole energy by this step's share (never fails the record)."""
        try:
            shares = self.share_watcher.stop()
        except Exception as exc:
            log.warning("step %d.%s: GPU sharing not apportioned: %s", self.ctx.job_id, self.ctx.step, exc)
            return
        for index, share in shares.items():
            fraction = share.fraction
            dev = next((d for d in rec.devices if d.kind == "gpu" and d.name == f"gpu{index}"), None)
            if dev is None or fraction is None:
                continue
            dev.apportion(fraction, share.method.value)
            log.info(
                "step %d.%s: gpu%d shared with %s: %.1f%% of its energy by %s",
                self.ctx.job_id,
                self.ctx.step,
                index,
                ",".join(sorted(share.others)),
                100.0 * fraction,
                share.method.value,
            )

    def request_stop(self, stop_time: float | None = None) -> None:
        if stop_time is not None and self.stop_time is None:
            self.stop_time = stop_time
        self._stop.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._stop.wait(timeout_s)

    def node_record(self) -> NodeRecord:
        """Stop the profiler and describe this node's share of the step."""
        end = self.stop_time if self.stop_time is not None else time.time()
        if self.profiler is not None:
            try:
                result = self.profiler.stop()
                rec = NodeRecord.from_profile(result, self.ctx.node_id, self.ctx.step_start_time, end)
                rec.idle_episodes = self._stop_watch(end)
                if self.share_watcher is not None:
                    self._apportion(rec)
                apportion_node_devices(rec.devices, getattr(result, "cpu_share", None))  # shared node
                rec.error = self.error
                rec.host = self.ctx.node_name or rec.host
                self._record_cap(rec)
                return rec
            except Exception as exc:
                log.error("step %d.%s: profiler failed: %s", self.ctx.job_id, self.ctx.step, exc)
                self.error = f"profiler failed: {exc}"
        self._stop_watch(end)
        rec = NodeRecord(
            node_id=self.ctx.node_id,
            host=self.ctx.node_name or socket.gethostname(),
            start_time=self.ctx.step_start_time,
            duration_s=None,
            step_start_time=self.ctx.step_start_time,
            step_end_time=end,
            error=self.error or "no measurement",
        )
        self._record_cap(rec)
        return rec

    def _record_cap(self, rec: NodeRecord) -> None:
        """The power limit the step ran at on this node, and why a requested one is not in force."""
        outcome = self.power_cap.outcome if self.power_cap is not None else None
        if outcome is not None:
            rec.power_limit_requested_w = outcome.requested_w
            rec.power_limit_w = outcome.applied_w
            rec.limit_error = outcome.error

    def finish(self) -> StepRecord | None:
        """After the stop: write this node's record; node 0 gathers, writes the step record and
        publishes; another node whose record came after node 0 stopped waiting fills itself in."""
        t0 = time.monotonic()
        hard = t0 + self.ctx.late_limit_s * 0.8  # publication must be over before the SIGALRM bound
        rec = self.node_record()
        rec.nnodes, rec.spec = self.ctx.nnodes, self.ctx.spec  # a reader rebuilds the step if node 0 dies
        if self.power_cap is not None:
            self.power_cap.end()
        wrote = self.spool_ok and self._write(self.ctx.node_file(self.ctx.node_id), rec.to_dict())
        if self.ctx.node_id != 0:
            if wrote:
                self._fill_in_late_node(rec, hard)
            return None
        if not self.spool_ok:  # this node's record alone, flagged when other nodes exist
            others = [n for n in range(self.ctx.nnodes) if n != rec.node_id]
            step = StepRecord(
                self.ctx.job_id,
                self.ctx.step,
                self.ctx.nnodes,
                [rec],
                self.ctx.spec,
                others,
                run=self.ctx.restart,
                spool_error=self.spool_error,
            )
            if self.client is not None:
                self._bound_client(hard)
                text = encode_admin_comment(published_steps(self.ctx, step, self.client))
                set_admin_comment(self.ctx.job_id, text, self.client)
            return step
        step = gather_step(self.ctx, rec, t0 + self.ctx.timeout_s * 0.9 * GATHER_SHARE)
        with job_lock(self.ctx.job_dir, max(0.0, hard - time.monotonic())) as locked:
            if locked and step.missing_nodes:  # one last look, under the lock late nodes take too
                step = gather_step(self.ctx, rec, 0.0, known={n.node_id: n for n in step.nodes})
            warn_partial(self.ctx, step)
            step.spool_error = self.spool_error
            wrote = self._write(self.ctx.step_file, step.to_dict())
            step.spool_error = self.spool_error  # published from memory when the spool is full
            if not locked:
                log.error(
                    "job %d: publication lock still held after %.0f s; step %s kept in %s, not published"
                    " (easlurm accounting republish publishes it)",
                    self.ctx.job_id,
                    time.monotonic() - t0,
                    self.ctx.step,
                    self.ctx.step_file,
                )
            elif self.client is not None:
                self._bound_client(hard)
                publish_from_spool(self.ctx, self.client, None if wrote else step)
        return step

    def _fill_in_late_node(self, rec: NodeRecord, hard: float) -> None:
        """This node's record came after node 0 wrote a partial step record: add it and republish.
        Under the job lock, so node 0 either saw this node's file or wrote its record before."""
        with job_lock(self.ctx.job_dir, max(0.0, hard - time.monotonic())) as locked:
            doc = read_json(self.ctx.step_file) if locked else None
            if doc is None:  # node 0 has not written the step record yet: it reads this node's file
                return
            try:
                step = StepRecord.from_dict(doc)
            except EaslurmError as exc:
                log.warning("%s: %s", self.ctx.step_file, exc)
                return
            if self.ctx.node_id not in step.missing_nodes:
                return
            step = gather_step(self.ctx, rec, 0.0, known={n.node_id: n for n in step.nodes})
            log.warning(
                "step %d.%s: node %d record arrived late; added", self.ctx.job_id, self.ctx.step, rec.node_id
            )
            if self._write(self.ctx.step_file, step.to_dict()) and self.client is not None:
                self._bound_client(hard)
                publish_from_spool(self.ctx, self.client)

    def _write(self, path: Path, doc: dict[str, Any]) -> bool:
        try:
            write_record(path, doc, self.ctx.gid)
            return True
        except OSError as exc:
            if is_full(exc):  # one line, and the published record says so
                self.spool_error = f"spool full: {exc.strerror}"
            log.error("cannot write record %s: %s", path, exc.strerror or exc)
            return False

    def _bound_client(self, hard: float) -> None:
        self.client.timeout_s = min(SLURM_CMD_TIMEOUT_S, max(1.0, hard - time.monotonic()))


def watch_stop(stream: IO[bytes], agent: NodeAgent, on_stop: Callable[[], None] | None = None) -> None:
    """Read the plugin's socket: `stop <unix time>` then EOF. EOF alone (plugin gone) also stops."""
    stop_time = None
    try:
        for line in stream:
            parts = line.split()
            if len(parts) == 2 and parts[0] == b"stop":
                with contextlib.suppress(ValueError):
                    stop_time = float(parts[1])
    except OSError:
        pass
    if on_stop is not None:
        on_stop()
    agent.request_stop(stop_time)


def node_name_from_list(nodelist: str | None, node_id: int) -> str | None:
    """This node's name from the step's node list, None if it cannot be told."""
    if not nodelist:
        return None
    try:
        names = expand_hostlist(nodelist)
    except ValueError as exc:
        log.warning("%s", exc)
        return None
    return names[node_id] if 0 <= node_id < len(names) else None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="easlurm-agent", description="easlurm per-step node agent (run by the SPANK plugin)"
    )
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--step", required=True)
    p.add_argument(
        "--restart", type=int, default=None, help="the job's SLURM_RESTART_COUNT (its run); asked when absent"
    )
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--node-id", type=int, required=True)
    p.add_argument("--uid", type=int, default=0)
    p.add_argument("--gid", type=int, default=0)
    p.add_argument("--stepd-pid", type=int, default=None)
    p.add_argument("--spool", required=True)
    p.add_argument("--timeout-ms", type=int, default=2000)
    p.add_argument("--step-start", type=float, default=None)
    p.add_argument("--spec", default="")
    p.add_argument("--gpus", default=None, help="comma list of the step's GPU indices (from GRES)")
    p.add_argument("--nodelist", default=None, help="the step's node list (Slurm hostlist expression)")
    p.add_argument("--shards", type=int, default=0, help="the job's gres/shard count on this node (0: none)")
    return p


def restart_count(job_id: int, client: Any) -> int:
    """The job's run from slurmctld (`Restarts=`) when SLURM_RESTART_COUNT was not in the step's
    environment (the batch step's); 0 when slurmctld cannot say (logged)."""
    try:
        value = client.show_job(job_id).get("Restarts", "0")
        return int(value) if str(value).isdigit() else 0
    except EaslurmError as exc:
        log.warning("job %d: restart count unknown (%s); taken as 0", job_id, exc)
        return 0


def leave_step_cgroup(
    job_id: int, proc_cgroup: Path = Path("/proc/self/cgroup"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> Path | None:
    """Under cgroup v2 with proctrack/cgroup, slurmstepd SIGKILLs every process in the step's cgroup
    (`.../job_<id>/step_<s>/...`, which the agent inherits) once the tasks end: an agent left to finish
    in the background would die with its record. Move this process to the `system` leaf beside the job
    cgroups in slurmstepd's scope, where slurmstepd itself waits before a step starts. Returns the new
    cgroup, None when there is nothing to leave (cgroup v1, linuxproc) or it cannot be left (logged)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    unified = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    m = re.fullmatch(rf"(/.*?)/job_{job_id}/step_[^/]+(?:/.*)?", unified or "")
    if m is None:
        return None
    target = cgroup_root / m.group(1).lstrip("/") / "system"
    try:
        (target / "cgroup.procs").write_text(f"{os.getpid()}\n")
    except OSError as exc:
        log.warning("cannot leave the step's cgroup for %s (%s): a late agent may be killed", target, exc)
        return None
    return target


def keep_log_in_spool(ctx: StepContext) -> None:
    """Also log to SPOOL/<job>/<step>/node-<id>.log: once the plugin stops waiting (timeout_ms), the
    agent's stderr goes nowhere, and a late agent's messages must still reach the admin."""
    try:
        handler = SpoolLogHandler(ctx.log_file, delay=True)
    except OSError as exc:
        log.warning("agent log in the spool: %s", exc)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(handler)


def main(argv: list[str] | None = None, stdin: IO[bytes] | None = None) -> int:
    """Entry point for the plugin. Exit status: 0 ok, 2 bad arguments, 1 record not (fully) produced."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    try:
        args = _parser().parse_args(argv)
        gpus = None
        if args.gpus is not None:
            gpus = [g for g in args.gpus.split(",") if g]
            if not all(g.isdigit() for g in gpus):
                raise EaslurmError(f"--gpus {args.gpus!r}: expected indices")
        ctx = StepContext(
            job_id=args.job,
            step=args.step,
            restart=args.restart or 0,
            nnodes=args.nnodes,
            node_id=args.node_id,
            spool=Path(args.spool),
            uid=args.uid,
            gid=args.gid,
            stepd_pid=args.stepd_pid,
            timeout_s=args.timeout_ms / 1000.0,
            step_start_time=args.step_start,
            spec=args.spec,
            gpus=gpus,
            shards=max(args.shards, 0),
            node_name=node_name_from_list(args.nodelist, 0 if args.step == "batch" else args.node_id),
        )
        cfg = load_config(os.environ.get("EASLURM_AGENT_CONFIG") or None)
        settings = cfg.section("profiler")
        watch = WatchSettings.from_config(cfg)
        ctx.late_limit_s = float(cfg.get("spank.late_limit_s"))
        if not ctx.late_limit_s > 0:
            raise EaslurmError(f"spank.late_limit_s: must be > 0, got {ctx.late_limit_s}")
    except (EaslurmError, SystemExit) as exc:
        log.error("bad agent invocation: %s", exc)
        return 2
    leave_step_cgroup(ctx.job_id)
    client = CliSlurmClient(retries=1)
    if args.restart is None and ctx.step == "batch":  # srun steps inherit it: absent means run 0
        ctx.restart = restart_count(ctx.job_id, client)
    publish_to = client if cfg.get("spank.store") == "admin_comment" else None  # "spool": files only
    agent = NodeAgent(ctx, client=publish_to, profiler_settings=settings, watch_settings=watch)

    def bound_the_rest() -> None:
        """From the stop on, the kernel ends this process after late_limit_s (SIGALRM's default action
        needs no Python code to run, so it works even if a sensor call hangs holding the GIL)."""
        signal.alarm(max(1, math.ceil(ctx.late_limit_s)))

    def on_sigterm(*_: Any) -> None:
        bound_the_rest()
        agent.request_stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    stream = stdin if stdin is not None else sys.stdin.buffer
    threading.Thread(
        target=watch_stop, args=(stream, agent, bound_the_rest), name="easlurm-stop", daemon=True
    ).start()
    agent.start()
    if agent.spool_ok:
        keep_log_in_spool(ctx)
    agent.wait()
    try:
        step = agent.finish()
    except Exception as exc:
        log.error("step %d.%s: record not produced: %s", ctx.job_id, ctx.step, exc)
        return 1
    if agent.error or (step is not None and step.partial):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
