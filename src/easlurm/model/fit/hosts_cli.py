"""`easlurm model calibrate --hosts`: each named host's data-loader floor, and the typical host's."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import click

from easlurm.errors import ConfigError
from easlurm.model.fit.dataset import Measurement
from easlurm.model.fit.hosts import HostFit, fit_hosts
from easlurm.model.fit.site import LOADER_PARAM
from easlurm.model.hardware import Catalogue
from easlurm.model.params import OracleParams, save_params


def refuse_hosts_conflicts(free: str | None, scaling: bool, site: bool) -> None:
    """--hosts fits one floor per host and nothing else: --free, --scaling and --site do not combine."""
    for given, option in ((free, "--free"), (scaling, "--scaling"), (site, "--site")):
        if given:
            raise ConfigError(f"{option}: --hosts fits each host's loader floor only; give one or the other")


def hosts_meta(fit: HostFit, base: OracleParams, data: str, today: str) -> dict[str, Any]:
    """The parameter file's calibration record: the base's, with the hosts' floors and how they were fitted."""
    earlier = dict(base.meta)
    earlier["loader_hosts"] = {
        "date": today,
        "base_params_version": base.version,
        "data": data,
        "command": f"easlurm model calibrate --hosts {data} --params <the base> -O <file>",
        "method": "each host's t_input_step_s on its real-input rows (time MAPE, log grids), every other "
        "parameter kept; the global value is the geometric mean of the hosts' floors (an unknown host's)",
        "typical_t_input_step_s": round(fit.typical_s, 6),
        "hosts": {
            h.host: {
                "rows": h.rows,
                "loader_bound_rows": h.bound_rows,
                "t_input_step_s": round(h.floor_s, 6),
                "mape_time_before_pct": round(h.mape_before_pct, 3),
                "mape_time_after_pct": round(h.mape_after_pct, 3),
            }
            for h in fit.hosts
        },
    }
    return earlier


def run_hosts(
    rows: list[Measurement],
    base: OracleParams,
    catalogue: Catalogue,
    *,
    data: str,
    out: str,
    version: str | None,
    as_json: bool,
) -> None:
    """Fit, save and report."""
    fit = fit_hosts(rows, base, catalogue)
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    meta = hosts_meta(fit, base, data, today)
    params = dataclasses.replace(fit.params, version=version or f"{base.version}+hosts-{today}", meta=meta)
    save_params(params, out)
    if as_json:
        doc = {"schema_version": 1, "out": out, "loader_hosts": meta["loader_hosts"]}
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"data loader floors ({LOADER_PARAM}), each host on its own real-input rows:")
    click.echo(f"  {'host':<28s}{'rows':>5s}{'loader-bound':>14s}{'floor':>10s}   time MAPE before -> after")
    for h in fit.hosts:
        click.echo(
            f"  {h.host:<28s}{h.rows:>5d}{h.bound_rows:>14d}{1e3 * h.floor_s:>7.1f} ms   "
            f"{h.mape_before_pct:.1f} -> {h.mape_after_pct:.1f} %"
        )
    click.echo(
        f"  an unknown host (rows that name none): {1e3 * fit.typical_s:.1f} ms, the geometric mean of "
        f"{len(fit.params.host_factors())} hosts' floors (was {1e3 * base[LOADER_PARAM]:.1f} ms)"
    )
    click.echo(f"wrote {out} (params_version {params.version})")
