"""Hardware catalogue: every listed GPU present with dense peaks, sources and aliases."""

import pytest

from easlurm.errors import ModelError
from easlurm.model.hardware import load_catalogue, parse_catalogue

EXPECTED = {
    "a100-40gb",
    "a100-80gb",
    "a100-40gb-pcie",
    "a100-80gb-pcie",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "l40s",
    "a10",
    "v100",
}


def test_catalogue_lists_the_required_gpus_with_sources():
    cat = load_catalogue()
    assert set(cat.keys()) >= EXPECTED
    for key in cat:
        spec = cat.get(key)
        assert spec.idle_w < spec.min_power_limit_w <= spec.tdp_w
        assert spec.sources, key


def test_dense_peaks_not_sparse():
    """Tensor-core BF16 is twice TF32 on Ampere/Hopper; H100 SXM BF16 dense is ~989 TFLOP/s, not 1979."""
    cat = load_catalogue()
    assert cat.get("h100").bf16_tflops == pytest.approx(989.4)
    for key in ("a100-40gb", "h100-sxm", "l40s", "a10"):
        s = cat.get(key)
        assert s.bf16_tflops == pytest.approx(2 * s.tf32_tflops, rel=0.02)


def test_workstation_ada_lists_its_fp32_accumulate_tensor_rate():
    """The RTX 6000 Ada datasheet's headline (1457 FP8 TFLOPS) is sparse with FP16 accumulate; training
    accumulates in FP32, where AD102 runs at the L40's rate: about the RTX 4090's, as Lambda's tables measure."""
    cat = load_catalogue()
    ada, geforce = cat.get("rtx6000-ada"), cat.get("rtx4090")
    assert ada.bf16_tflops == pytest.approx(2 * ada.tf32_tflops, rel=0.02)
    assert ada.bf16_tflops / geforce.bf16_tflops < 1.2


def test_aliases_resolve():
    cat = load_catalogue()
    assert cat.resolve("a100") == "a100-40gb"
    assert cat.resolve("H100") == "h100-sxm"


def test_unknown_gpu_names_the_known_ones():
    with pytest.raises(ModelError, match=r"unknown GPU 'b300'.*h100-sxm"):
        load_catalogue().get("b300")


def test_bad_entry_names_gpu_and_field():
    doc = {"gpus": {"x": {"fp32_tflops": "fast"}}}
    with pytest.raises(ModelError, match=r"gpus\.x\.fp32_tflops"):
        parse_catalogue(doc)
