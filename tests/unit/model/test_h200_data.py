"""Our H200 measurements (data/oracle/h200_training_steps.csv, data/README.md) read as the oracle's
measurements, and hold what they are kept for: strict FP32 against TF32 on the same job."""

from pathlib import Path

from easlurm.model.fit.dataset import read_measurements
from easlurm.model.hardware import load_catalogue

DATA = Path(__file__).resolve().parents[3] / "data" / "oracle"


def test_h200_rows_read_with_power_and_three_precisions() -> None:
    rows = read_measurements(DATA / "h200_training_steps.csv")
    assert len(rows) == 15
    assert {m.gpu for m in rows} == {"h200"} and "h200" in load_catalogue()
    assert {m.precision for m in rows} == {"fp32-strict", "tf32", "amp-bf16"}
    assert all(m.avg_power_w is not None and 0 < m.avg_power_w <= 700 for m in rows)


def test_strict_fp32_resnet50_runs_about_twice_as_long_as_tf32() -> None:
    """Why 'fp32' must say what runs: the same ResNet-50 step with TF32 off takes 2.1x as long on the H200."""
    rows = read_measurements(DATA / "h200_training_steps.csv")
    t = {(m.batch, m.precision): m.step_time_s for m in rows if m.model == "resnet50"}
    for batch in (64, 256):
        assert 1.8 < t[batch, "fp32-strict"] / t[batch, "tf32"] < 2.4


def test_device_facts_name_torch_fp32_defaults() -> None:
    text = (DATA / "h200_device_facts.txt").read_text()
    assert "cudnn.allow_tf32 True" in text and "cuda.matmul.allow_tf32 False" in text
