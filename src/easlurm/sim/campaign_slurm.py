"""Submit a campaign as one Slurm job array (a chunk of runs per task, all writing the same out dir)."""

from __future__ import annotations

import logging
import math
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from easlurm.errors import SlurmError
from easlurm.slurm.client import CliSlurmClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArraySubmission:
    """The submitted array: its job id, task count and the batch script it ran."""

    job_id: str
    n_tasks: int
    script: Path


def array_script(
    plan_path: Path,
    out_dir: Path,
    *,
    chunk_size: int,
    n_tasks: int,
    partition: str | None = None,
    time_limit: str | None = None,
    config_path: str | None = None,
    runner_ref: str | None = None,
    python: str = sys.executable,
) -> str:
    """The sbatch script: task I runs `easlurm sim campaign PLAN --chunk I` with this interpreter."""
    slurm_dir = out_dir / "slurm"
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=easlurm-campaign",
        f"#SBATCH --array=0-{n_tasks - 1}",
        f"#SBATCH --output={slurm_dir}/task-%A_%a.out",
        "#SBATCH --cpus-per-task=1",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    cmd = [python, "-m", "easlurm.cli"]
    if config_path:
        cmd += ["-c", config_path]
    cmd += ["sim", "campaign", str(plan_path), "--out", str(out_dir), "--jobs", "1"]
    cmd += ["--chunk-size", str(chunk_size), "--no-report", "--no-progress"]
    if runner_ref:
        cmd += ["--runner", runner_ref]
    lines.append("set -eu")
    lines.append(" ".join(shlex.quote(c) for c in cmd) + ' --chunk "$SLURM_ARRAY_TASK_ID"')
    return "\n".join(lines) + "\n"


def plan_chunks(n_runs: int, max_tasks: int) -> tuple[int, int]:
    """(chunk_size, n_tasks): at most `max_tasks` array tasks of equal chunks covering all runs."""
    if n_runs < 1:
        raise SlurmError("nothing to submit: the plan has no runs left")
    chunk = max(1, math.ceil(n_runs / max(1, max_tasks)))
    return chunk, math.ceil(n_runs / chunk)


def submit_array(
    plan_path: Path,
    out_dir: Path,
    n_runs: int,
    *,
    max_tasks: int = 64,
    partition: str | None = None,
    time_limit: str | None = None,
    config_path: str | None = None,
    runner_ref: str | None = None,
    wait: bool = True,
    sbatch: Sequence[str] = ("sbatch",),
) -> ArraySubmission:
    """Write the script and submit it; with `wait`, return only when every task has ended (sbatch --wait).

    A failed task is not an error here: the caller finds the missing runs and reports them.
    """
    chunk, n_tasks = plan_chunks(n_runs, max_tasks)
    script = out_dir / "slurm" / "campaign.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        array_script(
            plan_path.resolve(),
            out_dir.resolve(),
            chunk_size=chunk,
            n_tasks=n_tasks,
            partition=partition,
            time_limit=time_limit,
            config_path=config_path,
            runner_ref=runner_ref,
        )
    )
    log.info("submitting %d runs as %d array tasks: %s", n_runs, n_tasks, script)
    job_id, status, err = CliSlurmClient().submit_batch(str(script), wait=wait, sbatch=sbatch)
    if status != 0:
        log.warning("job array %s ended with exit %d: %s", job_id, status, err)
    return ArraySubmission(job_id=job_id, n_tasks=n_tasks, script=script)
