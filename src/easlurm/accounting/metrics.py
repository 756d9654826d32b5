"""Per-job metrics in Prometheus's text format: what a node agent writes for its step, and what
`easlurm metrics serve` makes of a directory of such files (node_exporter's textfile-collector layout).

One file per step and node, `easlurm_job<J>_<step>_n<node id>.prom`, replaced atomically at every write
and removed when the step ends. Its first line names the agent (`# easlurm-agent pid=P start=T
interval_s=S`, T its start time in /proc): a file whose agent is gone (or whose PID now names another
process), or that was not rewritten for STALE_INTERVALS intervals, is not served.
Labels are bounded: job id, step, node name and GPU index, never user text."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from easlurm.energy.power_limits import pid_alive, proc_start
from easlurm.files import write_text_atomic

#: A file not rewritten for this many of its agent's intervals is stale (a hung agent), not served.
STALE_INTERVALS = 3
#: ... and never sooner than this many seconds (a loaded node delays a write).
STALE_MIN_S = 30.0
FILE_PREFIX = "easlurm_job"
_HEADER = re.compile(r"# easlurm-agent pid=(\d+) start=(\d+|-) interval_s=([0-9.eE+-]+)")
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL_OK = re.compile(r"[A-Za-z0-9._+-]{1,128}")

#: name: (type, help) of every family an agent writes (base units, as Prometheus's naming asks).
FAMILIES: dict[str, tuple[str, str]] = {
    "easlurm_job_gpu_power_watts": ("gauge", "Power drawn by a GPU allocated to a job step (W)."),
    "easlurm_job_gpu_energy_joules_total": (
        "counter",
        "Energy drawn by a job step's GPU since the step began (J).",
    ),
    "easlurm_job_gpu_utilization_ratio": ("gauge", "GPU utilisation of a job step's GPU (0 to 1, NVML)."),
    "easlurm_job_gpu_memory_used_bytes": ("gauge", "GPU memory in use on a job step's GPU (bytes)."),
    "easlurm_job_gpu_memory_total_bytes": ("gauge", "Total memory of a job step's GPU (bytes)."),
    "easlurm_job_gpu_power_limit_watts": ("gauge", "Power limit in force on a job step's GPU (W)."),
    "easlurm_job_gpu_processes": ("gauge", "Compute processes on a job step's GPU."),
    "easlurm_job_gpu_idle": (
        "gauge",
        "1 while a job step's GPU is idle by the site's rule (idle.*), else 0.",
    ),
    "easlurm_job_gpu_idle_seconds": (
        "gauge",
        "How long a job step's GPU has been idle so far (s, 0 when not).",
    ),
    "easlurm_job_gpu_idle_energy_joules_total": (
        "counter",
        "Energy a job step's GPU drew while idle, over its idle episodes so far (J).",
    ),
}
#: Written by `easlurm metrics serve` from the live files, never by an agent.
NODE_IDLE = "easlurm_node_idle_allocated_gpus"
NODE_IDLE_HELP = "Distinct allocated GPUs of a node that are idle now (over every live job step)."
FILES = "easlurm_metrics_files"
FILES_HELP = "Agents' files in the metrics directory by state (live: served; gone: agent not running; stale)."


@dataclass(frozen=True)
class GpuMetrics:
    """One GPU of one step at one write; None values are left out of the file (unknown, not zero)."""

    gpu: int
    power_w: float | None = None
    energy_j: float | None = None
    util_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_limit_w: float | None = None
    processes: int | None = None
    idle: bool = False
    idle_s: float = 0.0
    idle_energy_j: float | None = None


def metrics_file(directory: Path, job_id: int, step_key: str, node_id: int) -> Path:
    """The step's file on this node (`step_key` as the spool names it: `0`, `batch`, `0+r1`)."""
    return directory / f"{FILE_PREFIX}{job_id}_{step_key.replace('+', '_')}_n{node_id}.prom"


def _labels(**labels: str) -> str:
    for k, v in labels.items():
        if not _LABEL_OK.fullmatch(v):
            raise ValueError(f"label {k}={v!r}: unexpected characters")
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _num(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def render_step(
    job_id: int, step: str, node: str, gpus: Sequence[GpuMetrics], pid: int, interval_s: float
) -> str:
    """The text of one step's file (families in FAMILIES order, one series per GPU)."""
    values: dict[str, list[tuple[str, float]]] = {name: [] for name in FAMILIES}
    for g in gpus:
        lab = _labels(jobid=str(job_id), step=step, node=node, gpu=str(g.gpu))
        util = None if g.util_pct is None else g.util_pct / 100.0
        for name, v in (
            ("easlurm_job_gpu_power_watts", g.power_w),
            ("easlurm_job_gpu_energy_joules_total", g.energy_j),
            ("easlurm_job_gpu_utilization_ratio", util),
            ("easlurm_job_gpu_memory_used_bytes", g.memory_used_bytes),
            ("easlurm_job_gpu_memory_total_bytes", g.memory_total_bytes),
            ("easlurm_job_gpu_power_limit_watts", g.power_limit_w),
            ("easlurm_job_gpu_processes", g.processes),
            ("easlurm_job_gpu_idle", 1.0 if g.idle else 0.0),
            ("easlurm_job_gpu_idle_seconds", g.idle_s),
            ("easlurm_job_gpu_idle_energy_joules_total", g.idle_energy_j),
        ):
            if v is not None:
                values[name].append((lab, float(v)))
    lines = [f"# easlurm-agent pid={pid} start={proc_start(pid) or '-'} interval_s={interval_s:g}"]
    for name, samples in values.items():
        if samples:
            kind, text = FAMILIES[name]
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{lab} {_num(v)}" for lab, v in samples]
    return "\n".join(lines) + "\n"


def write_step(path: Path, text: str) -> None:
    """Replace the step's file atomically (a scrape never reads half a file); world-readable."""
    write_text_atomic(path, text)
    with contextlib.suppress(OSError):
        path.chmod(0o644)


def remove_step(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# ----------------------------------------------------------------------------------------- serving


def file_state(path: Path, now: float | None = None) -> tuple[str, str | None]:
    """("live", text) when the file's agent still runs and wrote it recently; else ("gone", None) (no
    agent header, the agent is not running or its PID names another process now), ("stale", None) (not
    rewritten for STALE_INTERVALS intervals: a hung agent) or ("vanished", None) (removed at step end
    between the listing and the read)."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
        mtime = path.stat().st_mtime
    except OSError:
        return "vanished", None
    m = _HEADER.match(text)
    if m is None or not pid_alive(int(m.group(1))):
        return "gone", None
    if m.group(2) != "-" and proc_start(int(m.group(1))) != m.group(2):
        return "gone", None  # the agent is gone and its PID was reused
    try:
        interval = float(m.group(3))
    except ValueError:
        return "gone", None
    now = time.time() if now is None else now
    if now - mtime > max(STALE_INTERVALS * interval, STALE_MIN_S):
        return "stale", None
    return "live", text


def live_text(path: Path, now: float | None = None) -> str | None:
    """The file's text when its agent still runs and wrote it recently, else None."""
    return file_state(path, now)[1]


def merge(texts: Iterable[str]) -> str:
    """Several steps' files as one exposition: each family's HELP and TYPE once, then all its series;
    plus each node's idle allocated GPUs (distinct GPUs over the steps that hold them)."""
    samples: dict[str, list[str]] = {}
    idle: dict[str, set[str]] = {}
    for text in texts:
        for line in text.splitlines():
            m = _SAMPLE.fullmatch(line.strip())
            if line.startswith("#") or m is None or m.group(1) not in FAMILIES:
                continue
            samples.setdefault(m.group(1), []).append(line.strip())
            if m.group(1) == "easlurm_job_gpu_idle":
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
                gpus = idle.setdefault(labels.get("node", ""), set())
                if float(m.group(3)) >= 1:
                    gpus.add(labels.get("gpu", ""))
    out = []
    for name, (kind, text) in FAMILIES.items():
        if samples.get(name):
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *samples[name]]
    if idle:
        out += [f"# HELP {NODE_IDLE} {NODE_IDLE_HELP}", f"# TYPE {NODE_IDLE} gauge"]
        out += [f'{NODE_IDLE}{{node="{node}"}} {len(gpus)}' for node, gpus in sorted(idle.items())]
    return "\n".join(out) + "\n" if out else ""


def sweep(directory: Path, now: float | None = None) -> list[Path]:
    """Remove the files `collect` would leave out (their agent is gone, or they are stale): for a
    textfile-collector directory, which node_exporter serves as long as a file exists. The removed paths."""
    removed = []
    for path in sorted(directory.glob(f"{FILE_PREFIX}*.prom")):
        if path.exists() and live_text(path, now) is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def collect(directory: Path, now: float | None = None) -> str:
    """What `easlurm metrics serve` answers: the live files of `directory`, merged, and how many files
    it found in each state (files of agents that are gone say that agents were killed)."""
    try:
        paths = sorted(directory.glob(f"{FILE_PREFIX}*.prom"))
    except OSError:
        paths = []
    counts = dict.fromkeys(("live", "gone", "stale"), 0)
    texts = []
    for p in paths:
        state, text = file_state(p, now)
        if state in counts:
            counts[state] += 1
        if text is not None:
            texts.append(text)
    own = [f"# HELP {FILES} {FILES_HELP}", f"# TYPE {FILES} gauge"]
    own += [f'{FILES}{{state="{state}"}} {n}' for state, n in counts.items()]
    return merge(texts) + "\n".join(own) + "\n"
