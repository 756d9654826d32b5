"""`easlurm model measure --gpus 2` on CPU torch: two gloo ranks spawned by the command, DistributedDataParallel
steps timed with and without gradient synchronisation; the CSV reads back with the exposed communication."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.model.fit.dataset import read_measurements

pytest.importorskip("torch", reason="easlurm model measure needs torch (pip install 'easlurm[torch]')")


def test_two_cpu_ranks_write_rows_with_the_exposed_communication(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Global batch 4 over 2 ranks is measured; global batch 2 leaves each rank 1 image, which BatchNorm
    cannot train on: that configuration is reported and left out, the others still written."""
    out = tmp_path / "m.csv"
    rc = main(
        [
            *("model", "measure", "--model", "shufflenet", "--batch", "2,4", "--gpus", "2"),
            *("--precision", "fp32", "--image-size", "32", "--sweeps", "2", "--device", "cpu"),
            *("--warmup", "0s", "--window", "0.05s", "--cpu-threads", "1", "-O", str(out)),
        ]
    )
    res = capsys.readouterr()
    assert rc == 0, res.err
    (row,) = read_measurements(out)
    assert (row.model, row.batch, row.n_gpus, row.n_nodes, row.gpu) == ("shufflenet-small", 4, 2, 1, "cpu")
    assert row.step_time_s > 0 and row.comm_exposed_s is not None and row.comm_exposed_s >= 0
    assert row.avg_power_w is None  # no NVML on a CPU: unknown, not 0 W
    with out.open() as fh:
        rec = next(csv.DictReader(line for line in fh if not line.startswith("#")))
    runs = [float(v) for v in rec["comm_exposed_s_runs"].split(";")]
    assert len(runs) == 2 and all(v >= 0 for v in runs)
    assert row.comm_exposed_s == pytest.approx(sum(runs) / 2, abs=2e-6)
    assert "on 2 GPUs" in res.out and "exposed" in res.out
    assert any("left out: shufflenet-small batch 2 on 2 GPUs" in r.getMessage() for r in caplog.records)


def test_a_device_index_with_several_gpus_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["model", "measure", "--model", "shufflenet", "--batch", "4", "--gpus", "2", "--device", "cuda:1"]
    assert main([*argv, "-O", str(tmp_path / "m.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("easlurm: error: --device") and err.count("\n") == 1
    assert not (tmp_path / "m.csv").exists()
