"""`easlurm model measure --pairs` with real torch processes (on the CPU here): the CSV and its rows."""

import csv

import pytest

from easlurm.cli import main

torch = pytest.importorskip(
    "torch", reason="easlurm model measure --pairs needs torch (pip install 'easlurm[torch]')"
)

from easlurm.measure.pairs import PAIR_COLUMNS, measure_pairs, parse_pairs  # noqa: E402
from easlurm.measure.steps import Timing  # noqa: E402


def test_torch_runner_times_both_processes_of_a_pair() -> None:
    """Two spawned torch processes, a training and an inference job: every window is timed, the shared
    windows start together and overlap."""
    pairs = parse_pairs("shufflenet:2:fp32+shufflenet:4:fp32:infer", image_size=32)
    rows = measure_pairs(
        pairs, "cpu", timing=Timing(warmup_s=0.0, window_s=0.1, min_warmup_steps=1), context="spawn"
    )
    assert [(r.job, r.config.batch, r.config.mode) for r in rows] == [("a", 2, "train"), ("b", 4, "infer")]
    for r in rows:
        assert r.step_time_alone_s > 0 and r.step_time_shared_s > 0
        assert r.alone.gpu_power_w is None  # no energy reader on a CPU
        assert r.shared.overlap_s > 0
    w0, w1 = rows[0].shared.windows
    assert abs(w0.start_s - w1.start_s) < 0.5


def test_cli_writes_the_pairs_csv(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    out = tmp_path / "pairs.csv"
    rc = main(
        [
            "model",
            "measure",
            "--pairs",
            "shufflenet:2+shufflenet:2:fp32",
            "--image-size",
            "32",
            "--device",
            "cpu",
            "--cpu-threads",
            "1",
            "--warmup",
            "0s",
            "--window",
            "0.1s",
            "-O",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# easlurm model measure --pairs")
    rows = list(csv.DictReader(lines[1:]))
    assert list(rows[0]) == list(PAIR_COLUMNS)
    assert [(r["pair"], r["job"], r["precision"]) for r in rows] == [
        ("1", "a", "amp-bf16"),
        ("1", "b", "fp32"),
    ]
    assert "wrote" in captured.out
