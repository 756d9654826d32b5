"""`easlurm metrics serve|show`: the node agents' per-job metrics files (metrics.dir) over HTTP for
Prometheus, or printed once (docs/metrics.md)."""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click

from easlurm.accounting.metrics import collect, sweep
from easlurm.cli import load_ctx_config
from easlurm.errors import ConfigError

log = logging.getLogger(__name__)

#: node_exporter serves on 9100; easlurm's per-job metrics default beside it.
DEFAULT_PORT = 9102
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _directory(ctx: click.Context, given: str | None) -> Path:
    """--dir, else metrics.dir; one line naming which when it is not a directory."""
    cfg = load_ctx_config(ctx)
    where = "--dir" if given else "metrics.dir"
    value = given or cfg.get("metrics.dir")
    if not value:
        raise ConfigError("metrics.dir: not set (give --dir DIR, or set metrics.dir where the agents write)")
    path = Path(value)
    if not path.is_dir():
        raise ConfigError(f"{where} {path}: not a directory")
    return path


def handler_for(directory: Path) -> type[BaseHTTPRequestHandler]:
    """A request handler that answers /metrics with the directory's live files, merged."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics")
                return
            body = collect(directory).encode("ascii", "replace")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


@click.group("metrics", context_settings={"help_option_names": ["-h", "--help"]})
def metrics_group() -> None:
    """Per-job GPU metrics of running jobs (power, energy, utilisation, memory, power limit, idle GPUs)
    from the node agents, for Prometheus."""


@metrics_group.command("serve")
@click.option("--dir", "directory", default=None, help="the agents' metrics directory [metrics.dir]")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--address", default="0.0.0.0", show_default=True, help="address to listen on")
@click.pass_context
def serve_cmd(ctx: click.Context, directory: str | None, port: int, address: str) -> None:
    """Serve /metrics: every running step's series on this node, merged, and each node's idle allocated
    GPUs; a file whose agent is gone or that is stale is left out. Run one per node (a systemd unit)."""
    path = _directory(ctx, directory)
    try:
        server = ThreadingHTTPServer((address, port), handler_for(path))
    except OSError as exc:
        raise ConfigError(
            f"--address {address} --port {port}: cannot listen ({exc.strerror or exc})"
        ) from exc
    host, bound = server.server_address[:2]
    click.echo(f"easlurm metrics: serving {path} on http://{host!s}:{bound}/metrics", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@metrics_group.command("sweep")
@click.option("--dir", "directory", default=None, help="the agents' metrics directory [metrics.dir]")
@click.pass_context
def sweep_cmd(ctx: click.Context, directory: str | None) -> None:
    """Remove the files of agents that are gone or stale (for node_exporter's textfile collector, which
    serves a file as long as it exists): from cron, or slurm.conf's Epilog."""
    for path in sweep(_directory(ctx, directory)):
        click.echo(f"removed {path}")


@metrics_group.command("show")
@click.option("--dir", "directory", default=None, help="the agents' metrics directory [metrics.dir]")
@click.pass_context
def show_cmd(ctx: click.Context, directory: str | None) -> None:
    """Print once what `serve` would answer now."""
    click.echo(collect(_directory(ctx, directory)), nl=False)
