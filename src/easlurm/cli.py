"""The `easlurm` command: a click group whose subcommands are imported only when run, so --help is instant."""

from __future__ import annotations

import importlib
import logging
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from easlurm.config import load_config
from easlurm.errors import ConfigError, EaslurmError
from easlurm.units import MAX_INT

#: name -> ("module:attribute", one-line help). Each subsystem owns its command module; a command is
#: listed here only once it works.
COMMANDS: dict[str, tuple[str, str]] = {
    "profile": (
        "easlurm.energy.cli:profile_cmd",
        "Run a command under the energy profiler (GPU, CPU, DRAM).",
    ),
    "config": (
        "easlurm.config_cli:config_cmd",
        "Print the effective configuration and where each value came from.",
    ),
    "sim": ("easlurm.sim.cli:sim_group", "Simulate scheduling policies on a virtual GPU cluster."),
    "schedd": (
        "easlurm.priority.schedd_cli:schedd_cmd",
        "Scheduler daemon: drive Slurm with an energy-aware policy.",
    ),
    "predict": ("easlurm.model.cli:predict_cmd", "Predict step time, power, energy and EDP per placement."),
    "model": ("easlurm.model.cli:model_group", "The analytical oracle: calibrate it, list models and GPUs."),
    "sacct": (
        "easlurm.accounting.sacct_cli:sacct_cmd",
        "sacct with per-step GPU/CPU/DRAM energy (--energy-profile jobs).",
    ),
    "seff": (
        "easlurm.accounting.seff_cli:seff_cmd",
        "A finished job's energy card: devices, power vs limits, requeues, idle GPUs, the oracle's what-if.",
    ),
    "report": (
        "easlurm.accounting.report_cli:report_cmd",
        "Energy over a period by user, account, partition or GPU type (kWh, GPU-hours, CO2, plot).",
    ),
    "mail": (
        "easlurm.accounting.mail_cli:mail_group",
        "The job-end card by mail: Slurm's MailProg queues, one throttled drain sends each job's seff card.",
    ),
    "metrics": (
        "easlurm.accounting.metrics_cli:metrics_group",
        "Per-job GPU metrics of running jobs for Prometheus: serve the node agents' files (docs/metrics.md).",
    ),
    "power": (
        "easlurm.accounting.power_cli:power_group",
        "Slurm's power saving: SuspendProgram/ResumeProgram, each node's time and energy powered down, and "
        "restoring GPU power caps no live step holds.",
    ),
    "accounting": (
        "easlurm.accounting.republish_cli:accounting_group",
        "Admin: republish energy records of cancelled and timed-out jobs into sacct.",
    ),
}


def int_range(min: int = 0, max: int = MAX_INT) -> click.IntRange:
    """The type of every integer flag: bounded on both sides, so `--batch 99999999999999999999` is refused."""
    return click.IntRange(min, max)


def text_list(text: str) -> list[str]:
    """A comma list of names, blanks dropped (e.g. --model resnet50,bert-base)."""
    return [v.strip() for v in text.split(",") if v.strip()]


def int_list(text: str, option: str) -> list[int]:
    """A comma list of positive integers for OPTION (e.g. --gpus 1,2,4)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option}: expected a comma list of integers, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > MAX_INT:
        raise ConfigError(f"{option}: expected integers between 1 and {MAX_INT}, got {text!r}")
    return values


F = TypeVar("F", bound=Callable[..., Any])


def output_options(
    columns: Sequence[str] | None = None,
    *,
    table: bool = True,
    json_help: str = "One JSON document.",
    format_help: str | None = None,
) -> Callable[[F], F]:
    """The output options of every command, spelled once with sacct's letters: `--json` (keyword `as_json`)
    and, for a command that prints a table, `-o/--format` (`fmt`; COLUMNS listed in its help),
    `-P/--parsable2` (`parsable`) and `-n/--noheader` (`noheader`). `format_help` replaces the -o help where a
    command's columns take more than names (sacct's NAME%N widths)."""
    options = [click.option("--json", "as_json", is_flag=True, help=json_help)]
    if table:
        listed = f": {','.join(columns)}" if columns else " (see --helpformat)"
        options = [
            click.option(
                "-o", "--format", "fmt", default=None, help=format_help or f"Columns, a comma list{listed}."
            ),
            click.option(
                "-P",
                "--parsable2",
                "parsable",
                is_flag=True,
                help="'|'-delimited, none after the last field (sacct -P).",
            ),
            click.option("-n", "--noheader", is_flag=True, help="No header line (sacct -n)."),
            *options,
        ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


class FiniteFloat(click.FloatRange):
    """A float flag in a range that also refuses nan and inf (which compare false with any bound)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand is invoked.

    `lazy_commands` maps name -> ("module:attribute", one-line help); subgroups (`easlurm sim ...`)
    use the same class with their own mapping.
    """

    def __init__(self, *args: Any, lazy_commands: dict[str, tuple[str, str]] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = COMMANDS if lazy_commands is None else lazy_commands

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # Remember whether the subcommand only asks for help, so the group callback skips its checks.
        before_dashes = args[: args.index("--")] if "--" in args else args
        ctx.meta["easlurm.help"] = bool({"-h", "--help"} & set(before_dashes))
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy_commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.lazy_commands.get(cmd_name)
        if entry is None:
            return None
        module_name, _, attr = entry[0].partition(":")
        cmd = getattr(importlib.import_module(module_name), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.lazy_commands[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="easlurm", prog_name="easlurm")
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Configuration file (overrides /etc/easlurm and the user file).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """easlurm: energy-aware Slurm."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    if config_path is not None and not ctx.resilient_parsing and not ctx.meta.get("easlurm.help"):
        load_config(config_path)  # a bad -c file fails every command before it reads or writes anything


def load_ctx_config(
    ctx: click.Context,
    overrides: dict[str, dict[str, Any]] | None = None,
    flag_names: dict[str, str] | None = None,
) -> Any:
    """The effective configuration for a subcommand (the -c file, environment, then the command's flags).

    `flag_names` maps `section.key` to the flag that overrides it, so a value out of range names the flag."""
    path = (ctx.find_root().obj or {}).get("config_path")
    return load_config(path, overrides=overrides, flag_names=flag_names)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: project errors become one line on stderr and exit status 2."""
    try:
        rv = cli.main(args=argv, prog_name="easlurm", standalone_mode=False)
    except EaslurmError as exc:
        click.echo(f"easlurm: error: {exc}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("easlurm: aborted", err=True)
        return 130
    except click.UsageError as exc:  # a missing file or option: one line like every other error
        where = f"; see '{exc.ctx.command_path} -h'" if exc.ctx is not None else ""
        click.echo(f"easlurm: error: {exc.format_message()}{where}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"easlurm: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except BrokenPipeError:
        return 0
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
