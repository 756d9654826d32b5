"""Workload characterisation: FLOP and parameter counts against closed forms and published figures."""

import pytest

from easlurm.errors import ModelError
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.workload import Precision
from easlurm.model.zoo import MODEL_NAMES, get_workload


def test_resnet50_forward_is_about_4_1_gmacs_at_224():
    """ResNet-50 is quoted at ~4.1 G multiply-adds (8.2 GFLOPs) per 224x224 image, 25.6 M parameters."""
    w = get_workload("resnet50", image_size=224)
    assert w.macs_forward == pytest.approx(4.1e9, rel=0.02)
    assert w.flops_conv_f + w.flops_gemm_f == pytest.approx(2 * w.macs_forward)
    assert w.n_params == pytest.approx(25.56e6, rel=0.005)


@pytest.mark.parametrize(
    ("name", "image", "params", "macs"),
    [
        # torchvision's resnet18 (11,689,512 parameters, 1.81 GFLOPS as it documents MACs)
        ("resnet18", 224, 11_689_512, 1.814e9),
        # the CIFAR-10 ResNet-18 of CIFAR training code (3x3 stride-1 stem, no max-pool, 10 classes):
        # 11,173,962 parameters, 0.56 G multiply-adds per 32x32 image
        ("resnet18-cifar", 32, 11_173_962, 0.556e9),
    ],
)
def test_resnet18_matches_its_published_size(name, image, params, macs):
    w = get_workload(name, image_size=image)
    assert w.n_params == params
    assert w.macs_forward == pytest.approx(macs, rel=0.005)
    assert get_workload("ResNet-18").n_params == get_workload("resnet18").n_params


def test_bert_base_has_110m_parameters():
    w = get_workload("bert-base")
    assert w.n_params == pytest.approx(110e6, rel=0.01)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("vgg16", 138.36e6),
        ("vit-b16", 86.57e6),
        ("vit-l16", 304.33e6),
        ("bert-large", 335.1e6),
        ("albert-base", 11.7e6),
        ("gpt2", 124.4e6),
        ("tinyllama-1.1b", 1.10e9),
        ("llama3-8b", 8.03e9),
    ],
)
def test_parameter_counts_match_published_sizes(name, params):
    assert get_workload(name).n_params == pytest.approx(params, rel=0.01)


def test_vit_b16_forward_macs():
    """ViT-B/16 at 224: 17.6 G multiply-adds (torchvision's documented 17.56 GFLOPS are MACs)."""
    assert get_workload("vit-b16").macs_forward == pytest.approx(17.56e9, rel=0.02)


def test_linear_closed_form():
    """A Linear layer: 2*T*K*N forward GEMM FLOPs, twice that backward, T*N bias FLOPs."""
    b = WorkloadBuilder(Precision.FP32)
    b.linear(tokens=10, d_in=32, d_out=16)
    w = b.build("lin")
    assert w.flops_gemm_f == 2 * 10 * 32 * 16
    assert w.flops_gemm_b == 2 * w.flops_gemm_f
    assert w.flops_alu_f == 10 * 16
    assert w.n_params == 32 * 16 + 16
    assert (w.gemm_m, w.gemm_k, w.gemm_n) == (10, 32, 16)


def test_weighted_dimensions_follow_flops():
    """Eq. 4.6: the mean dimension is weighted by each GEMM's FLOPs."""
    b = WorkloadBuilder(Precision.FP32)
    b.linear(tokens=1, d_in=100, d_out=100, bias=False)  # 2e4 FLOPs, K=100
    b.linear(tokens=1, d_in=300, d_out=100, bias=False)  # 6e4 FLOPs, K=300
    assert b.build("x").gemm_k == pytest.approx((2e4 * 100 + 6e4 * 300) / 8e4)


def test_albert_shares_weights_but_reads_them_every_layer():
    w = get_workload("albert-base")
    bert = get_workload("bert-base", seq_len=256)
    assert w.n_params < bert.n_params / 5
    albert_reuse = w.weight_bytes / w.n_params
    bert_reuse = bert.weight_bytes / bert.n_params
    assert albert_reuse > 5 * bert_reuse


def test_text_flops_grow_with_sequence_length():
    short, long_ = get_workload("bert-base", seq_len=128), get_workload("bert-base", seq_len=512)
    assert long_.flops_total > 4 * short.flops_total  # linear part x4 plus quadratic attention


def test_precision_changes_bytes_not_flops():
    a, b = get_workload("gpt2", precision="fp32"), get_workload("gpt2", precision="bf16")
    assert a.flops_total == b.flops_total
    # under autocast GPT-2's gelu_new (torch.pow autocasts to FP32, type promotion keeps the rest there) and
    # the LM loss stay FP32: most of its traffic does not halve. Our H100 rows' peak memory, AMP-BF16 against
    # TF32, is 12.68/14.69 and 23.65/27.94 GiB (0.86, 0.85) at batch 8 and 16
    assert 0.85 * a.act_bytes < b.act_bytes < a.act_bytes
    assert 0.8 * a.act_mem_bytes < b.act_mem_bytes < 0.95 * a.act_mem_bytes


def test_optimizer_bytes_count_foreach_passes():
    """torch's foreach AdamW makes 20 FP32 passes over the parameters per step; SGD with momentum 7."""
    w = get_workload("bert-base", precision="bf16", optimizer="adamw")
    n = w.n_params
    assert w.opt_bytes == pytest.approx(20 * 4 * n)
    assert get_workload("bert-base", optimizer="sgd").opt_bytes == pytest.approx(7 * 4 * n)
    assert w.opt_flops == 18 * n
    assert w.opt_ops < 20  # launches per parameter list, not per parameter


def test_all_zoo_models_build():
    for name in MODEL_NAMES:
        w = get_workload(name, precision="tf32")
        assert w.flops_total > 0 and w.n_params > 0 and w.act_mem_bytes > 0


def test_unknown_model_names_it_and_the_zoo():
    with pytest.raises(ModelError, match=r"unknown model 'resnet51'.*resnet50"):
        get_workload("resnet51")


def test_wrong_size_kind_is_an_error():
    with pytest.raises(ModelError, match="vision model"):
        get_workload("resnet50", seq_len=128)
    with pytest.raises(ModelError, match="unknown precision"):
        get_workload("bert-base", precision="int3")
