"""`easlurm report`: energy over a period by user, account, partition or GPU type, as a table, Markdown,
CSV or JSON, with optional CO2 and a PNG plot."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from easlurm.accounting.notes import NoteRules
from easlurm.accounting.power_cli import node_report
from easlurm.accounting.power_state import render_csv as render_nodes_csv
from easlurm.accounting.power_state import render_json as render_nodes_json
from easlurm.accounting.power_state import table_rows as node_table_rows
from easlurm.accounting.report import (
    GridIntensity,
    GroupBy,
    GroupTotals,
    RunEnergy,
    aggregate,
    job_runs,
    notes_rows,
    parse_intensity_csv,
    plot_report,
    render_csv,
    render_json,
    render_markdown,
    table_rows,
)
from easlurm.accounting.sacct_rows import build_rows, selection_argv
from easlurm.accounting.seff_cli import gpu_limits, node_gpu_types
from easlurm.cli import load_ctx_config, output_options
from easlurm.errors import ConfigError
from easlurm.inputs import MAX_YAML_BYTES, read_text
from easlurm.slurm.sacct_jobs import FIELDS, job_of_row
from easlurm.slurm.sched_client import CliSchedClient
from easlurm.table import render_table


@click.command(
    "report",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Energy of the jobs that ran in a period, grouped by user, account, partition or GPU type: kWh, "
    "GPU-hours, mean power, kWh per GPU-hour, energy lost to requeues and to idle allocated GPUs, and CO2 "
    "with a grid intensity (g/kWh, or a CSV time series; report.grid_intensity_* in the configuration). "
    "Every run of a requeued job counts; jobs without records count in jobs and GPU-hours only. "
    "--by node: each node's time powered down by Slurm's power saving, its power cycles and the energy "
    "drawn off and avoided (as `easlurm power report`). --notes: the efficiency notes the site's rules "
    "(notes.*) find in each group's runs, with the energy of their idle allocated GPUs.",
)
@click.option("-S", "--starttime", default="now-7days", show_default=True, help="Period start (sacct -S).")
@click.option("-E", "--endtime", default="now", show_default=True, help="Period end (sacct -E).")
@click.option(
    "--by",
    "by",
    type=click.Choice(["user", "account", "partition", "gpu-type", "node"]),
    default="user",
    show_default=True,
    help="What a row is (node: power saving per node, from the power-state log).",
)
@click.option("-u", "--user", help="Only these users (sacct -u); default all users.")
@click.option("-A", "--account", help="Only these accounts (sacct -A).")
@click.option("-r", "--partition", help="Only these partitions (sacct -r).")
@click.option("-j", "--jobs", help="Only these jobs (sacct -j).")
@click.option("--co2", "co2_g_per_kwh", type=float, default=None, help="Grid intensity, g CO2 per kWh.")
@click.option(
    "--co2-csv",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Grid intensity time series: CSV of time,g_per_kwh (each value holds from its time on).",
)
@click.option(
    "--notes",
    "with_notes",
    is_flag=True,
    help="Also the efficiency notes per group: low GPU utilisation, power limit never approached, memory "
    "mostly unused, idle allocated GPUs (the rules and thresholds in notes.*; no oracle here).",
)
@click.option("--markdown", "as_markdown", is_flag=True, help="A Markdown document.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV, SI units (J, W, g).")
@output_options(table=False, json_help="One JSON document (SI units in key names).")
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write a PNG bar plot."
)
@click.option("--spool", type=click.Path(file_okay=False), default=None, help="Also read spool records.")
@click.option("--no-spool", is_flag=True, help="Use AdminComment only.")
@click.option("--debug", is_flag=True, help="Echo Slurm commands and their raw output on stderr.")
@click.pass_context
def report_cmd(
    ctx: click.Context,
    starttime: str,
    endtime: str,
    by: str,
    user: str | None,
    account: str | None,
    partition: str | None,
    jobs: str | None,
    co2_g_per_kwh: float | None,
    co2_csv: str | None,
    with_notes: bool,
    as_markdown: bool,
    as_csv: bool,
    as_json: bool,
    plot_path: str | None,
    spool: str | None,
    no_spool: bool,
    debug: bool,
) -> None:
    if sum((as_markdown, as_csv, as_json)) > 1:
        raise ConfigError("--markdown, --csv and --json are exclusive")
    if co2_g_per_kwh is not None and co2_csv is not None:
        raise ConfigError("--co2 and --co2-csv are exclusive")
    if with_notes and (as_csv or by == "node"):
        raise ConfigError(f"--notes: not with {'--csv' if as_csv else '--by node'} (--json carries them)")
    if by == "node":
        job_flags = {"-u": user, "-A": account, "-r": partition, "-j": jobs, "--co2": co2_g_per_kwh}
        job_flags.update({"--co2-csv": co2_csv, "--plot": plot_path, "--spool": spool})
        given = [flag for flag, value in job_flags.items() if value is not None]
        if given:
            raise ConfigError(f"--by node reports nodes, not jobs: {', '.join(given)} do not apply")
        _node_section(ctx, starttime, endtime, as_markdown, as_csv, as_json, debug)
        return
    if plot_path:
        check_plot_path(Path(plot_path))
    cfg = load_ctx_config(ctx)
    intensity, source = _grid_intensity(cfg, co2_g_per_kwh, co2_csv)
    client = CliSchedClient(debug=debug, echo=lambda msg: click.echo(msg, err=True))
    selection = {"starttime": starttime, "endtime": endtime, "user": user, "allusers": not user}
    selection.update({"account": account, "partition": partition, "jobs": jobs, "duplicates": True})
    spool_dir = None if no_spool else Path(spool or cfg.get("spank.spool"))
    runs = _job_runs(cfg, client, selection, spool_dir, NoteRules.from_config(cfg) if with_notes else None)
    group_by = GroupBy(by)
    groups, total = aggregate(runs, group_by, intensity)
    title = f"easlurm energy report by {by}, {starttime} to {endtime}"
    notes = [f"Grid intensity: {source}."] if source else []
    if total.runs > total.profiled_runs:
        notes.append(
            f"{total.runs - total.profiled_runs} of {total.runs} runs carry no energy records (not submitted "
            "with --energy-profile): counted in jobs and GPU-hours only."
        )
    notes.extend(record_notes(runs))
    plot_error = None
    if plot_path:
        try:
            out = plot_report(groups, Path(plot_path), title)
        except OSError as exc:  # found only now (the check before the work passed): the table still prints
            plot_error = f"--plot {plot_path}: {exc.strerror or exc}"
        else:
            if out is not None:
                notes.append(f"Plot: {out}")
    fmt = "json" if as_json else "csv" if as_csv else "markdown" if as_markdown else "table"
    period: dict[str, Any] = {"start": starttime, "end": endtime}
    _print_report(
        fmt, group_by, period, (groups, total), source, title, notes, intensity is not None, with_notes
    )
    if plot_error is not None:
        raise ConfigError(plot_error)


def _print_report(
    fmt: str,
    group_by: GroupBy,
    period: dict[str, Any],
    totals: tuple[list[GroupTotals], GroupTotals],
    source: str | None,
    title: str,
    notes: list[str],
    co2: bool,
    with_notes: bool = False,
) -> None:
    """The report on stdout as `fmt` (json, csv, markdown or table), with the efficiency notes per group
    after it (`with_notes`)."""
    groups, total = totals
    if fmt == "json":
        click.echo(render_json(group_by, period, groups, total, source, with_notes))
        return
    if fmt == "csv":
        click.echo(render_csv(groups, total), nl=False)
        return
    header, cells = table_rows(groups, total, co2)
    note_header, note_cells = notes_rows(groups, total)
    heading = f"Efficiency notes by {group_by.value} (rules and thresholds: notes.*)"
    if fmt == "markdown":
        click.echo(render_markdown(title, header, cells, notes), nl=False)
        if with_notes:
            click.echo(
                "\n" + render_markdown(heading, note_header, note_cells, []).removeprefix("# "), nl=False
            )
        return
    click.echo(render_table(header, [dict(zip(header, c)) for c in cells]))
    for n in notes:
        click.echo(n)
    if with_notes:
        click.echo(f"\n{heading}:")
        if note_cells:
            click.echo(render_table(note_header, [dict(zip(note_header, c)) for c in note_cells]))
        else:
            click.echo("none: no run of the period meets a rule")


def check_plot_path(path: Path) -> None:
    """Refuse, before any work, a --plot file that cannot be written: a file is created and removed in
    its folder (os.access says yes to root on /proc and on some read-only mounts)."""
    if path.is_dir():
        raise ConfigError(f"--plot {path}: is a directory")
    folder = path.absolute().parent
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".easlurm-plot-", suffix=".tmp"):
            pass
    except OSError as exc:
        raise ConfigError(f"--plot {path}: cannot write in {folder} ({exc.strerror or exc})") from None


def record_notes(runs: Sequence[RunEnergy]) -> list[str]:
    """What the energy leaves out: runs with a node's energy missing, node records set aside as impossible."""
    notes = []
    partial = [f"{r.job_id}" + (f"+r{r.run}" if r.run else "") for r in runs if r.partial]
    if partial:
        notes.append(
            f"partial: {len(partial)} run(s) lack some node's energy (missing, failed or invalid records): "
            + ",".join(partial[:10])
            + (" ..." if len(partial) > 10 else "")
        )
    for r in runs:
        notes.extend(f"invalid: job {r.job_id} step {why}; left out of the totals" for why in r.invalid)
    return notes


def _grid_intensity(
    cfg: Any, co2_g_per_kwh: float | None, co2_csv: str | None
) -> tuple[GridIntensity | None, str | None]:
    """The grid intensity and where it came from (None, None: no CO2 column): --co2/--co2-csv, else the
    configuration's report.grid_intensity_csv, else its report.grid_intensity_g_per_kwh."""
    csv_path = co2_csv or (None if co2_g_per_kwh is not None else cfg.get("report.grid_intensity_csv"))
    g_per_kwh = co2_g_per_kwh if co2_g_per_kwh is not None else cfg.get("report.grid_intensity_g_per_kwh")
    if csv_path:
        # a regular UTF-8 file of at most 16 MiB: a FIFO hung the report, a binary file was a traceback
        text = read_text(csv_path, "grid intensity CSV", ConfigError, MAX_YAML_BYTES)
        return parse_intensity_csv(text, str(csv_path)), f"csv:{csv_path}"
    if g_per_kwh is not None:
        try:
            return GridIntensity.constant(float(g_per_kwh)), f"{float(g_per_kwh):g} g/kWh"
        except (TypeError, ValueError):
            raise ConfigError(f"grid intensity: {g_per_kwh!r} is not a number of g/kWh") from None
    return None, None


def _job_runs(
    cfg: Any, client: Any, selection: dict[str, Any], spool_dir: Path | None, rules: NoteRules | None = None
) -> list[Any]:
    """Every run of the selected jobs (sacct, with the spool's records for jobs without AdminComment),
    each with its GPU type's limits; shards name no GPU type in AllocTRES, so their nodes' GRES is asked
    for only then."""
    from easlurm.model.build import apply_oracle_config  # here: numpy

    rows = client.sacct(selection_argv(selection), list(FIELDS))
    _, records = build_rows(rows, None, spool_dir, duplicates=True)
    accounted = [job_of_row(r, strict=False) for r in rows]
    by_node = node_gpu_types(client) if any(j.shards and not j.alloc_gpus[1] for j in accounted) else {}
    types = sorted({j.alloc_gpus[1] or "" for j in accounted} | {t for t in by_node.values() if t})
    return job_runs(rows, records, gpu_limits(apply_oracle_config(cfg), types), by_node, rules)


def _node_section(
    ctx: click.Context,
    starttime: str,
    endtime: str,
    as_markdown: bool,
    as_csv: bool,
    as_json: bool,
    debug: bool,
) -> None:
    """`--by node`: the power-state log's table (docs/power-saving.md), in the report's formats."""
    cfg = load_ctx_config(ctx)
    rows, start_s, end_s, path, skipped, notes = node_report(cfg, starttime, endtime, debug)
    if as_json:
        click.echo(render_nodes_json(rows, start_s, end_s, path, skipped))
        return
    if as_csv:
        click.echo(render_nodes_csv(rows), nl=False)
        return
    header, cells = node_table_rows(rows, parsable=False, with_total=True)
    if as_markdown:
        title = f"easlurm power saving by node, {starttime} to {endtime}"
        click.echo(render_markdown(title, header, [[c[h] for h in header] for c in cells], notes), nl=False)
        return
    if cells:
        click.echo(render_table(header, cells))
    for note in notes:
        click.echo(note)
