"""A SPEC's model= is checked at submission against the oracle's model names (the plugin's models= file,
`easlurm model list --names`): sbatch refuses a typo with one line naming the key and the nearest names,
before any job exists; a name the oracle reads (another case, '_' for '-', an alias) is accepted and the
job runs profiled. Without models= (or with an unreadable file) only the syntax is checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spank_support import REPO, plugin_with_fake_sensors

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def names_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What an install writes: `easlurm model list --names`, readable by every user."""
    path = tmp_path_factory.mktemp("models") / "easlurm-models.txt"
    res = subprocess.run(
        [sys.executable, "-m", "easlurm.cli", "model", "list", "--names"],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    path.write_text(res.stdout)
    path.chmod(0o644)
    path.parent.chmod(0o755)
    return path


def _sbatch(box: Any, spec: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return box.run(
        [
            "sbatch",
            "--parsable",
            "-p",
            "cpu",
            f"--energy-profile={spec}",
            "-o",
            str(tmp_path / "out"),
            "--wrap",
            "true",
        ],
        check=False,
    )


def _jobs_named(box: Any, name: str) -> str:
    return box.run(["squeue", "-h", "-n", name, "-o", "%i"]).stdout.strip()


def test_model_typo_is_refused_at_submission(slurm_box: Any, tmp_path: Path, names_file: Path) -> None:
    with plugin_with_fake_sensors(slurm_box, f"models={names_file}"):
        res = slurm_box.run(
            [
                "sbatch",
                "--parsable",
                "-J",
                "h3-typo",
                "-p",
                "cpu",
                "--energy-profile=gpu,model=resnet5O,steps=10",
                "--wrap",
                "true",
            ],
            check=False,
        )
        assert res.returncode != 0, res.stdout
        lines = [ln for ln in res.stderr.splitlines() if "easlurm" in ln]
        assert len(lines) == 1, res.stderr
        assert "invalid --energy-profile: unknown model= 'resnet5O' (nearest: resnet50, " in lines[0]
        assert "every name: easlurm model list --names" in lines[0]
        assert _jobs_named(slurm_box, "h3-typo") == ""  # refused before any job existed
        # the unknown-key error lists every item there is
        res = _sbatch(slurm_box, "modle=resnet50", tmp_path)
        assert res.returncode != 0
        assert (
            "unknown key 'modle' (devices: all,gpu,cpu,dram; flags: urgent,share,nolimit; keys: "
            "interval,deadline,model,steps,batch,gpus,precision,shard,ckpt)" in res.stderr
        ), res.stderr


def test_names_the_oracle_reads_are_accepted(slurm_box: Any, tmp_path: Path, names_file: Path) -> None:
    """Another case, '_' for '-', an alias: the job is submitted and ends COMPLETED."""
    with plugin_with_fake_sensors(slurm_box, f"models={names_file}"):
        jobs = []
        for spec in ("model=ResNet_50,steps=10", "model=vit", "cpu"):
            res = _sbatch(slurm_box, spec, tmp_path)
            assert res.returncode == 0, (spec, res.stderr)
            jobs.append(res.stdout.strip().split(";")[0])
        for job in jobs:
            assert slurm_box.wait_job(job) == "COMPLETED"


def test_without_a_readable_names_file_only_the_syntax_is_checked(slurm_box: Any, tmp_path: Path) -> None:
    """Fail safe: a site's missing file never refuses a job (the plugin logs it)."""
    with plugin_with_fake_sensors(slurm_box, f"models={tmp_path / 'absent.txt'}"):
        res = _sbatch(slurm_box, "model=resnet5O", tmp_path)
        assert res.returncode == 0, res.stderr
        assert "model= not checked" in res.stderr
        job = res.stdout.strip().split(";")[0]
        assert slurm_box.wait_job(job) == "COMPLETED"


def test_training_keys_are_checked_at_submission(slurm_box: Any, tmp_path: Path, names_file: Path) -> None:
    """precision=, shard= and ckpt= (docs/oracle-llm.md): the plugin takes the documented values, the job
    runs; an unknown value is refused with one line naming the item, before any job exists."""
    with plugin_with_fake_sensors(slurm_box, f"models={names_file}"):
        good = _sbatch(
            slurm_box, "model=llama3-8b,steps=10,batch=8,precision=amp-bf16,shard=auto,ckpt=1", tmp_path
        )
        assert good.returncode == 0, good.stderr
        res = slurm_box.run(
            [
                "sbatch",
                "-J",
                "h7-shard",
                "-p",
                "cpu",
                "--energy-profile=model=llama3-8b,shard=zero4",
                "--wrap",
                "true",
            ],
            check=False,
        )
        assert res.returncode != 0
        assert "bad value (see the documented values of the key): 'shard=zero4'" in res.stderr, res.stderr
        assert _jobs_named(slurm_box, "h7-shard") == ""
        assert slurm_box.wait_job(good.stdout.strip().split(";")[0]) == "COMPLETED"
