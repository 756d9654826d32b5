"""`easlurm model measure`: the command; one configuration per process (`steps`), pairs (`pairs`) or
Slurm array tasks (`slurm_array`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from easlurm.cli import int_list, int_range, text_list
from easlurm.errors import ConfigError, ModelError
from easlurm.files import check_writable
from easlurm.measure.ddp import check_device, measure_local, run_rank, slurm_rank
from easlurm.measure.pairs import pairs_command, parse_pairs
from easlurm.measure.rendezvous import master_addr
from easlurm.measure.slurm_array import measure_on_slurm
from easlurm.measure.steps import (
    TORCH_MODELS,
    MeasureConfig,
    Result,
    Timing,
    configurations,
    default_device,
    device_gpu_name,
    import_torch,
    measure,
    nvml_energy_reader,
    write_results,
)
from easlurm.progress import progressbar
from easlurm.units import parse_duration_s

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MeasureRequest:
    """The options of `easlurm model measure`, as click passes them: one object for the helpers below."""

    models: str | None
    pairs: str | None
    batches: str
    gpus: str
    nodes: int
    precisions: str
    optimizer: str
    seq_len: int | None
    image_size: int | None
    gpu: str | None
    device: str | None
    sweeps: int
    warmup: str
    window: str
    cpu_threads: int | None
    out_path: str | None
    slurm: bool
    partition: str | None
    time_limit: str | None
    gres: str | None
    dry_run: bool
    ddp_task: bool


@click.command("measure")
@click.option("--model", "models", default=None, help="Zoo models, comma list (e.g. resnet50,bert-base).")
@click.option(
    "--pairs",
    default=None,
    help="Co-located pairs instead of --model: A+B[,C+D...], each MODEL:BATCH[:PRECISION][:train|infer] "
    "(e.g. bert-base:32+resnet50:64); each job alone, then both at once on the device.",
)
@click.option(
    "--batch",
    "batches",
    default="32",
    show_default=True,
    help="Per-step batch sizes, comma list (global: split over the --gpus ranks).",
)
@click.option(
    "--gpus",
    default="1",
    show_default=True,
    help="Data-parallel GPUs, comma list (e.g. 1,2,4): torch DistributedDataParallel, one process per GPU, "
    "timed with and without gradient synchronisation (the comm_exposed_s column).",
)
@click.option(
    "--nodes",
    type=int_range(1, 100_000),
    default=1,
    show_default=True,
    help="With --slurm: nodes each data-parallel job spans (--gpus split evenly over them).",
)
@click.option(
    "--precision",
    "precisions",
    default="bf16",
    show_default=True,
    help="fp32-strict, fp32 (PyTorch's defaults), tf32, amp-bf16 (bf16); comma list.",
)
@click.option(
    "--optimizer", default="adamw", show_default=True, help="adamw (torch default) or sgd (momentum 0.9)."
)
@click.option(
    "--seq-len",
    type=int_range(1, 1 << 20),
    default=None,
    help="Sequence length of text models (default: the zoo's).",
)
@click.option(
    "--image-size",
    type=int_range(1, 1 << 16),
    default=None,
    help="Image size of vision models (default: the zoo's).",
)
@click.option(
    "--gpu", default=None, help="Catalogue GPU key for the CSV's gpu column (default: the device name)."
)
@click.option(
    "--device", default=None, help="torch device (default cuda:0 when CUDA is available, else cpu)."
)
@click.option(
    "--sweeps",
    type=int_range(1, 1000),
    default=2,
    show_default=True,
    help="Full sweeps; the CSV holds the mean.",
)
@click.option("--warmup", default="2.5s", show_default=True, help="Minimum warm-up (also >= 3 steps).")
@click.option("--window", default="4s", show_default=True, help="Minimum timed window.")
@click.option(
    "--cpu-threads",
    type=int_range(1, 4096),
    default=None,
    help="torch threads on a CPU device (default: torch's).",
)
@click.option("-O", "--out", "out_path", default=None, help="CSV to write (default measurements-<date>.csv).")
@click.option("--slurm", is_flag=True, help="One Slurm array task per configuration, with --energy-profile.")
@click.option("--partition", default=None, help="With --slurm: partition to submit to.")
@click.option("--time", "time_limit", default=None, help="With --slurm: time limit per task (e.g. 30:00).")
@click.option(
    "--gres",
    default=None,
    help="With --slurm: GRES per node ('' for none; default gpu:<GPUs per node>).",
)
@click.option("--dry-run", is_flag=True, help="With --slurm: print the sbatch scripts, submit nothing.")
@click.option("--ddp-task", is_flag=True, hidden=True, help="One rank of an srun step (the --slurm scripts).")
@click.pass_context
def measure_cmd(ctx: click.Context, **options: Any) -> None:
    """Time training steps of zoo models (torch) and write a measurement CSV for `easlurm model calibrate`;
    with --pairs, two jobs alone and sharing the device, for the co-location model."""
    req = MeasureRequest(**options)
    timing = Timing(parse_duration_s(req.warmup, "--warmup"), parse_duration_s(req.window, "--window"))
    if timing.window_s <= 0:
        raise ConfigError("--window must be > 0")
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    if (req.models is None) == (req.pairs is None):
        raise ConfigError("give either --model or --pairs")
    check_writable(req.out_path or f"{'pairs' if req.pairs else 'measurements'}-{today}.csv", "--out")
    if req.pairs is not None:
        _measure_pairs(ctx, req, req.pairs, timing, today)
        return
    assert req.models is not None
    gpu_counts = int_list(req.gpus, "--gpus")
    if req.nodes > 1 and not (req.slurm or req.ddp_task):
        raise ConfigError("--nodes: several nodes need --slurm (this machine is one node)")
    if req.dry_run and not req.slurm:
        raise ConfigError("--dry-run: only with --slurm (it prints the job scripts)")
    configs = configurations(
        text_list(req.models),
        int_list(req.batches, "--batch"),
        text_list(req.precisions),
        req.optimizer,
        req.seq_len,
        req.image_size,
        gpu_counts,
        req.nodes,
    )
    parallel = max(gpu_counts) > 1 or req.nodes > 1
    out = req.out_path or f"measurements-{today}.csv"
    if req.ddp_task:
        _ddp_task(configs, out, req.sweeps, timing, req.gpu, req.device)
        return
    if req.slurm:
        if req.gres and parallel and len(gpu_counts) > 1:
            raise ConfigError(
                "--gres: one value cannot fit several --gpus counts (leave it out: gpu:<per node>)"
            )
        _measure_slurm(ctx, req, configs, out, timing, parallel)
        return
    _measure_here(req, configs, out, timing, parallel)


def _measure_pairs(ctx: click.Context, req: MeasureRequest, pairs: str, timing: Timing, today: str) -> None:
    """--pairs: each job alone, then both at once on this machine's device; the options that make no sense
    for a pair are refused by name."""
    if req.slurm:
        raise ConfigError("--pairs runs on this machine's device; it has no --slurm mode")
    for param, option, why in (
        ("batches", "--batch", "each job names its batch: MODEL:BATCH"),
        ("sweeps", "--sweeps", "every job and pair is run once"),
        ("gpus", "--gpus", "a pair shares one device"),
        ("nodes", "--nodes", "a pair shares one device"),
        ("dry_run", "--dry-run", "pairs run on this machine's device"),
    ):
        if ctx.get_parameter_source(param) is not click.core.ParameterSource.DEFAULT:
            raise ConfigError(f"{option}: not with --pairs ({why})")
    prec = text_list(req.precisions)
    if len(prec) != 1:
        raise ConfigError("--precision: one value with --pairs (a job may name its own: MODEL:BATCH:PREC)")
    parsed = parse_pairs(pairs, prec[0], req.optimizer, req.seq_len, req.image_size)
    pairs_command(parsed, req.out_path or f"pairs-{today}.csv", timing, req.device, req.gpu, req.cpu_threads)


def _measure_slurm(
    ctx: click.Context,
    req: MeasureRequest,
    configs: Sequence[MeasureConfig],
    out: str,
    timing: Timing,
    parallel: bool,
) -> None:
    """--slurm: one array task per configuration, each profiled; --dry-run prints the scripts instead."""
    results = measure_on_slurm(
        configs,
        out,
        sweeps=req.sweeps,
        timing=timing,
        gpu=req.gpu,
        partition=req.partition,
        time_limit=req.time_limit,
        gres=req.gres,
        config_path=_abs((ctx.find_root().obj or {}).get("config_path")),
        dry_run=click.echo if req.dry_run else None,
    )
    if req.dry_run:
        return
    step = "its srun step over all nodes" if parallel else "its batch step"
    source = (
        f"easlurm model measure --slurm, {req.sweeps} run(s) per task, "
        f"GPU power of the whole task ({step}, easlurm sacct)"
    )
    _write_and_print(results, out, source)


def _measure_here(
    req: MeasureRequest, configs: Sequence[MeasureConfig], out: str, timing: Timing, parallel: bool
) -> None:
    """This machine: one process on one device, or data-parallel ranks for --gpus above one; torch and each
    model's library must be installed."""
    torch = import_torch()
    for lib in sorted({TORCH_MODELS[c.model] for c in configs} - {"torch"}):
        if importlib.util.find_spec(lib) is None:
            needing = sorted({c.model for c in configs if TORCH_MODELS[c.model] == lib})
            raise ModelError(f"model {', '.join(needing)} needs {lib}: pip install 'easlurm[torch]' {lib}")
    if parallel:
        _measure_parallel(configs, out, req.sweeps, timing, req.gpu, req.device, req.cpu_threads)
        return
    dev = req.device or default_device()
    if not dev.startswith("cuda"):
        # torch's default ignores the CPU set a Slurm task or cgroup grants, and oversubscribed threads
        # make a CPU step 10x slower: use the CPUs this process may run on.
        torch.set_num_threads(req.cpu_threads or len(os.sched_getaffinity(0)))
    gpu_name = req.gpu or device_gpu_name(dev)
    read, close = (None, lambda: None)
    if dev.startswith("cuda"):
        read, close = nvml_energy_reader(torch.device(dev).index or 0)
    try:
        with progressbar(length=len(configs) * req.sweeps, label="measuring", file=sys.stderr) as bar:
            results = measure(
                configs,
                gpu_name,
                dev,
                sweeps=req.sweeps,
                timing=timing,
                energy_j=read,
                on_run=lambda c, r: bar.update(1),
            )
    finally:
        close()
    power = "NVML total-energy counter" if read else "no power (no NVML energy counter)"
    source = f"{gpu_name} torch {torch.__version__}, synthetic on-device data, {req.sweeps} run(s), {power}"
    _write_and_print(results, out, source)


def _measure_parallel(
    configs: Sequence[MeasureConfig],
    out: str,
    sweeps: int,
    timing: Timing,
    gpu: str | None,
    device: str | None,
    cpu_threads: int | None,
) -> None:
    """--gpus on this machine: one-GPU configurations as always, the others on spawned ranks."""
    torch = import_torch()
    kind = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(kind, max(c.n_gpus for c in configs), torch.cuda.device_count() if kind == "cuda" else 0)
    one = "cuda:0" if kind == "cuda" else "cpu"
    gpu_name = gpu or device_gpu_name(one)
    read, close = nvml_energy_reader(0) if kind == "cuda" else (None, lambda: None)
    if kind != "cuda":
        torch.set_num_threads(cpu_threads or len(os.sched_getaffinity(0)))
    singles = [c for c in configs if c.n_gpus == 1]
    done: dict[MeasureConfig, Result] = {}
    with progressbar(length=len(configs), label="measuring", file=sys.stderr) as bar:
        try:
            if singles:
                for r in measure(singles, gpu_name, one, sweeps=sweeps, timing=timing, energy_j=read):
                    done[r.config] = r
                bar.update(len(singles))
        except ModelError as exc:  # every one-GPU configuration failed: the others may still run
            log.warning("%s", exc)
        finally:
            close()
        rest = [c for c in configs if c.n_gpus > 1]
        if rest:
            for r in measure_local(
                rest,
                gpu_name,
                kind,
                sweeps=sweeps,
                timing=timing,
                cpu_threads=cpu_threads,
                on_result=lambda r: bar.update(1),
            ):
                done[r.config] = r
    if not done:
        raise ModelError("no configuration could be measured (see the warnings)")
    backend = "NCCL" if kind == "cuda" else "gloo"
    power = "NVML total-energy counters of every GPU" if read else "no power (no NVML energy counter)"
    source = (
        f"{gpu_name} torch {torch.__version__}, synthetic on-device data, {sweeps} run(s), several GPUs: "
        f"DistributedDataParallel ({backend}) one process each, {power}"
    )
    _write_and_print([done[c] for c in configs if c in done], out, source)


def _ddp_task(
    configs: Sequence[MeasureConfig],
    out: str,
    sweeps: int,
    timing: Timing,
    gpu: str | None,
    device: str | None,
) -> None:
    """One rank of the srun step a --slurm job script starts; rank 0 writes the configuration's row."""
    if len(configs) != 1:
        raise ConfigError("--ddp-task: one configuration per srun step")
    cfg = configs[0]
    me = slurm_rank(os.environ, cfg.n_gpus)
    os.environ["MASTER_ADDR"] = master_addr(os.environ)
    torch = import_torch()
    kind = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(kind, cfg.n_gpus // cfg.n_nodes, torch.cuda.device_count() if kind == "cuda" else 0)
    if kind != "cuda":
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    runs = run_rank(me, cfg, kind, timing, sweeps)
    if runs is None:
        return
    gpu_name = gpu or device_gpu_name("cuda:0" if kind == "cuda" else "cpu")
    source = f"{gpu_name} torch {torch.__version__} DistributedDataParallel, rank 0 of {me.world}"
    write_results([Result(cfg, tuple(runs), gpu_name)], out, source)


def _write_and_print(results: Sequence[Result], out: str, source: str) -> None:
    write_results(results, out, source)
    for r in results:
        p = "-" if r.avg_power_w is None else f"{r.avg_power_w:.1f}W"
        c = r.config
        gpus = f" on {c.n_gpus} GPUs" if c.n_gpus > 1 else ""
        comm = "" if r.comm_exposed_s is None else f"  comm {r.comm_exposed_s * 1e3:.2f} ms exposed"
        click.echo(
            f"{c.model} batch {c.batch} {c.precision}{gpus}: {r.step_time_s * 1e3:.2f} ms/step  {p}{comm}"
        )
    click.echo(f"wrote {out} ({len(results)} configurations)")


def _abs(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None
