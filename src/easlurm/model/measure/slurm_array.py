"""`easlurm model measure --slurm`: one array task per configuration, profiled with `--energy-profile`;
step times from the tasks' CSVs, GPU power from the energy records `easlurm sacct` decodes."""

from __future__ import annotations

import csv
import logging
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from easlurm.errors import EaslurmError, SlurmError, TraceError
from easlurm.model.measure.steps import MeasureConfig, Result, Run, Timing

log = logging.getLogger(__name__)


def task_args(cfg: MeasureConfig) -> list[str]:
    """The `easlurm model measure` arguments of one configuration."""
    args = ["--model", cfg.model, "--batch", str(cfg.batch), "--precision", cfg.precision]
    args += ["--optimizer", cfg.optimizer]
    if cfg.seq_len is not None:
        args += ["--seq-len", str(cfg.seq_len)]
    if cfg.image_size is not None:
        args += ["--image-size", str(cfg.image_size)]
    return args


def array_script(
    configs: Sequence[MeasureConfig],
    work_dir: Path,
    *,
    sweeps: int,
    timing: Timing,
    gpu: str | None,
    partition: str | None = None,
    time_limit: str | None = None,
    gres: str | None = "gpu:1",
    config_path: str | None = None,
    python: str = sys.executable,
) -> str:
    """The sbatch script: task I measures configuration I alone and writes task-I.csv into `work_dir`."""
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=easlurm-measure",
        f"#SBATCH --array=0-{len(configs) - 1}",
        f"#SBATCH --output={work_dir}/task-%A_%a.out",
        "#SBATCH --energy-profile=gpu",
    ]
    if gres:
        lines.append(f"#SBATCH --gres={gres}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    lines.append("set -eu")
    lines.append('case "$SLURM_ARRAY_TASK_ID" in')
    for i, c in enumerate(configs):
        lines.append(f"  {i}) ARGS=({shlex.join(task_args(c))}) ;;")
    lines.append('  *) echo "no configuration $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;')
    lines.append("esac")
    cmd = [python, "-m", "easlurm.cli"]
    if config_path:
        cmd += ["-c", config_path]
    cmd += ["model", "measure", "--sweeps", str(sweeps)]
    cmd += ["--warmup", f"{timing.warmup_s:g}s", "--window", f"{timing.window_s:g}s"]
    if gpu:
        cmd += ["--gpu", gpu]
    out = f"{work_dir}/task-$SLURM_ARRAY_TASK_ID.csv"
    lines.append(f'{shlex.join(cmd)} "${{ARGS[@]}}" -O "{out}"')
    return "\n".join(lines) + "\n"


def task_gpu_power_w(admin_comment: str) -> float | None:
    """Mean GPU power of a task's batch step from its energy record (the one place that decodes them)."""
    from easlurm.accounting.step_record import decode_admin_comment

    for step in decode_admin_comment(admin_comment):
        if step.step == "batch":
            energy, duration = step.gpu_energy_j, step.duration_s
            return None if energy is None or not duration else energy / duration
    return None


def read_task_csv(path: Path, cfg: MeasureConfig) -> Result:
    """One task's result (the CSV `easlurm model measure` wrote), keeping its individual runs."""
    from easlurm.model.fit.dataset import read_measurements

    rows = read_measurements(path)
    with path.open(newline="") as fh:
        rec = next(csv.DictReader(line for line in fh if not line.startswith("#")))
    times = [float(v) for v in (rec.get("step_time_s_runs") or "").split(";") if v] or [rows[0].step_time_s]
    n_params = int(rec.get("n_params") or 0)
    peak = rows[0].peak_mem_gib
    return Result(cfg, tuple(Run(t, None, peak, n_params, 0) for t in times), rows[0].gpu)


def measure_on_slurm(
    configs: Sequence[MeasureConfig],
    out: str,
    *,
    sweeps: int,
    timing: Timing,
    gpu: str | None,
    partition: str | None = None,
    time_limit: str | None = None,
    gres: str | None = "gpu:1",
    config_path: str | None = None,
    record_wait_s: float = 120.0,
    sacct: Callable[[str], list[dict[str, str]]] | None = None,
) -> list[Result]:
    """Submit the array, wait for it, and assemble one Result per configuration that produced a CSV.

    The power is the GPU energy of the whole task over its duration (warm-up and model build included),
    so it reads lower than the NVML window of a local run. A task without a CSV is reported and left out."""
    from easlurm.slurm.client import CliSlurmClient

    work_dir = Path(f"{Path(out).with_suffix('')}.slurm").resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    script = work_dir / "measure.sbatch"
    script.write_text(
        array_script(
            configs,
            work_dir,
            sweeps=sweeps,
            timing=timing,
            gpu=gpu,
            partition=partition,
            time_limit=time_limit,
            gres=gres,
            config_path=config_path,
        )
    )
    client = CliSlurmClient()
    job_id, status, err = client.submit_batch(str(script), wait=True)
    if status != 0:
        log.warning("measurement array %s ended with exit %d: %s", job_id, status, err)
    query = sacct or (lambda j: client.sacct(["-j", j, "-X"], ["JobID", "State", "AdminComment"]))
    results: list[Result] = []
    pending = {}
    for i, c in enumerate(configs):
        path = work_dir / f"task-{i}.csv"
        if not path.is_file():
            log.warning(
                "task %s_%d (%s) wrote no CSV: see %s/task-%s_%d.out", job_id, i, c, work_dir, job_id, i
            )
            continue
        try:
            results.append(read_task_csv(path, c))
        except TraceError as exc:
            log.warning("task %s_%d: %s", job_id, i, exc)
            continue
        pending[f"{job_id}_{i}"] = len(results) - 1
    deadline = time.monotonic() + record_wait_s
    while pending:
        for row in query(job_id):
            idx = pending.get(row.get("JobID", ""))
            if idx is None or not row.get("AdminComment"):
                continue
            try:
                power = task_gpu_power_w(row["AdminComment"])
            except EaslurmError as exc:
                log.warning("task %s: energy record unreadable (%s)", row["JobID"], exc)
                power = None
            r = results[idx]
            results[idx] = replace(r, runs=tuple(replace(x, avg_power_w=power) for x in r.runs))
            del pending[row["JobID"]]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)
    for task in pending:
        log.warning("task %s: no energy record in easlurm sacct; its power is left empty", task)
    if not results:
        raise SlurmError(f"measurement array {job_id}: no task produced a measurement (logs in {work_dir})")
    return results
