"""The local heterogeneous Slurm cluster: GPU types, GRES environment, accounting, MPI, restart."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _job_output(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"{name}.out"


@pytest.mark.parametrize(("gpu_type", "count"), [("a100", 2), ("h100", 4)])
def test_gpu_job_runs_on_right_type_with_visible_devices(
    slurm_box, tmp_path: Path, gpu_type: str, count: int
) -> None:
    """A job asking for gpu:<type>:N lands on a node of that type and sees exactly N devices."""
    out = _job_output(tmp_path, gpu_type)
    job = slurm_box.sbatch(
        f"--gres=gpu:{gpu_type}:{count}",
        "-o",
        str(out),
        "--wrap",
        "echo node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES; srun bash -c 'echo step=$SLURM_STEP_GPUS'",
    )
    assert slurm_box.wait_job(job) == "COMPLETED"
    text = out.read_text()
    node = text.split("node=")[1].split()[0]
    assert node.startswith(f"{gpu_type}-")
    cvd = text.split("cvd=")[1].split()[0].split(",")
    assert cvd == [str(i) for i in range(count)]
    step_gpus = text.split("step=")[1].split()[0].split(",")
    assert len(step_gpus) == count
    res = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,NodeList,AllocTRES"])
    state, nodelist, tres = res.stdout.strip().split("|")
    assert state == "COMPLETED" and nodelist == node
    assert f"gres/gpu={count}" in tres and f"gres/gpu:{gpu_type}={count}" in tres


def test_partitions_and_nodes(slurm_box) -> None:
    """Partitions per GPU type and one spanning all; five nodes with the declared GRES."""
    res = slurm_box.run(["sinfo", "-h", "-N", "-o", "%N|%P|%G"])
    rows = {tuple(line.split("|")) for line in res.stdout.split()}
    gres = {node: g for node, _p, g in rows}
    assert gres["a100-1"].startswith("gpu:a100:8") and gres["h100-2"].startswith("gpu:h100:8")
    assert gres["cpu-1"] == "(null)"
    parts = {p.rstrip("*") for _n, p, _g in rows}
    assert parts == {"a100", "h100", "cpu", "all"}


def test_admin_comment_reaches_sacct(slurm_box) -> None:
    """Accounting stores AdminComment (the field easlurm publishes its records into)."""
    job = slurm_box.sbatch("-p", "cpu", "--wrap", "sleep 2")
    slurm_box.run(["scontrol", "update", f"JobId={job}", "AdminComment=easlurm-test-0123abc"])
    assert slurm_box.wait_job(job) == "COMPLETED"
    res = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment"])
    assert res.stdout.strip() == "easlurm-test-0123abc"


@pytest.mark.mpi
def test_mpi_hello_two_ranks_in_allocation(slurm_box, tmp_path: Path) -> None:
    """mpi4py under Open MPI's mpirun inside a Slurm allocation: two distinct ranks."""
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun missing: Open MPI is part of the box's packages")
    pytest.importorskip("mpi4py")
    script = tmp_path / "hello.py"
    script.write_text(
        textwrap.dedent("""
        from mpi4py import MPI
        c = MPI.COMM_WORLD
        print(f"rank {c.Get_rank()} of {c.Get_size()}", flush=True)
    """)
    )
    res = slurm_box.run(
        [
            "salloc",
            "-p",
            "cpu",
            "-n",
            "2",
            "mpirun",
            "--allow-run-as-root",
            "-n",
            "2",
            sys.executable,
            str(script),
        ]
    )
    ranks = sorted(re.findall(r"rank (\d+) of (\d+)", res.stdout))  # rank lines may interleave
    assert ranks == [("0", "2"), ("1", "2")]


def test_box_comes_back_after_down_up(slurm_box) -> None:
    """down stops every recorded daemon; up restores the cluster with its accounting history."""
    before = slurm_box.sbatch("-p", "cpu", "--wrap", "true")
    assert slurm_box.wait_job(before) == "COMPLETED"
    box = slurm_box.box
    box.down()
    assert all(pid is None for pid in box.status().values())
    box.up()
    assert box.is_up()
    res = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", before, "-o", "State"])
    assert res.stdout.strip() == "COMPLETED"
    after = slurm_box.sbatch("-p", "a100", "--gres=gpu:a100:1", "--wrap", "true")
    assert slurm_box.wait_job(after) == "COMPLETED"


def test_up_twice_is_harmless(slurm_box) -> None:
    box = slurm_box.box
    pids = box.status()
    box.up()
    assert box.status() == pids
