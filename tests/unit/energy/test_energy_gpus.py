"""Which GPUs a job owns: index, UUID and MIG selectors from Slurm and CUDA variables."""

from __future__ import annotations

import pytest

from easlurm.energy.gpus import GpuRef, job_gpus, parse_gpu_ref
from easlurm.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3", GpuRef("3", index=3)),
        ("GPU-1234-abcd", GpuRef("GPU-1234-abcd", uuid="GPU-1234-abcd")),
        ("MIG-5678-ef", GpuRef("MIG-5678-ef", uuid="MIG-5678-ef", mig=True)),
        ("MIG-GPU-1234-abcd/1/0", GpuRef("MIG-GPU-1234-abcd/1/0", uuid="GPU-1234-abcd", mig=True)),
    ],
)
def test_parse_gpu_ref(text: str, expected: GpuRef) -> None:
    assert parse_gpu_ref(text) == expected


def test_bad_selector_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="GPU selector"):
        parse_gpu_ref("gpu0")


def test_precedence_explicit_then_slurm_then_cuda() -> None:
    env = {"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert [r.index for r in job_gpus(["5"], env) or []] == [5]
    assert [r.index for r in job_gpus(None, env) or []] == [2, 3]
    assert [r.index for r in job_gpus(None, {"CUDA_VISIBLE_DEVICES": "1"}) or []] == [1]


def test_unset_means_all_and_nodevfiles_means_none() -> None:
    assert job_gpus(None, {}) is None
    assert job_gpus(None, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert job_gpus(None, {"SLURM_STEP_GPUS": "NoDevFiles"}) == []
