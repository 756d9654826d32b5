"""`easlurm profile`: list sensors, or run a command under the energy profiler and print its energy."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import click

from easlurm.cli import load_ctx_config, output_options
from easlurm.energy.discovery import discover, parse_devices
from easlurm.energy.profiler import EnergyProfiler
from easlurm.errors import ConfigError, EaslurmError
from easlurm.files import check_writable, write_text_atomic
from easlurm.table import render_table, select_columns
from easlurm.units import format_edp, format_energy, format_power, parse_duration_s

log = logging.getLogger(__name__)

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
COLUMNS = [
    "Device",
    "Kind",
    "Source",
    "Energy",
    "MeanPower",
    "PeakPower",
    "EDP",
    "Duration",
    "Samples",
    "Modelled",
    "Error",
]
DEFAULT_COLUMNS = [c for c in COLUMNS if c != "Duration"]  # per-device durations differ only on request
SENSOR_COLUMNS = ["Sensor", "Kind", "Source", "Status", "Detail"]


def resolve_command(command: Sequence[str]) -> list[str]:
    """Check the command exists and may be run, before anything is measured or written."""
    if not command:
        raise ConfigError("no command given (usage: easlurm profile [OPTIONS] -- CMD [ARGS]...)")
    name = command[0]
    if os.sep in name:
        path = Path(name)
        if not path.exists():
            raise EaslurmError(f"{name}: command not found")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise EaslurmError(f"{name}: permission denied (not an executable file)")
        return list(command)
    if shutil.which(name) is None:
        raise EaslurmError(f"{name}: command not found")
    return list(command)


def device_rows(result: Any) -> list[dict[str, Any]]:
    rows = []
    for d in result.devices:
        rows.append(
            {
                "Device": d.name if d.in_total else f"({d.name})",
                "Kind": d.kind,
                "Source": d.source,
                "Energy": format_energy(d.energy_j),
                "MeanPower": format_power(d.mean_power_w),
                "PeakPower": format_power(d.peak_power_w),
                "EDP": format_edp(d.edp),
                "Duration": "" if d.duration_s is None else f"{d.duration_s:.2f}s",
                "Samples": d.samples,
                "Modelled": "modelled" if d.modelled else "measured",
                "Error": d.error,
            }
        )
    rows.append(
        {
            "Device": "TOTAL",
            "Energy": format_energy(result.total_energy_j),
            "MeanPower": format_power(result.mean_power_w),
            "EDP": format_edp(result.edp),
            "Duration": f"{result.duration_s:.2f}s",
        }
    )
    return rows


def _emit(text: str, output: str | None) -> None:
    if output:
        write_text_atomic(output, text + "\n", "--output")
    else:
        click.echo(text, err=True)


def show_sensors(
    cfg: Any,
    gpus: Sequence[str] | None,
    parsable: bool,
    as_json: bool,
    output: str | None,
    header: bool = True,
) -> None:
    prof = cfg.section("profiler")
    found = discover(
        parse_devices("gpu,cpu,dram"),
        prof["interval_s"],
        gpus,
        [os.getpid()],
        prof["powercap_root"],
        prof["nvml_module"],
    )
    found.close()
    if as_json:
        doc = [vars(s) for s in found.statuses]
        click.echo(json.dumps({"schema_version": 1, "sensors": doc}, indent=2))
        return
    rows = [
        {
            "Sensor": s.name,
            "Kind": s.kind,
            "Source": s.source,
            "Status": "found" if s.available else "missing",
            "Detail": s.detail,
        }
        for s in found.statuses
    ]
    click.echo(render_table(SENSOR_COLUMNS, rows, parsable=parsable, header=header))


class _Forwarder:
    """Pass the signals the wrapper receives on to the child's process group."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        self.old: dict[int, Any] = {}

    def __enter__(self) -> _Forwarder:
        for sig in FORWARDED:
            self.old[sig] = signal.signal(sig, self._forward)
        return self

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)


def _foreground(pgid: int) -> int | None:
    """Hand the terminal to the child's group so that Ctrl-C reaches it once; returns the tty fd."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return None
        os.tcsetpgrp(fd, pgid)
        return fd
    except (OSError, ValueError):
        return None


def _restore_foreground(fd: int | None) -> None:
    if fd is None:
        return
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, os.getpgrp())
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


def run_profiled(
    command: list[str], prof_kwargs: dict[str, Any], required: dict[str, str] | None = None
) -> tuple[int, Any, Any]:
    """Run the command under the profiler; a profiler failure only loses the measurement. `required`
    maps device kinds the user asked for by name to the option that named them: a kind with no sensor on
    this host is an error before the command runs (an empty table would read as zero energy)."""
    profiler = EnergyProfiler(**prof_kwargs, command=command)  # bad options raise here, before the run
    try:
        profiler.start()
    except Exception as exc:
        log.error("profiling disabled: %s", exc)
        profiler = None  # type: ignore[assignment]
    missing = profiler.no_sensor if profiler is not None else {}
    for kind, option in (required or {}).items():
        if kind in missing:
            profiler.discard()
            raise ConfigError(f"{option}: {missing[kind]}")
    try:
        child = subprocess.Popen(command, process_group=0)
    except OSError as exc:
        if profiler is not None:
            profiler.discard()
        raise EaslurmError(f"{command[0]}: {exc.strerror}") from exc
    if profiler is not None:
        profiler.track_pid(child.pid)
    tty = _foreground(child.pid)
    try:
        with _Forwarder(child):
            while True:
                try:
                    rc = child.wait()
                    break
                except InterruptedError:
                    continue
    finally:
        _restore_foreground(tty)
    result = cluster = None
    if profiler is not None:
        try:
            result = profiler.stop()
            cluster = profiler.cluster
        except Exception as exc:
            log.error("profiling failed: %s", exc)
    code = 128 - rc if rc < 0 else rc
    return code, result, cluster


@click.command("profile", context_settings={"allow_interspersed_args": False})
@click.option("--devices", default=None, help="Comma list of gpu,cpu,dram (default: all).")
@click.option("--interval", default=None, help="Sampling interval: 0.1, 100ms, 1s (default 0.1 s).")
@click.option(
    "-O", "--out", "out_dir", default=None, type=click.Path(file_okay=False), help="Run directory to write."
)
@click.option("--gpus", default=None, help="GPUs to measure (indices or UUIDs); default: the job's GPUs.")
@click.option(
    "--mpi", is_flag=True, help="Run as one MPI rank (under mpirun/srun); rank 0 prints node totals."
)
@click.option("--list-sensors", is_flag=True, help="Show which sensors were found and why others were not.")
@output_options(COLUMNS, json_help="Print one JSON document instead of the table.")
@click.option("--no-sample-log", is_flag=True, help="Do not write power_samples.csv.")
@click.option(
    "--output", default=None, type=click.Path(dir_okay=False), help="Summary file (default stderr)."
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def profile_cmd(
    ctx: click.Context,
    devices: str | None,
    interval: str | None,
    out_dir: str | None,
    gpus: str | None,
    mpi: bool,
    list_sensors: bool,
    fmt: str | None,
    parsable: bool,
    noheader: bool,
    as_json: bool,
    no_sample_log: bool,
    output: str | None,
    command: tuple[str, ...],
) -> None:
    """Run CMD under the energy profiler; exit with CMD's exit status. Example:

    \b
    easlurm profile --devices gpu,cpu --interval 100ms --out runs/r1 -- python train.py
    """
    if output is not None:
        check_writable(output, "--output")
    if out_dir is not None:
        check_writable(out_dir, "--out", directory=True)
    interval_s = parse_duration_s(interval, "--interval") if interval is not None else None
    overrides = {
        "profiler": {
            "devices": devices,
            "interval_s": interval_s,
            "out_dir": out_dir,
            "sample_log": False if no_sample_log else None,
        }
    }
    cfg = load_ctx_config(ctx, overrides, {"profiler.interval_s": "--interval"})
    gpu_list = gpus.split(",") if gpus else None
    if list_sensors:
        show_sensors(cfg, gpu_list, parsable, as_json, output, header=not noheader)
        return
    columns = select_columns(fmt, COLUMNS, DEFAULT_COLUMNS)
    cmd = resolve_command(command)
    p = cfg.section("profiler")
    kwargs = {
        "devices": p["devices"],
        "interval_s": p["interval_s"],
        "out_dir": p["out_dir"],
        "gpus": gpu_list,
        "powercap_root": p["powercap_root"],
        "nvml_module": p["nvml_module"],
        "sample_log": p["sample_log"],
        "mpi": mpi,
    }
    named = {d.strip().lower() for d in devices.split(",")} if devices else set()
    required: dict[str, str] = {k: f"--devices {devices}" for k in ("gpu", "cpu") if k in named}
    if gpus:
        required["gpu"] = f"--gpus {gpus}"
    code, result, cluster = run_profiled(cmd, kwargs, required)
    if mpi and cluster is None:
        result = None  # under MPI only rank 0 reports (its table covers every node)
    if result is not None:
        _report(result, cluster, cmd, code, columns, parsable, as_json, output, header=not noheader)
    if code:
        sys.exit(code)


def _report(
    result: Any,
    cluster: Any,
    cmd: list[str],
    code: int,
    columns: list[str],
    parsable: bool,
    as_json: bool,
    output: str | None,
    header: bool = True,
) -> None:
    """The run's energy to --output (default stderr, so the command's own stdout stays its own): one JSON
    document, or a summary line, the device table and, under MPI, the per-node table."""
    if as_json:
        doc = result.to_dict()
        doc["command"] = cmd
        doc["exit_code"] = code
        if cluster is not None:
            doc["cluster"] = cluster.to_dict()
        _emit(json.dumps(doc, indent=2), output)
        return
    head = f"easlurm profile: {' '.join(cmd)} exited {code} after {result.duration_s:.2f} s"
    if result.edp is not None:
        head += f", EDP {format_edp(result.edp)}"
    text = [render_table(columns, device_rows(result), parsable=parsable, header=header)]
    if parsable:  # -P prints tables only: the summary goes to stderr
        click.echo(head, err=True)
    else:
        text.insert(0, head)
    if cluster is not None:
        rows = [
            {k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()} for r in cluster.rows()
        ]
        text.append(render_table(cluster.columns(), rows, parsable=parsable, header=header))
    _emit("\n".join(text), output)
