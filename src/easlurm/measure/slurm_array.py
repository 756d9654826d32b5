"""`easlurm model measure --slurm`: one array task per configuration, profiled with `--energy-profile`;
step times from the tasks' CSVs, GPU power from the energy records `easlurm sacct` decodes.

A data-parallel configuration (`--gpus N --nodes M`) is an array task of M nodes running one srun step of
N tasks, one per GPU, that meet on the allocation's first node; one array per GPU count (Slurm gives all
tasks of an array the same resources)."""

from __future__ import annotations

import csv
import logging
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from easlurm.accounting.step_record import decode_admin_comment
from easlurm.errors import EaslurmError, SlurmError, TraceError
from easlurm.measure.steps import MeasureConfig, Result, Run, Timing
from easlurm.model.fit.dataset import read_measurements
from easlurm.slurm.client import CliSlurmClient

log = logging.getLogger(__name__)

#: The module a data-parallel job script runs on its first node for MASTER_ADDR and MASTER_PORT.
RENDEZVOUS = "easlurm.measure.rendezvous"


def task_args(cfg: MeasureConfig) -> list[str]:
    """The `easlurm model measure` arguments of one configuration."""
    args = ["--model", cfg.model, "--batch", str(cfg.batch), "--precision", cfg.precision]
    args += ["--optimizer", cfg.optimizer]
    if cfg.seq_len is not None:
        args += ["--seq-len", str(cfg.seq_len)]
    if cfg.image_size is not None:
        args += ["--image-size", str(cfg.image_size)]
    if is_parallel(cfg):
        args += ["--gpus", str(cfg.n_gpus), "--nodes", str(cfg.n_nodes)]
    return args


def is_parallel(cfg: MeasureConfig) -> bool:
    """Whether a configuration runs data-parallel ranks (an srun step) rather than one process."""
    return cfg.n_gpus > 1 or cfg.n_nodes > 1


def groups(configs: Sequence[MeasureConfig]) -> dict[tuple[int, int], list[int]]:
    """Configuration indices by (GPUs, nodes), in order: one array each."""
    out: dict[tuple[int, int], list[int]] = {}
    for i, c in enumerate(configs):
        out.setdefault((c.n_gpus, c.n_nodes), []).append(i)
    return out


def script_name(n_gpus: int, n_nodes: int) -> str:
    """The sbatch file of one array in the work folder (the one-GPU array keeps its old name)."""
    return "measure.sbatch" if (n_gpus, n_nodes) == (1, 1) else f"measure-{n_gpus}gpus-{n_nodes}nodes.sbatch"


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
    indices: Sequence[int] | None = None,
) -> str:
    """The sbatch script: task I measures configuration I alone and writes task-I.csv into `work_dir`.

    `indices` picks the configurations of this array (all by default), which must share their GPU and node
    counts. A data-parallel one asks M nodes with N/M tasks and GPUs each (`gres` is then the GPUs per
    node, derived when None) and runs them as one srun step whose ranks meet on the first node."""
    picked = list(range(len(configs))) if indices is None else list(indices)
    shapes = {(configs[i].n_gpus, configs[i].n_nodes) for i in picked}
    if len(shapes) != 1:
        raise ValueError("one array per (GPUs, nodes): split the configurations with groups()")
    n_gpus, n_nodes = shapes.pop()
    parallel = (n_gpus, n_nodes) != (1, 1)
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=easlurm-measure",
        f"#SBATCH --array={_array_spec(picked)}",
        f"#SBATCH --output={work_dir}/task-%A_%a.out",
        "#SBATCH --energy-profile=gpu",
    ]
    if parallel:
        lines += [f"#SBATCH --nodes={n_nodes}", f"#SBATCH --ntasks-per-node={n_gpus // n_nodes}"]
    if gres:
        lines.append(f"#SBATCH --gres={gres}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    lines.append("set -eu")
    lines.append('case "$SLURM_ARRAY_TASK_ID" in')
    for i in picked:
        lines.append(f"  {i}) ARGS=({shlex.join(task_args(configs[i]))}) ;;")
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
    if not parallel:
        lines.append(f'{shlex.join(cmd)} "${{ARGS[@]}}" -O "{out}"')
        return "\n".join(lines) + "\n"
    # This script runs on the allocation's first node: rank 0's rendezvous, on a port free there now.
    lines.append(f"read -r MASTER_ADDR MASTER_PORT < <({shlex.join([python, '-m', RENDEZVOUS])})")
    lines.append("export MASTER_ADDR MASTER_PORT")
    srun = ["srun", f"--nodes={n_nodes}", f"--ntasks={n_gpus}", f"--ntasks-per-node={n_gpus // n_nodes}"]
    srun.append("--kill-on-bad-exit=1")  # a rank that fails must not leave the others in a collective
    lines.append(f'{shlex.join([*srun, *cmd, "--ddp-task"])} "${{ARGS[@]}}" -O "{out}"')
    return "\n".join(lines) + "\n"


def _array_spec(indices: Sequence[int]) -> str:
    """Slurm's --array list: '0-3' for a run of indices, else '1,4,7'."""
    if list(indices) == list(range(indices[0], indices[0] + len(indices))):
        return f"{indices[0]}-{indices[-1]}"
    return ",".join(str(i) for i in indices)


def default_gres(cfg: MeasureConfig) -> str:
    """The GPUs one node of a configuration's task asks for."""
    return f"gpu:{cfg.n_gpus // cfg.n_nodes}"


def task_gpu_power_w(admin_comment: str, step_name: str = "batch") -> float | None:
    """Mean GPU power of a task's step (its batch step, or step 0, the srun step of data-parallel ranks,
    over all its nodes) from its energy record (the one place that decodes them)."""
    for step in decode_admin_comment(admin_comment):
        if step.step == step_name:
            energy, duration = step.gpu_energy_j, step.duration_s
            return None if energy is None or not duration else energy / duration
    return None


def read_task_csv(path: Path, cfg: MeasureConfig) -> Result:
    """One task's result (the CSV `easlurm model measure` wrote), keeping its individual runs."""
    rows = read_measurements(path)
    with path.open(newline="") as fh:
        rec = next(csv.DictReader(line for line in fh if not line.startswith("#")))
    times = [float(v) for v in (rec.get("step_time_s_runs") or "").split(";") if v] or [rows[0].step_time_s]
    comm: list[float | None] = [float(v) for v in (rec.get("comm_exposed_s_runs") or "").split(";") if v]
    if len(comm) != len(times):
        comm = [rows[0].comm_exposed_s] * len(times)
    n_params = int(rec.get("n_params") or 0)
    peak = rows[0].peak_mem_gib
    runs = tuple(Run(t, None, peak, n_params, 0, x) for t, x in zip(times, comm))
    return Result(cfg, runs, rows[0].gpu)


def measure_on_slurm(
    configs: Sequence[MeasureConfig],
    out: str,
    *,
    sweeps: int,
    timing: Timing,
    gpu: str | None,
    partition: str | None = None,
    time_limit: str | None = None,
    gres: str | None = None,
    config_path: str | None = None,
    record_wait_s: float = 120.0,
    sacct: Callable[[str], list[dict[str, str]]] | None = None,
    dry_run: Callable[[str], None] | None = None,
) -> list[Result]:
    """Submit one array per GPU count in turn, wait for each, and assemble one Result per configuration
    that produced a CSV. `gres` is the GRES per node ('' for none; None: the GPUs each node's tasks use);
    `dry_run` receives each script's path and text instead of submitting.

    The power is the GPU energy of the whole task (its srun step for data-parallel ranks) over its duration
    (warm-up and model build included), so it reads lower than the NVML window of a local run. A task
    without a CSV is reported and left out."""
    work_dir = Path(f"{Path(out).with_suffix('')}.slurm").resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    client = CliSlurmClient()
    submitted: list[tuple[str, int]] = []
    for (n_gpus, n_nodes), indices in groups(configs).items():
        script = work_dir / script_name(n_gpus, n_nodes)
        text = array_script(
            configs,
            work_dir,
            sweeps=sweeps,
            timing=timing,
            gpu=gpu,
            partition=partition,
            time_limit=time_limit,
            gres=default_gres(configs[indices[0]]) if gres is None else (gres or None),
            config_path=config_path,
            indices=indices,
        )
        script.write_text(text)
        if dry_run is not None:
            dry_run(f"# {script}\n{text}")
            continue
        job_id, status, err = client.submit_batch(str(script), wait=True)
        if status != 0:
            log.warning("measurement array %s ended with exit %d: %s", job_id, status, err)
        submitted += [(job_id, i) for i in indices]
    if dry_run is not None:
        return []
    query = sacct or (lambda j: client.sacct(["-j", j, "-X"], ["JobID", "State", "AdminComment"]))
    results, pending = _task_results(configs, submitted, work_dir)
    _add_task_power(results, pending, query, record_wait_s)
    if not results:
        jobs = ", ".join(sorted({j for j, _ in submitted}))
        raise SlurmError(f"measurement array {jobs}: no task produced a measurement (logs in {work_dir})")
    return results


def _task_results(
    configs: Sequence[MeasureConfig], submitted: Sequence[tuple[str, int]], work_dir: Path
) -> tuple[list[Result], dict[str, tuple[int, str]]]:
    """The Result of each task that wrote a readable CSV (the others are reported and left out), and for
    each the task's `JOBID_INDEX` -> (its Result's index, the step whose energy is its power)."""
    results: list[Result] = []
    pending: dict[str, tuple[int, str]] = {}
    for job_id, i in submitted:
        c = configs[i]
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
        pending[f"{job_id}_{i}"] = (len(results) - 1, "0" if is_parallel(c) else "batch")
    return results, pending


def _add_task_power(
    results: list[Result],
    pending: dict[str, tuple[int, str]],
    query: Callable[[str], list[dict[str, str]]],
    record_wait_s: float,
) -> None:
    """Set each pending task's power from its energy record in easlurm sacct, polling up to `record_wait_s`
    for the records to arrive (the agent publishes them after the task ends); a task whose record never
    comes keeps no power."""
    deadline = time.monotonic() + record_wait_s
    while pending:
        for job_id in sorted({task.split("_")[0] for task in pending}):
            for row in query(job_id):
                where = pending.get(row.get("JobID", ""))
                if where is None or not row.get("AdminComment"):
                    continue
                idx, step = where
                try:
                    power = task_gpu_power_w(row["AdminComment"], step)
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
