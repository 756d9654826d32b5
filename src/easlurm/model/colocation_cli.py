"""`easlurm model corun` and `easlurm model calibrate-pairs`: the co-location rule from the command line."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import click

from easlurm.cli import output_options
from easlurm.files import check_writable
from easlurm.measure.pairs import predict_pair
from easlurm.model.cli import HARDWARE_OPTION, ctx_oracle
from easlurm.model.fit.pairs import fit_colocation, read_pairs
from easlurm.model.hardware import DEFAULT_GPU
from easlurm.model.params import save_params


@click.command("corun")
@click.argument("first")
@click.argument("second")
@click.option("--gpu", default=DEFAULT_GPU, show_default=True, help="Catalogue GPU type.")
@click.option(
    "--sharing",
    type=click.Choice(["time-slice", "mps"]),
    default="time-slice",
    show_default=True,
    help="How the two processes share the GPU.",
)
@click.option("--params", "params_path", default=None, help="Oracle parameter YAML [oracle.params].")
@output_options(table=False)
@HARDWARE_OPTION
@click.pass_context
def corun_cmd(
    ctx: click.Context,
    first: str,
    second: str,
    gpu: str,
    sharing: str,
    params_path: str | None,
    as_json: bool,
    hardware_path: str | None,
) -> None:
    """Predict two jobs (MODEL:BATCH[:PRECISION], as `model measure --pairs` names them) sharing one GPU:
    speeds, slowdowns, power."""
    oracle = ctx_oracle(ctx, params_path, hardware_path)
    key = oracle.catalogue.resolve(gpu)
    (a, b), co = predict_pair(oracle, first, second, key, sharing)
    solos = [(first, a), (second, b)]
    doc: dict[str, Any] = {
        "schema_version": 1,
        "gpu": key,
        "sharing": sharing,
        "feasible": co.feasible,
        "reason": co.reason or None,
        "throughput": co.throughput if co.feasible else None,
        "gpu_power_w": co.power_w if co.feasible else None,
        "jobs": [
            {
                "job": text,
                "step_time_alone_s": s.step_time_s,
                "power_alone_w": s.power_w,
                "compute_busy": s.compute_busy,
                "hbm_busy": s.hbm_busy,
                "gpu_busy": s.gpu_busy,
                "peak_mem_gib": s.peak_mem_bytes / 2**30,
                "speed": co.speed[i] if co.feasible else None,
                "power_shared_w": co.job_power_w(i) if co.feasible else None,
            }
            for i, (text, s) in enumerate(solos)
        ],
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for job in doc["jobs"]:
        click.echo(
            f"{job['job']:<24} alone {job['step_time_alone_s'] * 1e3:8.1f} ms {job['power_alone_w']:5.0f} W  "
            f"busy: compute {job['compute_busy']:.2f} HBM {job['hbm_busy']:.2f} kernels {job['gpu_busy']:.2f}  "
            f"mem {job['peak_mem_gib']:.1f} GiB"
        )
    if not co.feasible:
        click.echo(f"cannot share: {co.reason}")
        return
    click.echo(
        f"{sharing}: speeds {co.speed[0]:.2f} / {co.speed[1]:.2f}  throughput {co.throughput:.2f}  "
        f"GPU power {co.power_w:.0f} W (split {co.job_power_w(0):.0f} / {co.job_power_w(1):.0f} W)"
    )


@click.command("calibrate-pairs")
@click.argument("pairs", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "-O", "--out", "out_path", default=None, help="Parameter YAML to write (default params-<date>.yaml)."
)
@click.option("--params", "params_path", default=None, help="Start from these parameters [oracle.params].")
@output_options(table=False, json_help="Report as one JSON document.")
@HARDWARE_OPTION
@click.pass_context
def calibrate_pairs_cmd(
    ctx: click.Context,
    pairs: str,
    out_path: str | None,
    params_path: str | None,
    as_json: bool,
    hardware_path: str | None,
) -> None:
    """Fit the co-location parameters to measured co-runs (a pairs CSV) and save the parameter YAML."""
    check_writable(out_path or f"params-{dt.datetime.now(dt.UTC):%Y-%m-%d}.yaml", "--out")
    oracle = ctx_oracle(ctx, params_path, hardware_path)
    rows = read_pairs(pairs)
    fit = fit_colocation(oracle, rows)
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    meta = {
        **dict(oracle.params.meta),
        "colocation": {
            "date": today,
            "data": pairs,
            "pairs": fit.n_pairs,
            "method": "scipy least_squares (trf) on log slowdowns, weak prior towards the previous values",
            "mape_slowdown_pct": round(fit.mape_slowdown, 3),
            "mape_slowdown_before_pct": round(fit.mape_slowdown_before, 3),
            "mape_gpu_power_pct": None if fit.mape_power is None else round(fit.mape_power, 3),
        },
    }
    params = dataclasses.replace(fit.params, version=f"{oracle.params.version}+coloc-{today}", meta=meta)
    out = out_path or f"params-{today}.yaml"
    save_params(params, out)
    if as_json:
        click.echo(
            json.dumps(
                {"schema_version": 1, "out": out, "values": fit.values, **meta["colocation"]}, indent=2
            )
        )
        return
    values = "  ".join(f"{k}={v:.4g}" for k, v in fit.values.items())
    power = "-" if fit.mape_power is None else f"{fit.mape_power:.2f}%"
    click.echo(f"pairs: {fit.n_pairs}  {values}")
    click.echo(
        f"slowdown MAPE: {fit.mape_slowdown_before:.2f}% before, {fit.mape_slowdown:.2f}% after; GPU power {power}"
    )
    click.echo(f"wrote {out} (params_version {params.version})")
