"""`easlurm predict` and `easlurm model ...`: the oracle from the command line."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import click

from easlurm.cli import LazyGroup, load_ctx_config
from easlurm.errors import ConfigError

PREDICT_COLUMNS = (
    "GPUType",
    "GPUs",
    "Batch",
    "PowerLimit",
    "GradAccum",
    "StepTime",
    "Power",
    "EnergyStep",
    "EDP",
    "SamplesPerSec",
)
PREDICT_DEFAULT = ("GPUType", "GPUs", "Batch", "PowerLimit", "StepTime", "Power", "EnergyStep", "EDP")


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option}: expected a comma list of integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{option}: expected integers >= 1, got {text!r}")
    return values


def _oracle(ctx: click.Context, params_path: str | None) -> Any:
    from easlurm.model.oracle import Oracle
    from easlurm.model.params import load_params

    cfg = load_ctx_config(ctx, {"oracle": {"params": params_path}} if params_path else None)
    return Oracle(load_params(cfg.get("oracle.params")), cache_size=int(cfg.get("oracle.cache_size")))


def _placements(
    oracle: Any, keys: list[str], gpus: list[int], batches: list[int], limits: list[float]
) -> Any:
    """The grid, keeping for each GPU type only the power limits inside its range (a 700 W limit is H100-only)."""
    import numpy as np

    from easlurm.model.oracle import Placements

    cols: list[list[Any]] = [[], [], [], []]
    for key in keys:
        spec = oracle.catalogue.get(key)
        ok = [v for v in limits if math.isnan(v) or spec.min_power_limit_w <= v <= spec.tdp_w]
        if not ok:
            raise ConfigError(
                f"--power-limit: none of the limits fits {key} ({spec.min_power_limit_w:g}-{spec.tdp_w:g} W)"
            )
        part = Placements.grid(gpus, batches, [key], ok)
        for col, arr in zip(cols, (part.n_gpus, part.batch, part.gpu, part.power_limit_w)):
            col.extend(arr.tolist())
    return Placements.of(
        np.array(cols[0]), np.array(cols[1]), np.array(cols[2], dtype=object), np.array(cols[3])
    )


@click.command("predict")
@click.option("--model", "model", default=None, help="Zoo model (see `easlurm model list`).")
@click.option(
    "--workload", "workload_file", type=click.Path(dir_okay=False), help="YAML layer list instead of --model."
)
@click.option(
    "--batch", default="256", show_default=True, help="Global batch per step; a comma list is a sweep."
)
@click.option("--precision", default="bf16", show_default=True, help="fp32, tf32, bf16 or fp16.")
@click.option("--gpus", default="1", show_default=True, help="GPU counts, comma list (e.g. 1,2,4,8).")
@click.option("--gpu", "gpu_types", default="a100-40gb", show_default=True, help="GPU types, comma list.")
@click.option(
    "--power-limit", default=None, help="Per-GPU power limits, comma list (e.g. 300,400W); default TDP."
)
@click.option("--seq-len", type=int, default=None, help="Sequence length (text models).")
@click.option("--image-size", type=int, default=None, help="Image size (vision models).")
@click.option("--optimizer", default="adamw", show_default=True, help="adamw, adam or sgd.")
@click.option("--params", "params_path", default=None, help="Oracle parameter YAML (default: oracle.params).")
@click.option("-o", "--format", "fmt", default=None, help="Columns, comma list: " + ",".join(PREDICT_COLUMNS))
@click.option("-P", "--parsable", is_flag=True, help="Pipe-delimited, no padding.")
@click.option("-n", "--noheader", is_flag=True, help="No header line.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@click.pass_context
def predict_cmd(
    ctx: click.Context,
    model: str | None,
    workload_file: str | None,
    batch: str,
    precision: str,
    gpus: str,
    gpu_types: str,
    power_limit: str | None,
    seq_len: int | None,
    image_size: int | None,
    optimizer: str,
    params_path: str | None,
    fmt: str | None,
    parsable: bool,
    noheader: bool,
    as_json: bool,
) -> None:
    """Predict step time, power, energy and EDP of a training job for each placement; * marks the best EDP."""
    import numpy as np

    from easlurm.model.yaml_workload import load_workload_yaml
    from easlurm.model.zoo import get_workload
    from easlurm.table import render_table, select_columns
    from easlurm.units import format_energy, format_power, parse_power_w

    if (model is None) == (workload_file is None):
        raise ConfigError("give exactly one of --model or --workload")
    columns = select_columns(fmt, PREDICT_COLUMNS, PREDICT_DEFAULT)
    if workload_file:
        workload = load_workload_yaml(workload_file, precision, optimizer)
    else:
        assert model is not None
        workload = get_workload(
            model, precision=precision, seq_len=seq_len, image_size=image_size, optimizer=optimizer
        )
    oracle = _oracle(ctx, params_path)
    keys = [oracle.catalogue.resolve(g) for g in gpu_types.split(",") if g.strip()]
    limits = [math.nan]
    if power_limit:
        limits = [parse_power_w(v, "--power-limit") for v in power_limit.split(",") if v.strip()]
    pl = _placements(oracle, keys, _int_list(gpus, "--gpus"), _int_list(batch, "--batch"), limits)
    pred = oracle.predict(workload, pl)
    edp = np.where(pred.feasible, pred.edp, np.inf)
    best = int(np.argmin(edp)) if np.isfinite(edp).any() else -1

    records: list[dict[str, Any]] = []
    for i in range(len(pl)):
        ok = bool(pred.feasible[i])
        limit = None if math.isnan(pl.power_limit_w[i]) else float(pl.power_limit_w[i])
        records.append(
            {
                "gpu": str(pl.gpu[i]),
                "n_gpus": int(pl.n_gpus[i]),
                "batch": int(pl.batch[i]),
                "power_limit_w": limit,
                "feasible": ok,
                "grad_accum": int(pred.grad_accum[i]) if ok else None,
                "step_time_s": float(pred.step_time_s[i]) if ok else None,
                "power_w": float(pred.power_w[i]) if ok else None,
                "energy_per_step_j": float(pred.energy_j[i]) if ok else None,
                "edp_js": float(pred.edp[i]) if ok else None,
                "samples_per_s": float(pred.samples_per_s[i]) if ok else None,
                "best_edp": i == best,
            }
        )
    if as_json:
        doc = {
            "schema_version": 1,
            "model": workload.name,
            "precision": workload.precision.value,
            "params_version": oracle.params.version,
            "placements": records,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    rows = []
    for r in records:
        rows.append(
            {
                "GPUType": r["gpu"],
                "GPUs": r["n_gpus"],
                "Batch": r["batch"],
                "PowerLimit": format_power(r["power_limit_w"]) if r["power_limit_w"] else "TDP",
                "GradAccum": r["grad_accum"],
                "StepTime": "OOM" if not r["feasible"] else f"{r['step_time_s']:.4f}s",
                "Power": format_power(r["power_w"]),
                "EnergyStep": format_energy(r["energy_per_step_j"]),
                "EDP": None if r["edp_js"] is None else f"{r['edp_js']:.4g}",
                "SamplesPerSec": None if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}",
            }
        )
    marks = ["*" if r["best_edp"] else "" for r in records]
    click.echo(render_table(columns, rows, parsable=parsable, header=not noheader, marks=marks))


@click.command("calibrate")
@click.argument("measurements", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "-O", "--out", "out_path", default=None, help="Parameter YAML to write (default params-<date>.yaml)."
)
@click.option(
    "--base", "base_path", default=None, help="Start from these parameters (default: shipped ones)."
)
@click.option("--free", default=None, help="Parameters to fit, comma list (default: what the data informs).")
@click.option(
    "--maxiter", type=int, default=200, show_default=True, help="Differential-evolution generations."
)
@click.option("--popsize", type=int, default=15, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--folds", type=int, default=5, show_default=True, help="k-fold cross-validation (0: none).")
@click.option("--version", "version", default=None, help="params_version to record (default: date-based).")
@click.option("--json", "as_json", is_flag=True, help="Report as one JSON document.")
def calibrate_cmd(
    measurements: str,
    out_path: str | None,
    base_path: str | None,
    free: str | None,
    maxiter: int,
    popsize: int,
    seed: int,
    folds: int,
    version: str | None,
    as_json: bool,
) -> None:
    """Fit the oracle's parameters to a measurement CSV and save them as a versioned YAML."""
    import dataclasses

    from easlurm.model.calibrate import calibrate, cross_validate, score
    from easlurm.model.dataset import read_measurements
    from easlurm.model.params import OracleParams, load_params, save_params

    rows = read_measurements(measurements)
    base = load_params(base_path) if base_path else load_params()
    free_list = [f.strip() for f in free.split(",") if f.strip()] if free else None
    before = score(base, rows)
    with click.progressbar(length=maxiter, label="calibrating", file=click.get_text_stream("stderr")) as bar:  # type: ignore[operator]  # click 8.3 types the context manager as object
        res = calibrate(
            rows,
            base,
            free_list,
            maxiter=maxiter,
            popsize=popsize,
            seed=seed,
            progress=lambda n, f: bar.update(1),
        )
    cv = (
        cross_validate(
            rows, k=folds, seed=seed, base=base, free=list(res.free), maxiter=maxiter, popsize=popsize
        )
        if folds >= 2
        else []
    )
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    meta = {
        "date": today,
        "data": measurements,
        "rows": len(rows),
        "free": list(res.free),
        "method": f"differential_evolution best1bin popsize={popsize} LHS mutation=(0.5,1.5) CR=0.7 + L-BFGS-B",
        "seed": seed,
        "mape_time_pct": round(res.fit.mape_time, 3),
        "mape_power_pct": None if res.fit.mape_power is None else round(res.fit.mape_power, 3),
        "loss": round(res.fit.loss, 4),
        "cv_folds": len(cv),
        "cv_mape_time_pct": round(sum(f.mape_time * f.n_rows for f in cv) / len(rows), 3) if cv else None,
    }
    params: OracleParams = dataclasses.replace(
        res.params, version=version or f"{today}-calibrated", meta=meta
    )
    out = out_path or f"params-{today}.yaml"
    save_params(params, out)
    if as_json:
        doc = {"schema_version": 1, "out": out, "before_loss": before.loss, "calibration": meta}
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(
        f"rows: {len(rows)}  free parameters: {len(res.free)}  wall: {res.wall_s:.1f}s  evaluations: {res.nfev}"
    )
    how = "0.6 MAPE time + 0.4 MAPE power" if res.fit.mape_power is not None else "MAPE time; no power data"
    click.echo(f"loss before: {before.loss:.2f}  after: {res.fit.loss:.2f}  ({how})")
    power = "-" if res.fit.mape_power is None else f"{res.fit.mape_power:.2f}%"
    click.echo(f"training MAPE: time {res.fit.mape_time:.2f}%  power {power}")
    for i, f in enumerate(cv, 1):
        fp = "-" if f.mape_power is None else f"{f.mape_power:.2f}%"
        click.echo(f"fold {i}: held-out {f.n_rows} rows  MAPE time {f.mape_time:.2f}%  power {fp}")
    if cv:
        click.echo(f"cross-validated MAPE time: {meta['cv_mape_time_pct']}%")
    click.echo(f"wrote {out} (params_version {params.version})")


@click.command("list")
def list_cmd() -> None:
    """List the zoo models and the catalogue GPUs."""
    from easlurm.model.hardware import load_catalogue
    from easlurm.model.zoo import MODEL_NAMES, default_size, get_workload, model_family
    from easlurm.table import render_table

    rows = []
    for name in MODEL_NAMES:
        kind, size = default_size(name)
        w = get_workload(name, precision="fp32")
        rows.append(
            {
                "Model": name,
                "Family": model_family(name),
                "Params": f"{w.n_params / 1e6:.1f}M",
                "Size": f"{kind}={size}",
                "FwdGFLOPs": f"{w.flops_forward / 1e9:.1f}",
            }
        )
    click.echo(render_table(["Model", "Family", "Params", "Size", "FwdGFLOPs"], rows))
    click.echo()
    cat = load_catalogue()
    gpus = [
        {
            "GPU": k,
            "Name": cat.get(k).name,
            "BF16TFLOPs": cat.get(k).bf16_tflops,
            "HBMGBs": cat.get(k).hbm_gbs,
            "MemGB": cat.get(k).memory_gb,
            "TDP": f"{cat.get(k).tdp_w:g}W",
        }
        for k in cat
    ]
    click.echo(render_table(["GPU", "Name", "BF16TFLOPs", "HBMGBs", "MemGB", "TDP"], gpus))


#: name -> ("module:attribute", one-line help)
MODEL_COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": ("easlurm.model.cli:calibrate_cmd", "Fit the oracle's parameters to a measurement CSV."),
    "list": ("easlurm.model.cli:list_cmd", "List zoo models and catalogue GPUs."),
}


@click.group("model", cls=LazyGroup, lazy_commands=MODEL_COMMANDS)
def model_group() -> None:
    """The analytical oracle: calibration and the model zoo."""
