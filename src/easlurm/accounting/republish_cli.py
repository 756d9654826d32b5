"""`easlurm accounting republish`: put cancelled and timed-out jobs' energy records into sacct."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from easlurm.accounting.republish import Republisher, Status, run_until_settled, spool_candidates
from easlurm.cli import LazyGroup, load_ctx_config, output_options
from easlurm.errors import ConfigError
from easlurm.slurm import client as slurm_client
from easlurm.table import render_table
from easlurm.units import parse_duration_s

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "republish": (
        "easlurm.accounting.republish_cli:republish_cmd",
        "Write spool step records that sacct lacks (cancelled/timed-out jobs) into the database.",
    ),
}


@click.group("accounting", cls=LazyGroup, lazy_commands=SUBCOMMANDS)
def accounting_group() -> None:
    """Administer easlurm's energy records in Slurm accounting (run as a Slurm operator)."""


@click.command("republish")
@click.option("-j", "--jobs", help="Job id(s), comma list (default: every job in the spool within --since).")
@click.option("--since", default="1d", show_default=True, help="Spool job directories modified within this.")
@click.option("--spool", type=click.Path(file_okay=False), default=None, help="Spool (default: spank.spool).")
@click.option(
    "--wait",
    default="0s",
    show_default=True,
    help="Retry deferred jobs (slurmctld still holds its copy) until they settle or this passes, "
    "e.g. 120s from EpilogSlurmctld (MinJobAge + a margin).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@output_options(table=False)
@click.option("-v", "--verbose", is_flag=True, help="Also list jobs that were already up to date.")
@click.option("--debug", is_flag=True, help="Echo every Slurm command and its output on stderr.")
@click.pass_context
def republish_cmd(
    ctx: click.Context,
    jobs: str | None,
    since: str,
    spool: str | None,
    wait: str,
    dry_run: bool,
    as_json: bool,
    verbose: bool,
    debug: bool,
) -> None:
    """One writer per job (the agents' publication lock), idempotent, verified with sacct --json.
    Exit status 1 when a job failed; deferred jobs are not failures (run again later, e.g. from cron)."""
    cfg = load_ctx_config(ctx)
    if cfg.get("spank.store") != "admin_comment":
        raise ConfigError(
            "spank.store is spool: records stay in the spool; there is no AdminComment to republish"
        )
    spool_dir = Path(spool or cfg.get("spank.spool"))
    wait_s = parse_duration_s(wait, field="--wait")
    if jobs:
        ids = [j for j in jobs.split(",") if j]
        if not all(j.isdigit() and int(j) < 2**32 for j in ids):
            raise ConfigError(f"--jobs {jobs!r}: expected job ids (digits, comma separated)")
    else:
        ids = spool_candidates(spool_dir, parse_duration_s(since, field="--since"), time.time())
    client = slurm_client.CliSlurmClient(debug=debug, echo=lambda m: click.echo(m, err=True))
    results = run_until_settled(Republisher(client, spool_dir), ids, wait_s, dry_run)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "jobs": [r.to_dict() for r in results]}, indent=1))
    else:
        shown = [r for r in results if verbose or r.status not in (Status.UP_TO_DATE, Status.NO_RECORDS)]
        rows = [
            {
                "JobID": r.job_id,
                "Status": r.status.value,
                "Steps": ",".join(r.missing) or "-",
                "Detail": r.detail,
            }
            for r in shown
        ]
        if rows:
            click.echo(render_table(["JobID", "Status", "Steps", "Detail"], rows))
    if any(r.status is Status.FAILED for r in results):
        sys.exit(1)
