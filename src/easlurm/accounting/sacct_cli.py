"""`easlurm sacct`: the real sacct plus per-step GPU/CPU/DRAM energy decoded from easlurm's AdminComment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from easlurm.accounting.sacct_rows import (
    DEFAULT_COLUMNS,
    EASLURM_COLUMNS,
    ENERGY_COLUMNS,
    RAW_COLUMNS,
    build_rows,
    format_cell,
    render_json,
    row_value,
    selection_argv,
)
from easlurm.cli import load_ctx_config, output_options
from easlurm.errors import ConfigError
from easlurm.slurm.client import CliSlurmClient
from easlurm.table import delimiter_clashes, parse_format, render_table
from easlurm.units import si_prefix


@click.command(
    "sacct",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Run sacct and show easlurm's per-step energy (GPUEnergy, CPUEnergy, DRAMEnergy, TotalEnergy, "
    "AvgPower, EDP, EnergyFlags, and each as a plain number: GPUEnergyRaw ...) next to any sacct field. "
    "Jobs submitted with --energy-profile carry the records; a job (allocation) row shows the job's "
    "total (its batch step plus srun steps' other nodes) and RequeueEnergy, the energy of its earlier "
    "runs. Options shared with sacct behave as sacct's; -D shows every run of a requeued job.",
)
@click.option("-j", "--jobs", help="Job(s) to show: comma list, as sacct -j.")
@click.option("-u", "--user", help="User(s), as sacct -u.")
@click.option("-a", "--allusers", is_flag=True, help="All users' jobs (sacct -a).")
@click.option("-A", "--account", help="Account(s) (sacct -A).")
@click.option("-S", "--starttime", help="Window start (sacct -S).")
@click.option("-E", "--endtime", help="Window end (sacct -E).")
@click.option("-s", "--state", help="State(s) (sacct -s).")
@click.option("-r", "--partition", help="Partition(s) (sacct -r).")
@click.option("-N", "--nodelist", help="Node list (sacct -N).")
@click.option("--name", help="Job name(s) (sacct --name).")
@click.option("-q", "--qos", help="QOS (sacct -q).")
@click.option(
    "-X",
    "--allocations",
    is_flag=True,
    help="Only job (allocation) rows, no step rows (sacct -X); each carries the job's total energy.",
)
@click.option(
    "-D",
    "--duplicates",
    is_flag=True,
    help="Every run of a requeued job, each with its own energy (sacct -D).",
)
@click.option(
    "--detail",
    type=click.Choice(["node", "device"]),
    default=None,
    help="Add one row per node (and per device) under each profiled step.",
)
@click.option(
    "-p", "--parsable", "trailing", is_flag=True, help="'|'-delimited, a '|' after each field (sacct -p)."
)
@click.option(
    "--delimiter",
    default="|",
    show_default=True,
    help="The field delimiter of -p/-P (sacct --delimiter). A value holding it is printed with '/' "
    "in its place, and said so on stderr (sacct prints it unchanged, so its line has extra fields).",
)
@click.option(
    "--units",
    type=click.Choice(["K", "M", "G", "T", "P"], case_sensitive=False),
    default=None,
    help="Show sacct's sizes and easlurm's energy, power and EDP in this unit (sacct --units; K is kJ, kW).",
)
@click.option(
    "--noconvert",
    is_flag=True,
    help="No unit conversion (sacct --noconvert): energy in J, power in W, EDP in J*s.",
)
@output_options(
    format_help="Comma list of columns: any sacct field and the energy columns; NAME%N sets a width as sacct "
    "(N > 0 right-aligned, N < 0 left-aligned, longer values cut with '+').",
    json_help="One JSON document: numbers in the unit their key names (elapsed_s, total_energy_j), full records.",
)
@click.option(
    "--spool",
    type=click.Path(file_okay=False),
    default=None,
    help="Also read step records from this spool (default: spank.spool) for jobs without AdminComment "
    "records, e.g. cancelled or timed out.",
)
@click.option("--no-spool", is_flag=True, help="Use AdminComment only.")
@click.option("--debug", is_flag=True, help="Echo the sacct command and its raw output on stderr.")
@click.option("--helpformat", is_flag=True, help="List the columns and exit.")
@click.pass_context
def sacct_cmd(
    ctx: click.Context,
    fmt: str | None,
    detail: str | None,
    trailing: bool,
    parsable: bool,
    delimiter: str,
    noheader: bool,
    as_json: bool,
    spool: str | None,
    no_spool: bool,
    debug: bool,
    helpformat: bool,
    **selection: Any,
) -> None:
    client = CliSlurmClient(debug=debug, echo=lambda msg: click.echo(msg, err=True))
    if helpformat:
        _help_format(client)
        return
    if as_json and (trailing or parsable):
        raise ConfigError("--json and -p/-P are exclusive")
    if not delimiter:
        raise ConfigError("--delimiter: must not be empty")
    columns, widths = _columns(client, fmt, detail)
    native = [c for c in columns if c not in EASLURM_COLUMNS]
    fields = list(dict.fromkeys(["JobIDRaw", "JobID", "AdminComment", *native, "State"]))
    if as_json:  # exact numbers, whatever --units says
        selection = {**selection, "units": None, "noconvert": True}
    # every run, whatever -D says: a row's run (and its records) is known from the order of all runs
    sacct_rows = client.sacct(selection_argv({**selection, "duplicates": True}), fields)
    spool_dir = None
    if not no_spool:
        spool_dir = Path(spool or load_ctx_config(ctx).get("spank.spool"))
    rows, _ = build_rows(sacct_rows, detail, spool_dir, duplicates=bool(selection.get("duplicates")))
    if as_json:  # every energy column, whatever --format says: JSON readers pick keys
        click.echo(
            render_json(
                [*native, *(c for c in ENERGY_COLUMNS if c in columns or c not in ("Node", "Device"))], rows
            )
        )
        return
    prefix = "" if selection.get("noconvert") else None
    if selection.get("units"):
        prefix = si_prefix(selection["units"])
    shown = [{c: format_cell(c, row_value(row, c), prefix) for c in columns} for row in rows]
    delimited = trailing or parsable
    if delimited:
        clashes = delimiter_clashes(columns, shown, delimiter)
        if clashes:
            click.echo(
                f"easlurm: warning: values of {', '.join(clashes)} hold the delimiter {delimiter!r}; "
                "shown with '/' in its place (use --delimiter or --json)",
                err=True,
            )
    text = render_table(
        columns,
        shown,
        parsable=delimited,
        header=not noheader,
        delimiter=delimiter,
        trailing=trailing and not parsable,
        widths=widths,
    )
    if text:
        click.echo(text)


def _help_format(client: CliSlurmClient) -> None:
    """--helpformat: the running Slurm's sacct fields, then easlurm's columns with what each holds."""
    click.echo(" ".join(client.sacct_fields()))
    for name, (key, what) in ENERGY_COLUMNS.items():
        click.echo(f"{name:15} {key:17} {what}")
    for name, of in RAW_COLUMNS.items():
        click.echo(f"{name:15} {'':17} {of} as a plain number in SI units (J, W, J*s)")


def _columns(
    client: CliSlurmClient, fmt: str | None, detail: str | None
) -> tuple[list[str], list[int | None]]:
    """The columns shown and their widths (None: fit the values): --format, checked against the running
    Slurm's own field list (each version adds and drops fields; asked only for a --format), else the
    default columns with Node (and Device) after the first where --detail adds those rows."""
    available = [*client.sacct_fields(), *EASLURM_COLUMNS] if fmt else list(EASLURM_COLUMNS)
    spec = parse_format(fmt, available, DEFAULT_COLUMNS)
    columns = [c.name for c in spec]
    widths = [c.width for c in spec]
    if detail and not fmt:
        extra = ["Node", "Device"] if detail == "device" else ["Node"]
        columns[1:1] = extra
        widths[1:1] = [None] * len(extra)
    return columns, widths
