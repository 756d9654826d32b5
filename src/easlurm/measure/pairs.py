"""`easlurm model measure --pairs`: two zoo-model processes time-sliced on one GPU, each one's step time
alone and shared, and the GPU's power, for the co-location model.

Every job is first measured alone, then each pair as two processes started together: both build and warm
up, wait at a barrier, and time a window of at least `window_s` from the same instant; a process that
finishes its window keeps stepping until the other has finished too, so both windows are contended
throughout. GPU power is the NVML energy counter read at the barrier and when the first window ends.
The processes run through `corun`; the GPU is shared as the driver time-slices it (no MPS, compute mode,
clock or power-limit change).
"""

from __future__ import annotations

import csv
import importlib.util
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from easlurm.errors import ConfigError, ModelError
from easlurm.files import atomic_writer
from easlurm.measure import steps as measure_steps
from easlurm.measure.corun import Gate, GroupResult, Runner, Window, job_text, run_group
from easlurm.measure.steps import (
    MODES,
    PRECISIONS,
    TORCH_MODELS,
    MeasureConfig,
    Timing,
    configurations,
    default_device,
    device_gpu_name,
    import_torch,
    nvml_energy_reader,
)
from easlurm.model.colocation import CoRun, GpuFacts, Sharing, Solo, corun, predict_solo
from easlurm.model.oracle import Oracle
from easlurm.model.zoo import get_workload
from easlurm.progress import progressbar
from easlurm.units import MAX_INT

log = logging.getLogger(__name__)

PAIR_COLUMNS = (
    "pair",
    "job",
    "model",
    "batch",
    "precision",
    "mode",
    "seq_len",
    "image_size",
    "gpu",
    "partner",
    "step_time_alone_s",
    "step_time_shared_s",
    "slowdown",
    "gpu_power_alone_w",
    "gpu_power_shared_w",
    "steps_shared",
    "overlap_s",
    "source",
)


def torch_runner(cfg: MeasureConfig, device: str, timing: Timing, gate: Gate) -> None:
    """The torch job of `easlurm model measure` (same build, precision and warm-up), gated. `prepare` is
    looked up when the job runs, so a stub of it reaches the forked processes."""
    p = measure_steps.prepare(cfg, device, timing)
    t0 = gate.wait_start()
    steps = 0
    chunk = max(1, math.ceil(timing.window_s / max(p.warm_step_s, 1e-6)))
    while True:
        for _ in range(chunk):
            p.step()
        p.sync()
        steps += chunk
        elapsed = time.monotonic() - t0
        if elapsed >= timing.window_s:
            break
        chunk = max(1, math.ceil((timing.window_s - elapsed) / (elapsed / steps)))
    gate.report(Window(t0, time.monotonic(), steps))
    while not gate.stopped:
        p.step()
        p.sync()


# -- the pairs --------------------------------------------------------------------------------------------


def _is_precision(text: str) -> bool:
    try:
        measure_steps.measured_precision(text)
    except ConfigError:
        return False
    return True


def parse_job(
    text: str,
    precision: str,
    where: str,
    optimizer: str = "adamw",
    seq_len: int | None = None,
    image_size: int | None = None,
) -> MeasureConfig:
    """`MODEL:BATCH[:PRECISION][:train|infer]` -> a configuration; errors name `where`."""
    parts = [p.strip() for p in text.split(":")]
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ConfigError(f"{where}: expected MODEL:BATCH[:PRECISION][:train|infer], got {text!r}")
    try:
        batch = int(parts[1])
    except ValueError:
        raise ConfigError(f"{where}: batch must be an integer, got {parts[1]!r} in {text!r}") from None
    if not 1 <= batch <= MAX_INT:
        raise ConfigError(f"{where}: batch must be >= 1 and <= {MAX_INT}, got {batch} in {text!r}")
    mode = "train"
    for extra in parts[2:]:
        if extra in MODES:
            mode = extra
        elif _is_precision(extra):
            precision = extra
        else:
            raise ConfigError(
                f"{where}: {extra!r} in {text!r} is neither a precision ({', '.join(PRECISIONS)}) "
                f"nor a mode ({', '.join(MODES)})"
            )
    try:
        (cfg,) = configurations([parts[0]], [batch], [precision], optimizer, seq_len, image_size)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {str(exc).removeprefix('--model: ')}") from None
    return MeasureConfig(
        cfg.model, cfg.batch, cfg.precision, cfg.optimizer, cfg.seq_len, cfg.image_size, mode
    )


def predict_pair(
    oracle: Oracle, first: str, second: str, gpu: str, sharing: str
) -> tuple[tuple[Solo, Solo], CoRun]:
    """Each job alone (a Solo) and the two sharing one GPU (a CoRun), for jobs named MODEL:BATCH[:PRECISION]
    (bf16 unless named); what `easlurm model corun` prints and docs/colocation.md quotes."""
    solos = []
    for text, name in ((first, "FIRST"), (second, "SECOND")):
        job = parse_job(text, "bf16", name)
        if job.mode != "train":
            raise ConfigError(f"{name}: the oracle predicts training steps; {text!r} is {job.mode}")
        workload = get_workload(
            job.model, precision=job.precision, seq_len=job.seq_len, image_size=job.image_size
        )
        solo = predict_solo(oracle, workload, job.batch, gpu)
        if solo is None:
            raise ConfigError(f"{name}: {job.model} batch {job.batch} does not fit one {gpu}")
        solos.append(solo)
    facts = GpuFacts.of(oracle.catalogue.get(gpu), oracle.params)
    return (solos[0], solos[1]), corun(solos[0], solos[1], facts, Sharing(sharing), oracle.params)


def parse_pairs(
    text: str,
    precision: str = "bf16",
    optimizer: str = "adamw",
    seq_len: int | None = None,
    image_size: int | None = None,
) -> list[tuple[MeasureConfig, MeasureConfig]]:
    """`A+B[,C+D...]` with each job `MODEL:BATCH[:PRECISION][:train|infer]`; the other settings are
    the command's (`--precision` as each job's default)."""
    pairs = []
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise ConfigError("--pairs: expected JOB+JOB[,JOB+JOB...], got nothing")
    for item in items:
        if not item:
            raise ConfigError(f"--pairs: empty item in {text!r}")
        jobs = item.split("+")
        if len(jobs) != 2:
            raise ConfigError(
                f"--pairs: {item!r} must be two jobs joined by '+' (e.g. bert-base:32+resnet50:64)"
            )
        a, b = (parse_job(j, precision, f"--pairs {item!r}", optimizer, seq_len, image_size) for j in jobs)
        pairs.append((a, b))
    return pairs


# -- the sweep and its CSV --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairRow:
    """One job of one pair: its step time alone and shared, the GPU's power alone and shared."""

    pair: int
    job: str
    config: MeasureConfig
    partner: MeasureConfig
    alone: GroupResult
    shared: GroupResult
    index: int

    @property
    def step_time_alone_s(self) -> float:
        return self.alone.windows[0].step_time_s

    @property
    def step_time_shared_s(self) -> float:
        return self.shared.windows[self.index].step_time_s

    @property
    def slowdown(self) -> float:
        return self.step_time_shared_s / self.step_time_alone_s


def measure_pairs(
    pairs: Sequence[tuple[MeasureConfig, MeasureConfig]],
    device: str,
    *,
    runner: Runner = torch_runner,
    timing: Timing | None = None,
    energy_j: Callable[[], float | None] | None = None,
    context: str = "spawn",
    on_group: Callable[[], None] | None = None,
) -> list[PairRow]:
    """Each distinct job alone, then each pair; a job or pair that fails is left out with a warning."""
    timing = timing or Timing()
    alone: dict[MeasureConfig, GroupResult] = {}
    failed: set[MeasureConfig] = set()
    for cfg in dict.fromkeys(c for pair in pairs for c in pair):
        try:
            alone[cfg] = run_group([cfg], runner, device, timing, energy_j, context)
        except ModelError as exc:
            log.warning("left out (alone): %s", exc)
            failed.add(cfg)
        if on_group:
            on_group()
    rows: list[PairRow] = []
    for n, (a, b) in enumerate(pairs, start=1):
        if a in failed or b in failed:
            log.warning("left out: pair %d (%s + %s): a job failed alone", n, job_text(a), job_text(b))
            continue
        try:
            shared = run_group([a, b], runner, device, timing, energy_j, context)
        except ModelError as exc:
            log.warning("left out: pair %d: %s", n, exc)
            continue
        finally:
            if on_group:
                on_group()
        rows.append(PairRow(n, "a", a, b, alone[a], shared, 0))
        rows.append(PairRow(n, "b", b, a, alone[b], shared, 1))
    if not rows:
        raise ModelError(f"no pair could be measured ({len(pairs)} asked; see the warnings)")
    return rows


def _round(x: float | None, digits: int) -> float | str:
    return "" if x is None else round(x, digits)


def write_pairs(rows: Sequence[PairRow], path: str | Path, gpu: str, source: str) -> None:
    """The pair CSV (PAIR_COLUMNS), with a comment line saying how it was made."""
    with atomic_writer(path, "--out", newline="") as fh:
        fh.write(f"# {source}\n")
        w = csv.writer(fh)
        w.writerow(PAIR_COLUMNS)
        for r in rows:
            c, p = r.config, r.partner
            w.writerow(
                [
                    r.pair,
                    r.job,
                    c.model,
                    c.batch,
                    c.precision,
                    c.mode,
                    "" if c.seq_len is None else c.seq_len,
                    "" if c.image_size is None else c.image_size,
                    gpu,
                    f"{p.model}:{p.batch}:{p.precision}:{p.mode}",
                    round(r.step_time_alone_s, 6),
                    round(r.step_time_shared_s, 6),
                    round(r.slowdown, 4),
                    _round(r.alone.gpu_power_w, 1),
                    _round(r.shared.gpu_power_w, 1),
                    r.shared.windows[r.index].steps,
                    round(r.shared.overlap_s, 3),
                    source,
                ]
            )


# -- command ---------------------------------------------------------------------------------------------


def pairs_command(
    pairs: Sequence[tuple[MeasureConfig, MeasureConfig]],
    out: str,
    timing: Timing,
    device: str | None,
    gpu: str | None,
    cpu_threads: int | None,
) -> None:
    """The `--pairs` path of `easlurm model measure` (torch, the CUDA device, NVML power)."""
    torch = import_torch()
    configs = {c for pair in pairs for c in pair}
    for lib in sorted({TORCH_MODELS[c.model] for c in configs} - {"torch"}):
        if importlib.util.find_spec(lib) is None:
            needing = sorted({c.model for c in configs if TORCH_MODELS[c.model] == lib})
            raise ModelError(f"model {', '.join(needing)} needs {lib}: pip install 'easlurm[torch]' {lib}")
    dev = device or default_device()
    env_before = os.environ.get("OMP_NUM_THREADS")
    if not dev.startswith("cuda"):
        log.warning("--pairs on %s: the two processes share CPU cores, not a GPU", dev)
        # Children read the thread count when torch is imported: set it in the environment they inherit.
        os.environ["OMP_NUM_THREADS"] = str(cpu_threads or max(1, len(os.sched_getaffinity(0)) // 2))
    gpu_name = gpu or device_gpu_name(dev)
    read, close = (None, lambda: None)
    if dev.startswith("cuda"):
        read, close = nvml_energy_reader(torch.device(dev).index or 0)
    groups = len(configs) + len(pairs)
    try:
        with progressbar(length=groups, label="measuring pairs", file=sys.stderr) as bar:
            rows = measure_pairs(pairs, dev, timing=timing, energy_j=read, on_group=lambda: bar.update(1))
    finally:
        close()
        if env_before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_before
    power = "NVML total-energy counter over the overlap" if read else "no power (no NVML energy counter)"
    source = (
        f"easlurm model measure --pairs: {gpu_name} torch {torch.__version__}, two processes time-sliced "
        f"on {dev} (no MPS), barrier-aligned windows of >= {timing.window_s:g} s, {power}"
    )
    write_pairs(rows, out, gpu_name, source)
    for r in rows:
        c = r.config
        p = "-" if r.shared.gpu_power_w is None else f"{r.shared.gpu_power_w:.1f}W"
        click.echo(
            f"pair {r.pair}{r.job} {c.model} batch {c.batch} {c.precision} {c.mode}: "
            f"{r.step_time_alone_s * 1e3:.2f} -> {r.step_time_shared_s * 1e3:.2f} ms/step "
            f"(x{r.slowdown:.2f}), GPU {p}"
        )
    click.echo(f"wrote {out} ({len(rows) // 2} pairs)")
