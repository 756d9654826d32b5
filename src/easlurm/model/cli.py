"""`easlurm predict` and `easlurm model ...`: the oracle from the command line."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import click
import numpy as np

from easlurm.cli import LazyGroup, int_list, int_range, load_ctx_config, output_options, text_list
from easlurm.errors import ConfigError, ModelError
from easlurm.model.build import apply_oracle_config, build_oracle
from easlurm.model.gpu_precision import precision_on
from easlurm.model.hardware import DEFAULT_GPU
from easlurm.model.oracle import Placements
from easlurm.model.sharding import cheapest_training, training_options
from easlurm.model.yaml_workload import load_workload_yaml
from easlurm.model.zoo import (
    ATTENTION,
    MODEL_NAMES,
    default_size,
    get_workload,
    model_family,
    spec_model_names,
)
from easlurm.table import render_table, select_columns
from easlurm.units import format_edp, format_energy, format_power, parse_power_w

PREDICT_COLUMNS = (
    "GPUType",
    "GPUs",
    "Nodes",
    "Batch",
    "PowerLimit",
    "GradAccum",
    "StepTime",
    "Power",
    "EnergyStep",
    "EDP",
    "SamplesPerSec",
    "PeakMem",
    "Best",
    "Sharding",
    "ActCkpt",
)
PREDICT_DEFAULT = (
    "GPUType",
    "GPUs",
    "Nodes",
    "Batch",
    "PowerLimit",
    "StepTime",
    "Power",
    "EnergyStep",
    "EDP",
    "PeakMem",
    "Best",
)


#: what each precision name runs (`model list`; docs/oracle-llm.md); a GPU without tensor cores for one runs
#: it in FP32 (TF32 and BF16) or on its CUDA cores (FP16 on Pascal)
PRECISION_ROWS = [
    {
        "Precision": "fp32-strict",
        "Matmuls": "FP32",
        "Convolutions": "FP32",
        "PyTorch": "allow_tf32 off for both",
    },
    {
        "Precision": "fp32",
        "Matmuls": "FP32",
        "Convolutions": "TF32 (Ampere+)",
        "PyTorch": "defaults: cudnn.allow_tf32, matmul precision highest",
    },
    {"Precision": "tf32", "Matmuls": "TF32", "Convolutions": "TF32", "PyTorch": "matmul precision high"},
    {
        "Precision": "amp-bf16 (bf16)",
        "Matmuls": "BF16",
        "Convolutions": "BF16",
        "PyTorch": "autocast bf16; norms, softmax, loss FP32",
    },
    {
        "Precision": "amp-fp16 (fp16)",
        "Matmuls": "FP16",
        "Convolutions": "FP16",
        "PyTorch": "autocast fp16; norms, softmax, loss FP32",
    },
]

#: `--hardware FILE` on every command that builds the oracle (see easlurm.model.build).
HARDWARE_OPTION = click.option(
    "--hardware",
    "hardware_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="GPU catalogue YAML adding or overriding GPUs [oracle.hardware].",
)


def ctx_oracle(ctx: click.Context, params_path: str | None, hardware_path: str | None = None) -> Any:
    cfg = load_ctx_config(ctx, {"oracle": {"params": params_path}} if params_path else None)
    apply_oracle_config(cfg, hardware_path)
    return build_oracle(
        cfg.get("oracle.params"),
        hardware_path or cfg.get("oracle.hardware"),
        cache_size=int(cfg.get("oracle.cache_size")),
    )


def _placements(
    oracle: Any,
    keys: list[str],
    gpus: list[int],
    batches: list[int],
    limits: list[float],
    nodes: list[int] | None = None,
) -> Any:
    """The grid, keeping for each GPU type only the power limits inside its range (a 700 W limit is H100-only)
    and the node counts that can hold each GPU count (at least one, at most gpus_per_node GPUs per node; no
    `nodes`: the fewest nodes); each limit or count left out is reported on stderr, naming the GPU."""
    cols: list[list[Any]] = [[], [], [], [], []]
    for key in keys:
        spec = oracle.catalogue.get(key)
        ok = [v for v in limits if math.isnan(v) or spec.min_power_limit_w <= v <= spec.tdp_w]
        for v in limits:
            if v not in ok and not math.isnan(v):
                click.echo(
                    f"easlurm: warning: --power-limit {v:g}W is outside {key}'s range "
                    f"{spec.min_power_limit_w:g}-{spec.tdp_w:g} W: not predicted for {key}",
                    err=True,
                )
        if not ok:
            raise ConfigError(
                f"--power-limit: none of the limits fits {key} ({spec.min_power_limit_w:g}-{spec.tdp_w:g} W)"
            )
        spans: list[tuple[int, int]] = []
        for n in gpus:
            counts = nodes if nodes else [-(-n // spec.gpus_per_node)]
            for m in counts:
                if m <= n and -(-n // m) <= spec.gpus_per_node:
                    spans.append((n, m))
                else:
                    click.echo(
                        f"easlurm: warning: --nodes {m} cannot hold {n} {key} GPUs (1 to {spec.gpus_per_node} "
                        "per node): not predicted",
                        err=True,
                    )
        for n, m in spans:
            part = Placements.grid([n], batches, [key], ok, [m])
            for col, arr in zip(cols, (part.n_gpus, part.batch, part.gpu, part.power_limit_w, part.n_nodes)):
                col.extend(arr.tolist())
    if not cols[0]:
        raise ConfigError("--nodes: no node count can hold the GPU counts of --gpus")
    return Placements.of(
        np.array(cols[0]),
        np.array(cols[1]),
        np.array(cols[2], dtype=object),
        np.array(cols[3]),
        np.array(cols[4]),
    )


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    """The options of `easlurm predict`, as click passes them."""

    model: str | None
    workload_file: str | None
    batch: str
    precision: str | None
    gpus: str
    nodes: str | None
    gpu_types: str
    power_limit: str | None
    seq_len: int | None
    image_size: int | None
    optimizer: str
    params_path: str | None
    hardware_path: str | None
    fmt: str | None
    parsable: bool
    noheader: bool
    as_json: bool
    shard: str = "none"
    act_ckpt: str | None = None
    attention: str = "sdpa"


@click.command("predict")
@click.option("--model", "model", default=None, help="Zoo model (see `easlurm model list`).")
@click.option(
    "--workload", "workload_file", type=click.Path(dir_okay=False), help="YAML layer list instead of --model."
)
@click.option(
    "--batch", default="256", show_default=True, help="Global batch per step; a comma list is a sweep."
)
@click.option(
    "--precision",
    default=None,
    help="fp32-strict, fp32 (PyTorch's defaults: convolutions TF32 from Ampere on), tf32, amp-bf16 (bf16) or "
    "amp-fp16 (fp16); default: each GPU's own (bf16 where its tensor cores run it, else fp16 "
    "where that is faster than fp32, else fp32).",
)
@click.option("--gpus", default="1", show_default=True, help="GPU counts, comma list (e.g. 1,2,4,8).")
@click.option(
    "--nodes",
    default=None,
    help="Node counts the GPUs span, comma list (e.g. 1,2,4); default the fewest that hold them.",
)
@click.option("--gpu", "gpu_types", default=DEFAULT_GPU, show_default=True, help="GPU types, comma list.")
@click.option(
    "--power-limit", default=None, help="Per-GPU power limits, comma list (e.g. 300,400W); default TDP."
)
@click.option("--seq-len", type=int_range(1, 1 << 20), default=None, help="Sequence length (text models).")
@click.option("--image-size", type=int_range(1, 1 << 16), default=None, help="Image size (vision models).")
@click.option("--optimizer", default="adamw", show_default=True, help="adamw, adam or sgd.")
@click.option("--params", "params_path", default=None, help="Oracle parameter YAML (default: oracle.params).")
@click.option(
    "--shard",
    default="none",
    show_default=True,
    help="State sharding over the job's GPUs: none (DDP), zero1, zero2, zero3 (fsdp), or auto (the cheapest "
    "that fits, with or without activation checkpointing).",
)
@click.option(
    "--activation-checkpointing",
    "act_ckpt",
    default=None,
    help="none, full (each block's forward recomputed) or selective; default none (auto with --shard auto).",
)
@click.option(
    "--attention",
    type=click.Choice(ATTENTION),
    default="sdpa",
    show_default=True,
    help="How the model's attention runs: sdpa (torch's fused kernels) or eager (matmul, softmax, dropout, "
    "matmul: the scores go through memory, as NVIDIA DeepLearningExamples' BERT).",
)
@HARDWARE_OPTION
@output_options(PREDICT_COLUMNS)
@click.pass_context
def predict_cmd(ctx: click.Context, **options: Any) -> None:
    """Predict step time, power, energy and EDP of a training job for each placement; * in Best marks the
    lowest EDP."""
    req = PredictRequest(**options)
    if (req.model is None) == (req.workload_file is None):
        raise ConfigError("give exactly one of --model or --workload")
    columns = select_columns(req.fmt, PREDICT_COLUMNS, PREDICT_DEFAULT)
    asked = None if req.precision is None else _workload(req, req.precision)
    oracle = ctx_oracle(ctx, req.params_path, req.hardware_path)
    keys = [oracle.catalogue.resolve(g) for g in text_list(req.gpu_types)]
    limits = [math.nan]
    if req.power_limit:
        limits = [parse_power_w(v, "--power-limit") for v in text_list(req.power_limit)]
    node_counts = int_list(req.nodes, "--nodes") if req.nodes else None
    pl = _placements(
        oracle, keys, int_list(req.gpus, "--gpus"), int_list(req.batch, "--batch"), limits, node_counts
    )
    runs = _note_precisions(oracle, keys, asked)
    by_gpu = _workloads_by_gpu(req, asked, runs)
    workload = next(iter(by_gpu.values()))
    choice = cheapest_training(oracle, [by_gpu[str(g)] for g in pl.gpu], pl, _training_options(req))
    pred: Any = choice.prediction
    edp = np.where(pred.feasible, pred.edp, np.inf)
    best = int(np.argmin(edp)) if np.isfinite(edp).any() else -1
    records = _prediction_records(pl, pred, best)
    for r, shard, ckpt in zip(records, choice.sharding, choice.act_ckpt):
        r["precision"] = runs[r["gpu"]].value
        r["sharding"], r["activation_checkpointing"] = shard.value, ckpt or "none"
    if "Sharding" not in columns and (req.shard != "none" or req.act_ckpt) and not req.fmt:
        columns = [*columns, "Sharding", "ActCkpt"]
    if req.as_json:
        doc = {
            "schema_version": 1,
            "model": workload.name,
            # what was asked (null: each GPU's default); each placement says what runs there
            "precision": None if asked is None else asked.precision.value,
            "params_version": oracle.params.version,
            "placements": records,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    rows = [_prediction_row(r) for r in records]
    click.echo(render_table(columns, rows, parsable=req.parsable, header=not req.noheader))
    shared = oracle.uncalibrated_gpus(keys)
    if shared and not req.parsable:
        archs = sorted({oracle.catalogue.get(k).architecture or "no architecture given" for k in shared})
        click.echo(
            f"note: {', '.join(shared)} ({', '.join(archs)}): parameters {oracle.params.version} were not "
            "calibrated on this architecture; predicted with the shared physics",
            err=True,
        )


def _prediction_records(pl: Any, pred: Any, best: int) -> list[dict[str, Any]]:
    """One record per placement, in SI units with None where a row is infeasible (the --json shape)."""
    records: list[dict[str, Any]] = []
    for i in range(len(pl)):
        ok = bool(pred.feasible[i])
        limit = None if math.isnan(pl.power_limit_w[i]) else float(pl.power_limit_w[i])
        records.append(
            {
                "gpu": str(pl.gpu[i]),
                "n_gpus": int(pl.n_gpus[i]),
                "n_nodes": int(pl.n_nodes[i]),
                "batch": int(pl.batch[i]),
                "power_limit_w": limit,
                "feasible": ok,
                "grad_accum": int(pred.grad_accum[i]) if ok else None,
                "step_time_s": float(pred.step_time_s[i]) if ok else None,
                "power_w": float(pred.power_w[i]) if ok else None,
                "energy_per_step_j": float(pred.energy_j[i]) if ok else None,
                "edp_j_s": float(pred.edp[i]) if ok else None,
                "samples_per_s": float(pred.samples_per_s[i]) if ok else None,
                # an infeasible row shows what one sample alone would need: the GPU is too small for it
                "peak_mem_gib": None if pred.peak_mem_gib is None else round(float(pred.peak_mem_gib[i]), 3),
                "best_edp": i == best,
                "shared_physics": bool(pred.shared_physics is not None and pred.shared_physics[i]),
            }
        )
    return records


def _prediction_row(r: dict[str, Any]) -> dict[str, Any]:
    """A record as the table's cells, with units (OOM where the job does not fit)."""
    return {
        "GPUType": r["gpu"],
        "GPUs": r["n_gpus"],
        "Nodes": r["n_nodes"],
        "Batch": r["batch"],
        "PowerLimit": format_power(r["power_limit_w"]) if r["power_limit_w"] else "TDP",
        "GradAccum": r["grad_accum"],
        "StepTime": "OOM" if not r["feasible"] else f"{r['step_time_s']:.4f}s",
        "Power": format_power(r["power_w"]),
        "EnergyStep": format_energy(r["energy_per_step_j"]),
        "EDP": format_edp(r["edp_j_s"]),
        "SamplesPerSec": None if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}",
        "PeakMem": None if r["peak_mem_gib"] is None else f"{r['peak_mem_gib']:.1f}GiB",
        "Best": "*" if r["best_edp"] else "",
        "Sharding": r.get("sharding"),
        "ActCkpt": r.get("activation_checkpointing"),
    }


def _training_options(req: PredictRequest) -> list[tuple[Any, str]]:
    """--shard and --activation-checkpointing as the (sharding, checkpointing) pairs to predict."""
    try:
        return training_options(req.shard, req.act_ckpt)
    except ModelError as exc:
        raise ConfigError(f"--shard/--activation-checkpointing: {exc}") from exc


def _workload(req: PredictRequest, precision: str) -> Any:
    """The job of --model or --workload at one precision."""
    if req.workload_file:
        return load_workload_yaml(req.workload_file, precision, req.optimizer)
    assert req.model is not None
    return get_workload(
        req.model,
        precision=precision,
        seq_len=req.seq_len,
        image_size=req.image_size,
        optimizer=req.optimizer,
        attention=req.attention,
    )


def _workloads_by_gpu(req: PredictRequest, asked: Any, runs: dict[str, Any]) -> dict[str, Any]:
    """The workload each GPU type is predicted with: the one asked for on every GPU (the oracle runs it as
    the GPU can), else each GPU's default precision."""
    if asked is not None:
        return dict.fromkeys(runs, asked)
    made = {p: _workload(req, p.value) for p in dict.fromkeys(runs.values())}
    return {key: made[p] for key, p in runs.items()}


def _note_precisions(oracle: Any, keys: list[str], asked: Any) -> dict[str, Any]:
    """The precision that runs on each GPU type (gpu_precision.precision_on), saying on stderr, once per reason
    and precision, where that is not the one asked (the default bf16 was predicted on a V100 in FP32 and
    nothing said so)."""
    runs: dict[str, Any] = {}
    notes: dict[tuple[str, str], list[str]] = {}
    for key in dict.fromkeys(keys):
        runs[key], why = precision_on(oracle.catalogue.get(key), None if asked is None else asked.precision)
        if why:
            notes.setdefault((why, runs[key].value), []).append(key)
    for (why, precision), gpus in notes.items():
        click.echo(f"note: {', '.join(gpus)}: {why}, in {precision}", err=True)
    return runs


@click.command("list")
@HARDWARE_OPTION
@click.option(
    "--names",
    is_flag=True,
    help="Only the model names a SPEC's model= may carry, one per line (ALIAS NAME for the other spellings): "
    "the file the SPANK plugin's models= argument reads to check model= at submission.",
)
@click.pass_context
def list_cmd(ctx: click.Context, hardware_path: str | None, names: bool) -> None:
    """List the zoo models and the catalogue GPUs."""
    if names:
        click.echo(spec_model_names().text(), nl=False)
        return
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
    cat = apply_oracle_config(load_ctx_config(ctx), hardware_path)
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
    click.echo()
    click.echo(render_table(["Precision", "Matmuls", "Convolutions", "PyTorch"], PRECISION_ROWS))


# --- easlurm model evaluate: per-row error and MAPE of the oracle and a data-driven baseline, with CV ---

#: name -> ("module:attribute", one-line help)
MODEL_COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": ("easlurm.model.fit.cli:calibrate_cmd", "Fit the oracle's parameters to a measurement CSV."),
    "list": ("easlurm.model.cli:list_cmd", "List zoo models and catalogue GPUs."),
    "evaluate": (
        "easlurm.model.fit.cli:evaluate_cmd",
        "Per-row error and MAPE of the oracle and a baseline on measurements, with cross-validation.",
    ),
}

# co-location: predict two jobs sharing a GPU, fit the rule's parameters to measured co-runs
MODEL_COMMANDS["corun"] = (
    "easlurm.model.colocation_cli:corun_cmd",
    "Predict two jobs sharing one GPU (time-slicing or MPS): speeds and power.",
)
MODEL_COMMANDS["calibrate-pairs"] = (
    "easlurm.model.colocation_cli:calibrate_pairs_cmd",
    "Fit the co-location parameters to a pairs CSV of measured co-runs.",
)

# `easlurm model measure` (torch training steps -> measurement CSV) lives in its own module.
MODEL_COMMANDS["measure"] = (
    "easlurm.measure.cli:measure_cmd",
    "Time training steps of zoo models (torch) into a measurement CSV.",
)


@click.group("model", cls=LazyGroup, lazy_commands=MODEL_COMMANDS)
def model_group() -> None:
    """The analytical oracle: calibration and the model zoo."""
