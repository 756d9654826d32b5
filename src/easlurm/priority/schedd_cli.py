"""`easlurm schedd`: run the scheduler daemon next to slurmctld (or one cycle with --once)."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from easlurm.cli import load_ctx_config, output_options
from easlurm.errors import ConfigError
from easlurm.files import check_writable
from easlurm.model.build import apply_oracle_config
from easlurm.model.cli import HARDWARE_OPTION
from easlurm.priority.daemon import Daemon, DaemonConfig, cycle_log
from easlurm.priority.metrics import Metrics, check_port
from easlurm.priority.report import render_report
from easlurm.slurm import sched_client
from easlurm.slurm.hostlist import expand_hostlist
from easlurm.units import parse_duration_s, parse_power_w

log = logging.getLogger(__name__)

#: The policies an operator can run (the -rigid/-malleable variants are reachable by configuration).
CHOICES = ("zeus", "hades", "aurachronos", "charon", "pollux", "themis", "chronos", "slurm", "static-cap")


def scheduler_env_dir(spool: str, env_dir: str | None, dry_run: bool) -> Path:
    """Where the hint files go: sched.env_dir, else `<spank.spool>/sched` (what the plugin reads). Only the
    last component is ever created: a spool that does not exist means the setting does not match this
    host's plugin (e.g. the default /var/spool/easlurm next to the local cluster), and guessing would
    scatter directories over the host where no job reads them."""
    path = Path(env_dir) if env_dir else Path(spool) / "sched"
    if dry_run or path.is_dir() or path.parent.is_dir():
        return path
    if env_dir:
        raise ConfigError(
            f"sched.env_dir: {path.parent} does not exist (set it to the plugin's <spool>/sched)"
        )
    raise ConfigError(
        f"spank.spool: {spool} does not exist (set it, or sched.env_dir, to the SPANK plugin's spool=; "
        'for the local cluster: eval "$(scripts/slurm-box env)")'
    )


@click.command("schedd")
@click.option(
    "--policy", type=str, default=None, help=f"Policy: {', '.join(CHOICES)} (default: sched.policy)."
)
@click.option(
    "--interval", type=str, default=None, help="Cycle interval, e.g. 10s (default: sched.interval_s)."
)
@click.option("--power-budget", type=str, default=None, help="Cluster GPU power budget, e.g. 4500W.")
@click.option("--dry-run", is_flag=True, help="Log every decision, change nothing.")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics on this port.",
)
@click.option(
    "--metrics-address",
    type=str,
    default=None,
    help="Address the metrics server listens on, e.g. 127.0.0.1 (default: sched.metrics_address, all).",
)
@click.option("--decision-log", type=click.Path(dir_okay=False), default=None, help="JSONL decision log.")
@click.option("--log-snapshots", is_flag=True, help="Also write each cycle's snapshot into the decision log.")
@click.option("--hold-ttl", type=str, default=None, help="A daemon hold expires after this (default 10min).")
@click.option(
    "--min-run-time",
    type=str,
    default=None,
    help="No job is preempted before it has run this long, e.g. 5min (default: sched.min_run_s).",
)
@click.option(
    "--state-save-dir", type=click.Path(file_okay=False), default=None, help="slurmctld StateSaveLocation."
)
@click.option("--only-names", type=str, default=None, help="Manage only jobs whose name starts with this.")
@click.option("--nodes", "only_nodes", type=str, default=None, help="Schedule only these nodes (comma list).")
@click.option("--once", is_flag=True, help="Run one cycle, print its decisions as a table, keep holds, exit.")
@output_options(table=False, json_help="With --once: print the cycle's report as JSON.")
@click.option("--debug", is_flag=True, help="Echo every Slurm command and its output on stderr.")
@HARDWARE_OPTION
@click.pass_context
def schedd_cmd(
    ctx: click.Context,
    hardware_path: str | None,
    policy: str | None,
    interval: str | None,
    power_budget: str | None,
    dry_run: bool,
    metrics_port: int | None,
    metrics_address: str | None,
    decision_log: str | None,
    log_snapshots: bool,
    hold_ttl: str | None,
    min_run_time: str | None,
    state_save_dir: str | None,
    only_names: str | None,
    only_nodes: str | None,
    once: bool,
    as_json: bool,
    debug: bool,
) -> None:
    """Drive Slurm with an energy-aware policy: order (SiteFactor), placement, power budget, preemption."""
    overrides: dict[str, Any] = {
        "policy": policy,
        "interval_s": parse_duration_s(interval, field="--interval") if interval else None,
        "power_budget_w": parse_power_w(power_budget, field="--power-budget") if power_budget else None,
        "metrics_port": metrics_port,
        "metrics_address": metrics_address,
        "decision_log": decision_log,
        "hold_ttl_s": parse_duration_s(hold_ttl, field="--hold-ttl") if hold_ttl else None,
        "min_run_s": parse_duration_s(min_run_time, field="--min-run-time") if min_run_time else None,
        "state_save_dir": state_save_dir,
    }
    cfg = load_ctx_config(
        ctx,
        {"sched": overrides},
        {
            "sched.interval_s": "--interval",
            "sched.hold_ttl_s": "--hold-ttl",
            "sched.min_run_s": "--min-run-time",
            "sched.metrics_port": "--metrics-port",
        },
    )
    apply_oracle_config(cfg, hardware_path)
    sched = cfg.section("sched")
    name = str(sched["policy"]).lower()
    if name.split("-")[0] not in CHOICES and not name.startswith("static-cap"):
        raise ConfigError(f"--policy: unknown policy {name!r} (known: {', '.join(CHOICES)})")
    client = sched_client.CliSchedClient(debug=debug, echo=lambda m: click.echo(m, err=True))
    if sched["state_save_dir"]:
        check_state_save_dir(str(sched["state_save_dir"]))
    if sched["decision_log"]:
        check_decision_log(Path(sched["decision_log"]))
    if only_nodes is not None:
        only_nodes = ",".join(check_nodes(only_nodes, [n.name for n in client.nodes()]))
    state_dir = sched["state_save_dir"] or client.state_save_location()
    env_dir = scheduler_env_dir(cfg.get("spank.spool"), sched["env_dir"], dry_run)
    scope: dict[str, Any] = {"log_snapshots": log_snapshots, "name_prefix": only_names}
    scope["nodes"] = tuple(n for n in only_nodes.split(",") if n) if only_nodes else None
    dcfg = daemon_config(sched, name, dry_run, env_dir, state_dir, scope)
    if sched["metrics_port"] is not None:
        check_port(
            sched["metrics_port"]
        )  # also with --once, which does not serve: a bad port is still an error
    metrics = Metrics(enabled=sched["metrics_port"] is not None or once)
    if sched["metrics_port"] is not None and not once:
        metrics.serve(int(sched["metrics_port"]), str(sched["metrics_address"] or "0.0.0.0"))
    daemon = Daemon(client, dcfg, metrics=metrics)
    if once:
        run_once(daemon, dry_run, log_snapshots, as_json)
        return
    run_loop(daemon, name)


def run_loop(daemon: Daemon, name: str) -> None:
    """Loop mode: cycle until SIGTERM/SIGINT, one INFO line per cycle (shown without -v)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    dcfg = daemon.cfg
    log.warning(
        "schedd: policy %s, every %gs%s%s, minimum run time %gs",
        name,
        dcfg.interval_s,
        ", dry run" if dcfg.dry_run else "",
        f", budget {dcfg.power_budget_w:g} W" if dcfg.power_budget_w else "",
        dcfg.min_run_s,
    )
    if cycle_log.getEffectiveLevel() > logging.INFO:
        cycle_log.setLevel(logging.INFO)
    daemon.run(stop)


def daemon_config(
    sched: dict[str, Any], policy: str, dry_run: bool, env_dir: Path, state_dir: Any, scope: dict[str, Any]
) -> DaemonConfig:
    """The daemon's settings from the effective `sched` section (flags already folded in) as numbers, and
    `scope`: the flags that are not settings (log_snapshots, name_prefix, nodes)."""
    return DaemonConfig(
        policy=policy,
        interval_s=float(sched["interval_s"]),
        power_budget_w=sched["power_budget_w"],
        dry_run=dry_run,
        hold_ttl_s=float(sched["hold_ttl_s"]),
        preempt_cooldown_s=float(sched["preempt_cooldown_s"]),
        min_run_s=float(sched["min_run_s"]),
        aging_weight=float(sched["aging_weight"]),
        max_slowdown=float(sched["max_slowdown"]),
        spread_slack=None if sched["spread_slack"] is None else float(sched["spread_slack"]),
        consolidate=bool(sched["consolidate"]),
        consolidation_slack=float(sched["consolidation_slack"]),
        min_off_s=float(sched["min_off_s"]),
        max_wake_wait_s=float(sched["max_wake_wait_s"]),
        decision_log=Path(sched["decision_log"]) if sched["decision_log"] else None,
        env_dir=env_dir,
        state_save_dir=state_dir,
        **scope,
    )


def run_once(daemon: Daemon, dry_run: bool, log_snapshots: bool, as_json: bool) -> None:
    """--once: one cycle, its decisions printed as a table (or JSON); exit status 1 when it failed."""
    report = daemon.cycle()
    doc = {"dry_run": dry_run, **report.to_dict(with_snapshot=log_snapshots)}
    click.echo(json.dumps(doc, indent=1) if as_json else render_report(doc))
    if report.error is not None:
        sys.exit(1)


def check_nodes(text: str, known: list[str]) -> list[str]:
    """`--nodes` (a comma list or hostlist) against the nodes Slurm knows: an unknown one is a typo that
    would leave the daemon scheduling nothing, so it is an error at start."""
    try:
        names = expand_hostlist(text)
    except ValueError as exc:
        raise ConfigError(f"--nodes: {exc}") from exc
    if not names:
        raise ConfigError("--nodes: no node given")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--nodes: unknown node(s) {', '.join(unknown)} (Slurm knows {', '.join(known)})")
    return names


def check_state_save_dir(path: str) -> None:
    """The job environments are read from StateSaveLocation: a missing directory is an error at start."""
    if not Path(path).is_dir():
        raise ConfigError(f"--state-save-dir: {path} is not a directory")


def check_decision_log(path: Path) -> None:
    """Try writing where the decision log goes (a temporary file created and removed, easlurm.files), without
    creating the log or its directory: a log that cannot be written is an error at start, not a traceback
    at the first cycle, and a start that fails later (Slurm unreachable) leaves nothing behind."""
    check_writable(path, "--decision-log")
