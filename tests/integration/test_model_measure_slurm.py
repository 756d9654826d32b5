"""`easlurm model measure --slurm` on the local cluster: one array task per configuration under
`--energy-profile`; step times from the tasks, GPU power from the energy records in `easlurm sacct`."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from spank_support import GPU_W, plugin_with_fake_sensors, run_easlurm

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (easlurm[torch])"),
]


def test_measure_array_takes_power_from_the_energy_records(slurm_box: Any, tmp_path: Path) -> None:
    """Two tiny configurations on one fake GPU each (fake NVML at GPU_W): both rows come back with their own
    step time, and the power is the task's GPU energy over its duration, i.e. GPU_W."""
    out = tmp_path / "m.csv"
    with plugin_with_fake_sensors(slurm_box):
        res = run_easlurm(
            slurm_box,
            *("model", "measure", "--model", "shufflenet", "--batch", "2,4", "--precision", "fp32"),
            *("--image-size", "32", "--sweeps", "1", "--warmup", "0s", "--window", "0.05s"),
            *("--slurm", "--partition", "h100", "--gres", "gpu:1", "--gpu", "h100-sxm", "-O", str(out)),
            timeout=240,
        )
    assert res.returncode == 0, res.stderr
    from easlurm.model.fit.dataset import read_measurements

    rows = read_measurements(out)
    assert [(m.model, m.batch, m.gpu) for m in rows] == [
        ("shufflenet-small", 2, "h100-sxm"),
        ("shufflenet-small", 4, "h100-sxm"),
    ]
    assert all(m.step_time_s > 0 for m in rows)
    assert all(m.avg_power_w == pytest.approx(GPU_W, rel=0.05) for m in rows), [m.avg_power_w for m in rows]
    with out.open() as fh:
        assert all(int(r["n_params"]) == 1_366_792 for r in csv.DictReader(fh))
    assert sorted(p.name for p in (tmp_path / "m.slurm").glob("task-*.csv")) == ["task-0.csv", "task-1.csv"]
