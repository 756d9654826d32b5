"""Precision names as PyTorch runs them, sharded data parallelism (ZeRO/FSDP) and activation checkpointing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from easlurm.cli import main
from easlurm.errors import ModelError, TraceError
from easlurm.model.equations import WorkloadArrays, static_memory
from easlurm.model.fit.dataset import placements_of, read_measurements
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import load_params
from easlurm.model.sharding import cheapest_training, training_options
from easlurm.model.workload import Precision, Sharding
from easlurm.model.zoo import get_workload

ROOT = Path(__file__).resolve().parents[3]
LLM_CSV = ROOT / "data" / "oracle" / "public" / "llm_fsdp_throughput.csv"


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle(load_params())


def _one(oracle: Oracle, w, gpu: str, n: int = 1, batch: int = 64, nodes: int = 0):  # type: ignore[no-untyped-def]
    return oracle.predict(w, Placements.of(n, batch, gpu, math.nan, nodes))


def test_old_precision_names_map_to_what_they_meant() -> None:
    assert Precision.parse("bf16") is Precision.BF16 and Precision.BF16.value == "amp-bf16"
    assert Precision.parse("FP16") is Precision.FP16 and Precision.FP16.value == "amp-fp16"
    assert Precision.parse("fp32-strict") is Precision.FP32_STRICT
    # parameter files keep their short keys: both FP32 names share 'fp32'
    assert [p.key for p in Precision] == ["fp32", "fp32", "tf32", "bf16", "fp16"]
    with pytest.raises(ModelError, match="unknown precision 'fp8'"):
        Precision.parse("fp8")


def test_fp32_runs_convolutions_in_tf32_and_matmuls_in_fp32_where_the_gpu_has_tf32(oracle: Oracle) -> None:
    """PyTorch's defaults: cuDNN takes TF32 for convolutions on Ampere and later, matmuls stay FP32."""
    step = {
        (m, p, g): float(_one(oracle, get_workload(m, precision=p), g).step_time_s[0])
        for m in ("resnet50", "bert-base")
        for p in ("fp32", "fp32-strict", "tf32")
        for g in ("a100-40gb", "v100")
    }
    assert step["resnet50", "fp32", "a100-40gb"] < 0.7 * step["resnet50", "fp32-strict", "a100-40gb"]
    assert step["resnet50", "fp32", "a100-40gb"] == pytest.approx(
        step["resnet50", "tf32", "a100-40gb"], rel=0.1
    )
    # a transformer is matmuls: fp32 is strict FP32 there, TF32 only when asked
    assert step["bert-base", "fp32", "a100-40gb"] == pytest.approx(
        step["bert-base", "fp32-strict", "a100-40gb"], rel=0.02
    )
    assert step["bert-base", "tf32", "a100-40gb"] < 0.7 * step["bert-base", "fp32", "a100-40gb"]
    # without TF32 tensor cores (Volta) every FP32 name runs the same
    assert step["resnet50", "fp32", "v100"] == pytest.approx(step["resnet50", "fp32-strict", "v100"])


def test_autocast_keeps_norms_softmax_and_losses_in_fp32() -> None:
    """Under AMP the 16-bit share of the activation traffic is not all of it: a layer norm reads and writes
    FP32 and casts back (34 bytes per element against 20 in FP32, 10 if it were all 16 bit), so a transformer
    moves well over half its FP32 traffic, while a CNN (batch norms run in 16 bit) moves half."""
    per_elem = {}
    for prec in ("fp32", "amp-bf16"):
        with_norm, without = WorkloadBuilder(prec), WorkloadBuilder(prec)
        for b in (with_norm, without):
            b.linear(128, 768, 768)
        with_norm.norm(128 * 768, 768)
        per_elem[prec] = (with_norm.build("n").act_bytes - without.build("l").act_bytes) / (128 * 768)
    assert per_elem == {"fp32": 20.0, "amp-bf16": 34.0}
    ratio = {
        m: get_workload(m, precision="amp-bf16").act_bytes / get_workload(m, precision="fp32").act_bytes
        for m in ("bert-base", "llama3-8b", "resnet50")
    }
    # Llama's RMSNorm casts to FP32 and back under AMP (92 bytes per element against 80 in FP32:
    # test_rmsnorm_and_lm_loss_bytes_follow_their_passes), GPT-2's gelu_new runs in FP32
    assert ratio["bert-base"] > 0.6 and ratio["llama3-8b"] > 0.65
    assert ratio["resnet50"] == pytest.approx(0.5, abs=1e-3)


def test_rmsnorm_and_lm_loss_bytes_follow_their_passes() -> None:
    """Eager RMSNorm: pow, mean, x*rsqrt and the weight forward, their gradients backward (80 bytes per
    element in FP32), plus the casts to FP32 and back under autocast (92); the add and rsqrt act on one value
    per row. A language-model loss (no shifted copy of the logits) moves 24 bytes per logit in FP32 and 36
    under autocast, where the logits are upcast first."""
    per_elem = {}
    for prec in ("fp32", "amp-bf16"):
        norm, head, loss = WorkloadBuilder(prec), WorkloadBuilder(prec), WorkloadBuilder(prec)
        norm.rmsnorm_eager(1000, 10)
        for b in (head, loss):
            b.linear(10, 8, 100)
        loss.loss(10, 100, fp32_logits=True)
        per_logit = (loss.build("l").act_bytes - head.build("h").act_bytes) / 1000
        per_elem[prec] = (norm.build("n").act_bytes / 1000, per_logit)
    assert per_elem == {"fp32": (80.0, 24.0), "amp-bf16": (92.0, 36.0)}


def test_measurement_csvs_read_old_and_new_names(tmp_path: Path) -> None:
    head = "model,batch,precision,n_gpus,gpu,step_time_s,sharding,activation_checkpointing\n"
    path = tmp_path / "m.csv"
    path.write_text(
        head + "resnet50,64,fp16,1,v100,0.2,,\nresnet50,64,fp32-strict,1,a100-40gb,0.2,,\n"
        "llama3-8b,8,bf16,8,h100-sxm,9.0,fsdp,1\n"
    )
    rows = read_measurements(path)
    assert [m.precision for m in rows] == ["amp-fp16", "fp32-strict", "amp-bf16"]
    assert [m.precision_key for m in rows] == ["fp16", "fp32", "bf16"]
    w = rows[2].workload()
    assert (w.sharding, w.act_ckpt) == (Sharding.ZERO3, "full")
    path.write_text(head + "resnet50,64,fp64,1,v100,0.2,,\n")
    with pytest.raises(TraceError, match=r"m.csv:2: precision: unknown precision 'fp64'"):
        read_measurements(path)
    path.write_text(head + "resnet50,64,fp32,1,v100,0.2,zero4,\n")
    with pytest.raises(TraceError, match=r"m.csv:2: sharding: unknown sharding 'zero4'"):
        read_measurements(path)


def test_our_h100_and_h200_fp32_rows_ran_strict_fp32() -> None:
    """easlurm model measure ran those rows with TF32 off for cuDNN and matmuls: they say fp32-strict."""
    for name in ("h100_sxm_training_steps.csv", "h200_training_steps.csv"):
        precs = {m.precision for m in read_measurements(ROOT / "data" / "oracle" / name)}
        assert precs == {"fp32-strict", "tf32", "amp-bf16"}


def test_each_zero_stage_divides_one_more_kind_of_state_by_the_gpus() -> None:
    w = get_workload("llama3-8b", precision="bf16")
    n, p = w.n_params, 8.0
    params, grads, opt = 6.0 * n, 4.0 * n, 12.0 * n  # FP32 + bf16 copy, FP32 gradients, Adam state + temp
    expect = {
        Sharding.NONE: params + grads + opt,
        Sharding.ZERO1: params + grads + opt / p,
        Sharding.ZERO2: params + grads / p + opt / p,
        Sharding.ZERO3: params / p + 2.0 * w.working_set_fixed_bytes + grads / p + opt / p,
    }
    for stage, want in expect.items():
        wa = WorkloadArrays.of([w.trained_with(stage, "")], load_params())
        assert float(static_memory(wa, np.array([p]))[0]) == pytest.approx(want)
        # one GPU holds everything whatever the stage, but for stage 3's gather buffers
        one = float(static_memory(wa, np.array([1.0]))[0])
        assert one == pytest.approx(
            params + grads + opt + (2.0 * w.working_set_fixed_bytes if stage.stage == 3 else 0)
        )


def test_sharded_traffic_replaces_the_all_reduce(oracle: Oracle) -> None:
    """One GPU communicates nothing; across nodes ZeRO-1 adds its exposed parameter all-gather after the
    optimizer to the reduce-scatter, while ZeRO-3 hides its per-block gathers under forward and backward."""
    w = get_workload("gpt2", precision="bf16")
    comm = {}
    for s in Sharding:
        assert float(_one(oracle, w.trained_with(s, ""), "a100-80gb", 1, 8).comm_exposed_s[0]) == 0.0
        comm[s] = float(_one(oracle, w.trained_with(s, ""), "a100-80gb", 16, 128, nodes=16).comm_exposed_s[0])
    assert comm[Sharding.NONE] > 0 and comm[Sharding.ZERO3] > 0
    assert comm[Sharding.ZERO1] > comm[Sharding.NONE]
    assert comm[Sharding.ZERO3] < comm[Sharding.ZERO1]


def test_activation_checkpointing_trades_memory_for_a_third_more_compute(oracle: Oracle) -> None:
    w = get_workload("llama3-8b", precision="bf16", seq_len=4096).trained_with("zero3", "")
    base = _one(oracle, w, "h200", 8, 8)
    ck = _one(oracle, w.trained_with("zero3", "full"), "h200", 8, 8)
    assert float(ck.peak_mem_gib[0]) < 0.6 * float(base.peak_mem_gib[0])
    assert 1.2 < float(ck.step_time_s[0] / base.step_time_s[0]) < 1.45


def test_llama3_8b_fits_one_8_gpu_node_only_sharded_and_checkpointed(oracle: Oracle) -> None:
    w = get_workload("llama3-8b", precision="bf16")
    for gpu in ("h100-sxm", "h200"):
        assert not _one(oracle, w, gpu, 8, 8).feasible[0]
        assert _one(oracle, w.trained_with("zero3", "full"), gpu, 8, 8).feasible[0]
        choice = cheapest_training(oracle, w, Placements.of(8, 8, gpu), training_options("auto", None))
        assert choice.prediction.feasible[0] and choice.sharding[0] is not Sharding.NONE


def test_auto_picks_the_cheapest_option_that_fits(oracle: Oracle) -> None:
    """A small model fits unsharded: auto takes no recomputation (it only costs), and the option it picks
    costs no more energy than plain DDP."""
    w = get_workload("bert-base", precision="bf16", seq_len=128)
    pl = Placements.of(8, 256, "h100-sxm")
    choice = cheapest_training(oracle, w, pl, training_options("auto", None))
    assert choice.act_ckpt[0] == ""
    assert float(choice.prediction.energy_j[0]) <= float(oracle.predict(w, pl).energy_j[0])


def test_published_fsdp_llama_throughput(oracle: Oracle) -> None:
    """torchtitan's Llama 3 8B FSDP figures (data/oracle/public/llm_fsdp_throughput.csv): every row fits
    and is predicted within 20 % (-14 to +6 % with parameters 2026-11-27.1-eager-attention, docs/oracle-llm.md),
    and going from 8 to 128 H100 costs per-GPU throughput as published (within 10 %)."""
    rows = read_measurements(LLM_CSV)
    pred = oracle.predict_rows([m.workload() for m in rows], placements_of(rows))
    assert bool(np.all(pred.feasible))
    err = pred.step_time_s / np.array([m.step_time_s for m in rows]) - 1.0
    assert np.all(np.abs(err) < 0.20), err
    measured = rows[1].step_time_s / rows[0].step_time_s
    assert float(pred.step_time_s[1] / pred.step_time_s[0]) == pytest.approx(measured, rel=0.10)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_predict_shards_on_request_and_says_what_it_chose(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("predict", "--model", "llama3-8b", "--batch", "8", "--gpus", "8", "--gpu", "h100-sxm")
    rc, out, _ = _cli(capsys, *base, "--precision", "bf16", "--json")
    (row,) = json.loads(out)["placements"]
    assert rc == 0 and not row["feasible"] and row["sharding"] == "none"
    rc, out, _ = _cli(capsys, *base, "--precision", "bf16", "--shard", "auto", "--json")
    doc = json.loads(out)
    (row,) = doc["placements"]
    assert doc["precision"] == "amp-bf16"
    assert row["feasible"] and row["sharding"] != "none" and row["peak_mem_gib"] < 80
    rc, out, _ = _cli(capsys, *base, "--shard", "fsdp", "--activation-checkpointing", "full")
    assert rc == 0 and "Sharding" in out and "zero3" in out and "full" in out
    rc, _, err = _cli(capsys, *base, "--shard", "zero9")
    assert rc == 2 and err.count("\n") == 1 and "--shard" in err


def test_model_list_says_what_each_precision_runs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _cli(capsys, "model", "list")
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert rc == 0
    assert "TF32 (Ampere+)" in lines["fp32"] and "FP32" in lines["fp32-strict"]
