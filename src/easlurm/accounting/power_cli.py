"""`easlurm power suspend|resume HOSTLIST` (Slurm's SuspendProgram/ResumeProgram), `easlurm power report`
(each node's time powered down, power cycles and energy, from the power-state log) and `easlurm power
restore-caps` (GPU power caps no live step holds: easlurm.energy.power_limits)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import click

from easlurm.accounting.power_state import (
    COLUMNS,
    NodeDraw,
    PowerEvent,
    StateEvent,
    append_events,
    node_draw,
    node_power,
    parse_period_time,
    read_events,
    render_json,
    state_log_path,
    table_rows,
)
from easlurm.cli import load_ctx_config, output_options
from easlurm.config import argv_template
from easlurm.energy.power_limits import LEDGER_DIR, load_nvml, restore_stale, stale_ledgers
from easlurm.errors import ConfigError, EaslurmError
from easlurm.slurm.client import CliSlurmClient
from easlurm.slurm.power_save import expand_nodes, run_for_nodes
from easlurm.slurm.sched_client import CliSchedClient
from easlurm.table import render_table, select_columns

log = logging.getLogger(__name__)

#: The notes under a human table say the draws are estimates unless the site set them.
_ESTIMATE_NOTE = (
    "Idle and off draws are the simulator's estimates by GPUs per node (docs/power-saving.md); set "
    "power.node_idle_w and power.node_off_w to a site's own readings."
)


@click.group("power", context_settings={"help_option_names": ["-h", "--help"]})
def power_group() -> None:
    """Slurm's power saving: the programs slurm.conf runs, and what powering nodes down saved; GPU power caps
    left by steps that are gone (restore-caps)."""


def _power(ctx: click.Context, event: str, hostlists: tuple[str, ...], debug: bool) -> None:
    cfg = load_ctx_config(ctx)
    key = f"power.{event}_command"
    where = f"{cfg.origin.get(key, 'default')}: {key}"
    template = argv_template(cfg.get(key), where) if cfg.get(key) is not None else None
    path = state_log_path(cfg)
    client = CliSlurmClient(debug=debug, echo=lambda msg: click.echo(msg, err=True))
    nodes = expand_nodes(hostlists, lambda text: client.run(["scontrol", "show", "hostnames", text]))
    actions = run_for_nodes(nodes, template, float(cfg.get("power.command_timeout_s")))
    kind = PowerEvent(event)
    failed = [a for a in actions if not a.ok]
    for a in failed:  # before the log: a node's failure is reported even where the log cannot be written
        click.echo(f"easlurm: error: power {event} {a.node}: {a.error}", err=True)
    append_events(path, [StateEvent(a.time_s, a.node, kind, a.ok, a.error) for a in actions])
    log.info(
        "power %s %s: %d ok, %d failed (%s)",
        event,
        ",".join(nodes),
        len(actions) - len(failed),
        len(failed),
        path,
    )
    if failed:
        ctx.exit(1)


@power_group.command(
    "suspend",
    help="Slurm's SuspendProgram: for each node of the HOSTLIST run power.suspend_command (an argv with "
    "{node}, no shell) and log a suspend event to power.state_log. Exits 1 naming each node whose command "
    "failed; Slurm then handles the node. Jobs are never touched.",
)
@click.argument("hostlists", nargs=-1, required=True, metavar="HOSTLIST...")
@click.option("--debug", is_flag=True, help="Echo Slurm commands and their raw output on stderr.")
@click.pass_context
def suspend_cmd(ctx: click.Context, hostlists: tuple[str, ...], debug: bool) -> None:
    _power(ctx, "suspend", hostlists, debug)


@power_group.command(
    "resume",
    help="Slurm's ResumeProgram: for each node of the HOSTLIST run power.resume_command (an argv with "
    "{node}, no shell) and log a resume event to power.state_log. Exits 1 naming each node whose command "
    "failed; Slurm marks a node that does not register within ResumeTimeout DOWN and requeues its jobs.",
)
@click.argument("hostlists", nargs=-1, required=True, metavar="HOSTLIST...")
@click.option("--debug", is_flag=True, help="Echo Slurm commands and their raw output on stderr.")
@click.pass_context
def resume_cmd(ctx: click.Context, hostlists: tuple[str, ...], debug: bool) -> None:
    _power(ctx, "resume", hostlists, debug)


# ---- restore-caps ------------------------------------------------------------------------------------


@power_group.command(
    "restore-caps",
    help="Put back the GPU power limits that jobs' steps set on this host and that no live step holds any "
    "more (an agent killed, slurmd or the node restarted, with no next job to repair it): every ledger under "
    "SPOOL/power-limits written on this host whose agents are all gone. Changes nothing while a step of the "
    'job runs. Run as root from a timer, slurmd\'s start and/or an Epilog (docs/spank.md "GPU power caps"). '
    "Prints each ledger restored; exits 1 when a limit could not be put back (kept for the next run).",
)
@click.option("--spool", type=click.Path(file_okay=False), default=None, help="Spool (default: spank.spool).")
@click.pass_context
def restore_caps_cmd(ctx: click.Context, spool: str | None) -> None:
    cfg = load_ctx_config(ctx)
    spool_dir = Path(spool or cfg.get("spank.spool"))
    folder = spool_dir / LEDGER_DIR
    if folder.exists() and not os.access(folder, os.R_OK | os.X_OK):
        raise EaslurmError(f"{folder}: not readable: power restore-caps runs as root")
    stale = stale_ledgers(spool_dir)
    if not stale:  # nothing capped here: NVML is not even loaded (nodes without GPUs)
        return
    module = cfg.get("profiler.nvml_module")
    try:
        nvml = load_nvml(module)
    except Exception as exc:
        raise EaslurmError(
            f"profiler.nvml_module {module}: NVML not loaded ({exc}); {len(stale)} caps left"
        ) from exc
    try:
        restored = restore_stale(nvml, spool_dir)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    for path in restored:
        click.echo(f"restored {path}")
    left = [p for p in stale if p not in restored and p.exists()]
    for path in left:
        click.echo(f"easlurm: error: power restore-caps: {path}: limits not all restored (kept)", err=True)
    if left:
        ctx.exit(1)


# ---- report ------------------------------------------------------------------------------------------


def node_report(
    cfg: Any, starttime: str, endtime: str, debug: bool = False
) -> tuple[list[Any], float, float, Path, int, list[str]]:
    """(rows, start_s, end_s, log path, unreadable lines, notes) of the power-state log over a period,
    with each node's draw from power.node_idle_w/off_w or, where unset, the estimates by its GPUs (asked
    of Slurm; the GPUs' idle draw from the catalogue)."""
    now = time.time()
    start_s = parse_period_time(starttime, now, "-S/--starttime")
    end_s = min(parse_period_time(endtime, now, "-E/--endtime"), now)
    path = state_log_path(cfg)
    events, skipped = read_events(path)
    idle_w, off_w = cfg.get("power.node_idle_w"), cfg.get("power.node_off_w")
    names = sorted({e.node for e in events})
    notes = [f"Power-state log: {path}" + ("" if events else " (no events: no node was powered down)")]
    if skipped:
        notes.append(f"{skipped} unreadable lines of the log skipped.")
    draw: dict[str, NodeDraw | None]
    if idle_w is not None and off_w is not None:
        if off_w > idle_w:
            raise ConfigError(f"power.node_off_w ({off_w:g} W) is more than power.node_idle_w ({idle_w:g} W)")
        draw = {n: NodeDraw(idle_w, off_w) for n in names}
    else:
        hardware = _node_hardware(cfg, debug) if names else {}
        draw = dict(node_draw(hardware, idle_w, off_w, "power.node_idle_w/power.node_off_w"))
        unknown = [n for n in names if n not in draw]
        if unknown:
            notes.append(
                f"Nodes unknown to Slurm ({', '.join(unknown)}): no energy; set power.node_idle_w and "
                "power.node_off_w."
            )
        if hardware:
            notes.append(_ESTIMATE_NOTE)
    rows = node_power(events, start_s, end_s, draw)
    return rows, start_s, end_s, path, skipped, notes


def _node_hardware(cfg: Any, debug: bool) -> dict[str, tuple[int, float | None]]:
    """{node: (GPUs, one idle GPU's W or None)} from Slurm's node list and the GPU catalogue; {} when
    Slurm cannot tell."""
    from easlurm.model.build import apply_oracle_config  # here: numpy; keeps suspend/resume light

    client = CliSchedClient(debug=debug, echo=lambda msg: click.echo(msg, err=True))
    try:
        nodes = client.nodes()
    except EaslurmError as exc:
        log.warning("node list: %s", exc)
        return {}
    catalogue = apply_oracle_config(cfg)
    out: dict[str, tuple[int, float | None]] = {}
    for n in nodes:
        t = n.gpu_type
        gpu_idle = float(catalogue.get(t).idle_w) if t and t in catalogue else None
        out[n.name] = (n.total_gpus, gpu_idle)
    return out


@power_group.command(
    "report",
    help="Each node's power saving over a period, from the power-state log: time powered down (OffTime), "
    "power-downs (Cycles), the shortest time between two (MinCycleGap), energy drawn while off (OffPower x "
    "OffTime) and energy avoided against idling ((IdlePower - OffPower) x OffTime). The same table is "
    "`easlurm report --by node`.",
)
@click.option("-S", "--starttime", default="now-7days", show_default=True, help="Period start (as sacct -S).")
@click.option("-E", "--endtime", default="now", show_default=True, help="Period end (as sacct -E).")
@output_options(json_help="One JSON document (SI units in key names).")
@click.option("--debug", is_flag=True, help="Echo Slurm commands and their raw output on stderr.")
@click.option("--helpformat", is_flag=True, help="List the columns and exit.")
@click.pass_context
def report_cmd(
    ctx: click.Context,
    starttime: str,
    endtime: str,
    fmt: str | None,
    parsable: bool,
    noheader: bool,
    as_json: bool,
    debug: bool,
    helpformat: bool,
) -> None:
    names = [name for name, _ in COLUMNS]
    if helpformat:
        click.echo(" ".join(names))
        return
    if as_json and (parsable or fmt):
        raise ConfigError("--json takes no -P or --format")
    columns = select_columns(fmt, names, names)
    cfg = load_ctx_config(ctx)
    rows, start_s, end_s, path, skipped, notes = node_report(cfg, starttime, endtime, debug)
    if as_json:
        click.echo(render_json(rows, start_s, end_s, path, skipped))
        return
    delimited = parsable
    _, cells = table_rows(rows, parsable=delimited, with_total=not delimited)
    text = render_table(columns, cells, parsable=delimited, header=not noheader)
    if text:
        click.echo(text)
    if not delimited and not noheader:
        for note in notes:
            click.echo(note)
