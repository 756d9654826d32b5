"""YAML layer lists: same counts as the builder, and errors naming the bad line."""

import pytest

from easlurm.errors import ModelError
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.yaml_workload import EXAMPLE, load_workload_yaml, parse_workload_yaml


def test_yaml_matches_the_builder():
    w = parse_workload_yaml(EXAMPLE, "ex.yaml", precision="bf16")
    b = WorkloadBuilder("bf16")
    b.embedding(tokens=128, vocab=30522, dim=768)
    b.linear(tokens=128, d_in=768, d_out=2304, repeat=6)
    b.attention(seq=128, heads=12, head_dim=64, repeat=6)
    b.norm(elems=98304, channels=768, kind="layernorm", repeat=12)
    b.loss(tokens=1, classes=2)
    ref = b.build("my-encoder")
    assert w.name == "my-encoder" and w.family == "bert"
    assert w.flops_total == ref.flops_total
    assert w.n_params == ref.n_params
    assert w.act_bytes == ref.act_bytes


def test_type_key_form_is_accepted():
    w = parse_workload_yaml("layers:\n  - type: linear\n    tokens: 4\n    d_in: 8\n    d_out: 8\n")
    assert w.flops_gemm_f == 2 * 4 * 8 * 8


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (
            "layers:\n  - linear: {tokens: 4, d_in: 8, d_out: 8}\n  - linear: {tokens: 4, dim: 8}\n",
            r"x.yaml:3: layer 2 \(linear\): unknown field 'dim'",
        ),
        (
            "layers:\n  - linear: {tokens: 4, d_in: 8}\n",
            r"x.yaml:2: layer 1 \(linear\): missing field 'd_out'",
        ),
        ("layers:\n  - lstm: {hidden: 4}\n", r"x.yaml:2: layer 1: unknown layer type 'lstm'"),
        (
            "layers:\n  - linear: {tokens: four, d_in: 8, d_out: 8}\n",
            r"x.yaml:2: layer 1 \(linear\): tokens must be a number",
        ),
        (
            "layers:\n  - linear: {tokens: 4, d_in: 0, d_out: 8}\n",
            r"x.yaml:2: layer 1 \(linear\): layer dimension d_in",
        ),
        ("layers: [\n", r"x.yaml:2: invalid YAML"),
        ("name: x\n", r"x.yaml: expected a mapping with a non-empty 'layers' list"),
    ],
)
def test_errors_name_the_line(text, pattern):
    with pytest.raises(ModelError, match=pattern):
        parse_workload_yaml(text, "x.yaml")


def test_missing_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="cannot read"):
        load_workload_yaml(tmp_path / "nope.yaml")
