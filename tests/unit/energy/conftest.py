"""Energy test fixtures: the fakes package on sys.path, a fresh fake NVML, a fake powercap tree."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[2] / "fakes"
if str(FAKES) not in sys.path:
    sys.path.insert(0, str(FAKES))

from easlurm_fakes import fake_nvml  # noqa: E402
from easlurm_fakes.powercap import FakePowercap  # noqa: E402


@pytest.fixture
def nvml_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Clean EASLURM_FAKE_NVML_* and GPU-selection variables and a reset fake NVML state."""
    import os

    for var in list(os.environ):
        if var.startswith("EASLURM_FAKE_NVML_") or var in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS"):
            monkeypatch.delenv(var)
    fake_nvml._state = None
    fake_nvml._init_count = 0
    yield monkeypatch
    fake_nvml._state = None
    fake_nvml._init_count = 0


@pytest.fixture
def powercap(tmp_path: Path) -> Iterator[FakePowercap]:
    fp = FakePowercap(tmp_path / "powercap", sockets=2, subzones=("core", "dram"))
    yield fp
    fp.close()
