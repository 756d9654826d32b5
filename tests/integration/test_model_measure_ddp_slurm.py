"""`easlurm model measure --slurm --gpus N --nodes M` on the local cluster: one array task of M nodes per
configuration, one srun task per GPU meeting on the first node; the power from the srun step's energy
record over all its nodes (fake NVML), the exposed communication from rank 0's CSV."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Any

import pytest
from spank_support import GPU_W, plugin_with_fake_sensors, run_easlurm

pytestmark = pytest.mark.slurm

TINY = ("--model", "shufflenet", "--precision", "fp32", "--image-size", "32", "--sweeps", "1")


def test_the_two_node_job_script_is_one_sbatch_accepts(slurm_box: Any, tmp_path: Path) -> None:
    """--dry-run writes and prints the scripts; Slurm itself accepts the 2-node, 1-task-per-GPU request
    (sbatch --test-only: checked against the partition's nodes and GRES, nothing queued)."""
    out = tmp_path / "m.csv"
    with plugin_with_fake_sensors(slurm_box):
        res = run_easlurm(
            slurm_box,
            *("model", "measure", *TINY, "--batch", "4", "--gpus", "2,4", "--nodes", "2"),
            *("--slurm", "--dry-run", "--partition", "h100", "-O", str(out)),
        )
        assert res.returncode == 0, res.stderr
        scripts = sorted((tmp_path / "m.slurm").glob("*.sbatch"))
        assert [p.name for p in scripts] == ["measure-2gpus-2nodes.sbatch", "measure-4gpus-2nodes.sbatch"]
        for script in scripts:
            assert f"# {script}" in res.stdout and "srun --nodes=2" in script.read_text()
            test = subprocess.run(
                ["sbatch", "--test-only", str(script)],
                env=slurm_box.env | _path(),
                capture_output=True,
                text=True,
            )
            assert test.returncode == 0 and "to start at" in test.stderr, test.stderr
    assert not out.exists()


def _path() -> dict[str, str]:
    import os

    return {"PATH": os.environ["PATH"]}


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (easlurm[torch])")
def test_two_ranks_on_two_nodes_measure_steps_comm_and_power(slurm_box: Any, tmp_path: Path) -> None:
    """2 GPUs over the 2 h100 nodes (fake GPUs, CPU torch: gloo): one row with n_gpus 2, a step time, the
    exposed communication (>= 0) and the power of both GPUs of the srun step, i.e. 2 x GPU_W."""
    out = tmp_path / "m.csv"
    with plugin_with_fake_sensors(slurm_box):
        res = run_easlurm(
            slurm_box,
            *("model", "measure", *TINY, "--batch", "4", "--gpus", "2", "--nodes", "2"),
            *("--warmup", "0s", "--window", "0.1s", "--slurm", "--partition", "h100", "--gpu", "h100-sxm"),
            *("-O", str(out)),
            timeout=300,
        )
    logs = "".join(p.read_text() for p in (tmp_path / "m.slurm").glob("*.out"))
    assert res.returncode == 0, res.stderr + logs
    from easlurm.model.fit.dataset import read_measurements

    (row,) = read_measurements(out)
    assert (row.model, row.batch, row.n_gpus, row.n_nodes) == ("shufflenet-small", 4, 2, 2)
    assert row.gpu == "h100-sxm"
    assert row.step_time_s > 0 and row.comm_exposed_s is not None and row.comm_exposed_s >= 0
    assert row.avg_power_w == pytest.approx(2 * GPU_W, rel=0.05), row.avg_power_w
