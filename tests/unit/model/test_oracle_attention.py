"""How a workload's attention runs (fused SDPA or eager) and what each network's implementation moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.errors import ModelError, TraceError
from easlurm.model.fit.dataset import read_measurements, write_measurements
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.zoo import _encoder_layer, get_workload

ROOT = Path(__file__).resolve().parents[3]


def test_eager_attention_runs_the_scores_through_hbm() -> None:
    """BERT-base at 384 tokens in FP32: eager attention moves the scores (twice their count with dropout)
    ten times per layer and keeps the softmax output, the dropout output and its one-byte mask; its FLOPs
    are batched GEMMs, the fused kernel's are apart."""
    fused = get_workload("bert-base", precision="fp32", seq_len=384)
    eager = get_workload("bert-base", precision="fp32", seq_len=384, attention="eager")
    hss = 12 * 384 * 384  # heads x seq x seq, one layer, one sample
    assert eager.flops_attn_f == 0.0
    assert eager.flops_gemm_f == pytest.approx(fused.flops_gemm_f + fused.flops_attn_f)
    assert eager.act_bytes - fused.act_bytes == pytest.approx(12 * 10 * 2 * hss * 4.0)
    assert eager.act_mem_bytes - fused.act_mem_bytes == pytest.approx(12 * hss * (2 * 4.0 + 1.0))


def test_causal_masks_skip_blocks_only_in_the_fused_kernel() -> None:
    fused = get_workload("gpt2", precision="amp-bf16", seq_len=1024)
    eager = get_workload("gpt2", precision="amp-bf16", seq_len=1024, attention="eager")
    assert eager.flops_gemm_f - fused.flops_gemm_f == pytest.approx(2.0 * fused.flops_attn_f)


def test_unknown_attention_is_refused() -> None:
    with pytest.raises(ModelError, match="attention must be one of sdpa, eager"):
        get_workload("bert-base", attention="flash3")


def test_torch_multihead_attention_copies_its_inputs_and_heads() -> None:
    """torchvision's ViT runs nn.MultiheadAttention: the transposed input, the split q, k, v and the heads
    are copied forward and backward (5 d elements, four passes each), beyond a Hugging Face block."""
    plain, mha = WorkloadBuilder("fp32"), WorkloadBuilder("fp32")
    _encoder_layer(plain, 197, 768, 12, 3072, 12, dropout=False)
    _encoder_layer(mha, 197, 768, 12, 3072, 12, dropout=False, mha_copies=True)
    diff = mha.build("m").act_bytes - plain.build("p").act_bytes
    assert diff == pytest.approx(12 * 197 * 5 * 768 * 4 * 4.0)


def test_measurement_rows_say_how_attention_ran(tmp_path: Path) -> None:
    head = "model,batch,seq_len,precision,n_gpus,gpu,step_time_s,attention\n"
    path = tmp_path / "m.csv"
    path.write_text(
        head + "bert-base,32,384,tf32,1,a100-40gb,0.2,eager\nbert-base,32,384,tf32,1,a100-40gb,0.3,\n"
    )
    eager, fused = read_measurements(path)
    assert (eager.attention, fused.attention) == ("eager", "")
    assert eager.workload().act_bytes > fused.workload().act_bytes
    out = tmp_path / "out.csv"
    write_measurements([eager, fused], out)
    assert [m.attention for m in read_measurements(out)] == ["eager", ""]
    path.write_text(head + "bert-base,32,384,tf32,1,a100-40gb,0.2,flash\n")
    with pytest.raises(TraceError, match=r"m\.csv:2: attention must be sdpa or eager, got 'flash'"):
        read_measurements(path)


@pytest.mark.parametrize("name", ["lambda_pytorch.csv", "dle_training.csv"])
def test_deeplearningexamples_bert_rows_are_eager(name: str) -> None:
    """NVIDIA DeepLearningExamples' BERT computes attention eagerly (BertSelfAttention: matmul, softmax,
    dropout, matmul); the public rows that ran it say so, and no other row does."""
    rows = read_measurements(ROOT / "data" / "oracle" / "public" / name)
    bert = [m for m in rows if m.model.startswith("bert")]
    assert bert and all(m.attention == "eager" for m in bert)
    assert all(m.attention == "" for m in rows if not m.model.startswith("bert"))


def test_predict_takes_the_attention_a_job_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`predict --attention eager` prices the scores' trips through memory: BERT-large at 384 tokens runs
    slower than with fused attention; a name it does not know is refused with exit 2."""
    args = [
        "predict",
        "--model",
        "bert-large",
        "--seq-len",
        "384",
        "--batch",
        "16",
        "--precision",
        "tf32",
        "--json",
    ]
    times = {}
    for att in ("sdpa", "eager"):
        assert main([*args, "--attention", att]) == 0
        times[att] = json.loads(capsys.readouterr().out)["placements"][0]["step_time_s"]
    assert times["eager"] > 1.1 * times["sdpa"]
    assert main([*args, "--attention", "flash"]) == 2
    assert "--attention" in capsys.readouterr().err
