"""The catalogue holds dense tensor-core peaks only, each with its datasheet: a figure "with sparsity" (twice
the dense one) stands above every dense ratio of its architecture to the FP32 rate, and a hand-written entry
that carries one is named with a warning when loaded."""

import dataclasses
import logging
from pathlib import Path

import pytest

from easlurm.model import build
from easlurm.model.dense_check import DENSE_RATIOS, sparse_figure
from easlurm.model.hardware import load_catalogue, load_user_catalogue

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "data" / "hardware" / "example-gpus.yaml"


@pytest.mark.parametrize("catalogue", ["shipped", "example"])
def test_every_catalogue_gpu_carries_dense_figures_of_its_architecture(catalogue: str) -> None:
    cat = load_catalogue() if catalogue == "shipped" else load_user_catalogue(EXAMPLE)
    checked = [k for k in cat if cat.get(k).architecture in DENSE_RATIOS]
    assert len(checked) >= (26 if catalogue == "shipped" else 27)
    for key in cat:
        assert sparse_figure(cat.get(key)) is None, key


def test_every_shipped_gpu_names_the_datasheet_of_its_compute_figures() -> None:
    cat = load_catalogue()
    for key in cat:
        sources = cat.get(key).sources
        assert any("compute" in k or "tflops" in k for k in sources), key


@pytest.mark.parametrize(
    ("gpu", "tf32", "bf16"),
    [
        ("l40s", 366, 733),  # L40S datasheet, with sparsity
        ("h100-sxm", 989, 1979),  # H100 SXM5 datasheet, with sparsity
        ("a100-40gb", 312, 624),
        ("a10", 125, 250),  # GA102: sparse figures that stay under GA100's dense ratio
        ("v100", 15.7, 250),
        ("t4", 8.1, 130),
    ],
)
def test_a_figure_with_sparsity_is_caught(gpu: str, tf32: float, bf16: float) -> None:
    """NVIDIA's "with sparsity" figures for these boards: each is named, with the dense rates of its
    architecture; the catalogue's dense figures pass."""
    spec = load_catalogue().get(gpu)
    assert sparse_figure(spec) is None
    problem = sparse_figure(dataclasses.replace(spec, tf32_tflops=tf32, bf16_tflops=bf16))
    assert problem is not None and f"bf16_tflops {bf16:g}" in problem and spec.architecture in problem


def test_doubled_tensor_rates_of_shipped_gpus_are_caught() -> None:
    """Twice the BF16/FP16 rate is caught on every shipped GPU with tensor cores but two GeForce boards, whose
    sparse figures equal a professional board's dense ones (RTX 2080 Ti: 4x is Turing GeForce's dense rate,
    8x Quadro's; GTX 1080 Ti has no tensor cores)."""
    cat = load_catalogue()
    missed = [
        k
        for k in cat
        if not sparse_figure(dataclasses.replace(cat.get(k), bf16_tflops=2 * cat.get(k).bf16_tflops))
    ]
    assert missed == ["rtx2080ti", "gtx1080ti"]


def test_a_hand_written_entry_with_a_sparse_figure_is_warned(tmp_path: Path, caplog) -> None:
    """An Ada board given the L40S's sparsity figures: loading names the file, the GPU and the fields; the
    dense figures load silently."""
    entry = (
        "version: 1\ngpus:\n  myada:\n    name: My Ada\n    architecture: ada\n    fp32_tflops: 91.6\n"
        "    tf32_tflops: {tf32}\n    bf16_tflops: {bf16}\n    hbm_gbs: 864\n    l2_mb: 96\n    memory_gb: 48\n"
        "    tdp_w: 350\n    idle_w: 30\n    min_power_limit_w: 100\n    link_gbs: 32\n    net_gbs: 25\n"
    )
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(entry.format(tf32=183, bf16=362.05))
    bad.write_text(entry.format(tf32=366, bf16=733))
    with caplog.at_level(logging.WARNING, logger="easlurm.model.build"):
        build.catalogue(good)
        assert not caplog.records
        build.catalogue(bad)
    (rec,) = caplog.records
    message = rec.getMessage()
    assert str(bad.resolve()) in message and "gpus.myada" in message
    assert "bf16_tflops 733" in message and "sparsity" in message
