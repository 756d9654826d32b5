"""`easlurm config`: show the effective configuration (as perun's showconf)."""

from __future__ import annotations

import json

import click

from easlurm.cli import load_ctx_config, output_options


@click.command("config")
@output_options(table=False, json_help="One JSON document instead of YAML.")
@click.pass_context
def config_cmd(ctx: click.Context, as_json: bool) -> None:
    """Print the effective configuration, each value annotated with the layer that set it."""
    cfg = load_ctx_config(ctx)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "config": cfg.as_dict(), "origin": cfg.origin}, indent=2))
        return
    for section, entries in cfg.values.items():
        click.echo(f"{section}:")
        for key, value in entries.items():
            origin = cfg.origin.get(f"{section}.{key}", "default")
            click.echo(f"  {key}: {json.dumps(value)}  # {origin}")
