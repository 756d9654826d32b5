"""The co-location rule: complementary pairs gain, saturating pairs lose, memory bounds, MPS vs time-slicing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from easlurm.errors import ConfigError, EaslurmError
from easlurm.model import Oracle, Placements, get_workload
from easlurm.model.colocation import GpuFacts, Sharing, Solo, corun, parse_sharing, predict_solo, waterfill
from easlurm.model.equations import RESERVED_BYTES, USABLE_MEMORY_FRACTION
from easlurm.model.fit.pairs import PairJob, PairRun, fit_colocation, read_pairs, solos
from easlurm.model.params import COLOC_PARAMS

GPU = "h100-sxm"


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def solo(oracle: Oracle, model: str, batch: int, precision: str = "bf16") -> Solo:
    s = predict_solo(oracle, get_workload(model, precision=precision), batch, GPU)
    assert s is not None
    return s


def facts(oracle: Oracle) -> GpuFacts:
    return GpuFacts.of(oracle.catalogue.get(GPU), oracle.params)


def test_prediction_exposes_busy_fractions_that_grow_with_the_batch(oracle: Oracle) -> None:
    """Small transformer batches are launch-bound: the GPU idles most of the step; large ones saturate it."""
    pred = oracle.predict(get_workload("bert-base", precision="bf16"), Placements.of(1, [8, 256], GPU))
    assert pred.gpu_busy is not None and pred.compute_busy is not None and pred.hbm_busy is not None
    assert pred.gpu_busy[0] < 0.4 < 0.85 < pred.gpu_busy[1] <= 1.0  # a fixed per-step overhead remains
    assert np.all(pred.compute_busy + pred.hbm_busy <= pred.gpu_busy + 1e-9)


def test_waterfill_meets_the_small_demand_and_splits_the_rest() -> None:
    assert waterfill(0.3, 0.4) == (0.3, 0.4)
    assert waterfill(0.3, 0.9) == pytest.approx((0.3, 0.7))
    assert waterfill(0.8, 0.9) == (0.5, 0.5)


@pytest.mark.parametrize("mode", [Sharing.TIME_SLICE, Sharing.MPS])
def test_two_launch_bound_jobs_gain_throughput_and_energy(oracle: Oracle, mode: Sharing) -> None:
    """Host gaps of one job are filled by the other: the pair does far more than one job's work per
    second, at less energy per unit of work than running them one after the other."""
    a, b = solo(oracle, "bert-base", 16), solo(oracle, "distilbert", 8)
    co = corun(a, b, facts(oracle), mode, oracle.params)
    assert co.feasible
    assert co.throughput > 1.5
    assert min(co.speed) > 0.8
    assert co.power_w / co.throughput < (a.power_w + b.power_w) / 2
    assert max(a.power_w, b.power_w) < co.power_w < a.power_w + b.power_w
    assert sum(co.power_share) == pytest.approx(1.0)


@pytest.mark.parametrize("mode", [Sharing.TIME_SLICE, Sharing.MPS])
def test_two_saturating_jobs_lose(oracle: Oracle, mode: Sharing) -> None:
    """Both jobs keep the GPU (HBM) busy alone: sharing only adds overhead, the pair does less than one."""
    a, b = solo(oracle, "resnet50", 256), solo(oracle, "gpt2", 16)
    co = corun(a, b, facts(oracle), mode, oracle.params)
    assert co.feasible
    assert co.throughput < 1.0
    assert co.power_w <= facts(oracle).tdp_w


def test_pair_whose_peak_memories_exceed_the_gpu_is_infeasible(oracle: Oracle) -> None:
    """TinyLlama at batch 32 alone takes the largest micro-batch that fits (gradient accumulation), most of
    the GPU; BERT-large at 64 needs more than what is left, by the model's own figures with a margin (a pair
    within a few percent of the bound, as TinyLlama with BERT-base was, flips with the activation memory
    scale of each refit). The same BERT-large beside a small job fits."""
    gpu = facts(oracle)
    usable = gpu.memory_bytes * USABLE_MEMORY_FRACTION - 2.0 * RESERVED_BYTES
    a, b = solo(oracle, "tinyllama-1.1b", 32), solo(oracle, "bert-large", 64)
    assert a.peak_mem_bytes < usable  # each fits alone
    assert a.peak_mem_bytes + b.peak_mem_bytes > 1.1 * usable
    co = corun(a, b, gpu, Sharing.TIME_SLICE, oracle.params)
    assert not co.feasible and "memories" in co.reason
    assert co.slowdown == (float("inf"), float("inf"))
    small = solo(oracle, "bert-base", 16)
    assert small.peak_mem_bytes + b.peak_mem_bytes < 0.9 * usable
    assert corun(small, b, gpu, Sharing.TIME_SLICE, oracle.params).feasible


def test_mps_overlaps_a_compute_heavy_with_a_memory_heavy_job_that_time_slicing_cannot(
    oracle: Oracle,
) -> None:
    """Each job keeps the GPU busy most of the step (time-slicing loses) but one is mostly compute and the
    other mostly HBM, so concurrent MPS kernels gain."""
    a, b = solo(oracle, "resnet50", 64, "fp32-strict"), solo(oracle, "albert-base", 64)
    ts = corun(a, b, facts(oracle), Sharing.TIME_SLICE, oracle.params)
    mps = corun(a, b, facts(oracle), Sharing.MPS, oracle.params)
    assert ts.throughput < 1.0 < mps.throughput


def test_no_sharing_mode_is_never_feasible(oracle: Oracle) -> None:
    a = solo(oracle, "bert-base", 16)
    assert not corun(a, a, facts(oracle), Sharing.NONE, oracle.params).feasible


def test_context_switch_overhead_slows_time_slicing_only(oracle: Oracle) -> None:
    a, b = solo(oracle, "resnet50", 32), solo(oracle, "bert-base", 64)
    more = oracle.params.replace(["coloc_switch_frac"], [0.5])
    for mode, changes in ((Sharing.TIME_SLICE, True), (Sharing.MPS, False)):
        base = corun(a, b, facts(oracle), mode, oracle.params).throughput
        slower = corun(a, b, facts(oracle), mode, more).throughput
        assert (slower < base - 0.01) is changes


def test_parse_sharing_names_the_field() -> None:
    assert parse_sharing("mps", "x") is Sharing.MPS
    with pytest.raises(ConfigError, match=r"^nodes\.yaml: nodes\[0\]\.sharing: sharing must be one of"):
        parse_sharing("shard", "nodes.yaml: nodes[0].sharing")


JOBS = (
    ("bert-base", 16, "bf16"),
    ("resnet50", 256, "bf16"),
    ("resnet50", 16, "fp32"),
    ("albert-base", 32, "bf16"),
    ("distilbert", 8, "bf16"),
    ("gpt2", 16, "bf16"),
)


def synthetic_pairs(oracle: Oracle, values: list[float]) -> list[PairRun]:
    """Co-run measurements generated by the rule itself with known parameters."""
    truth = oracle.params.replace(list(COLOC_PARAMS), values)
    pairs = []
    for i, a in enumerate(JOBS):
        for b in JOBS[i:]:
            for mode in (Sharing.TIME_SLICE, Sharing.MPS):
                jobs = (PairJob(a[0], a[1], a[2], 1.0, 1.0), PairJob(b[0], b[1], b[2], 1.0, 1.0))
                pairs.append(PairRun(f"p{len(pairs)}", GPU, mode, jobs))
    out = []
    for (sa, sb, g), pr in zip(solos(oracle, pairs), pairs, strict=True):
        co = corun(sa, sb, g, pr.sharing, truth)
        if not co.feasible:
            continue
        j0 = dataclasses.replace(
            pr.jobs[0], step_time_alone_s=sa.step_time_s, step_time_shared_s=sa.step_time_s * co.slowdown[0]
        )
        j1 = dataclasses.replace(
            pr.jobs[1], step_time_alone_s=sb.step_time_s, step_time_shared_s=sb.step_time_s * co.slowdown[1]
        )
        out.append(dataclasses.replace(pr, jobs=(j0, j1), gpu_power_shared_w=co.power_w))
    return out


def test_fit_recovers_known_parameters_from_synthetic_coruns(oracle: Oracle) -> None:
    known = [0.22, 0.55, 0.85]
    pairs = synthetic_pairs(oracle, known)
    assert len(pairs) > 20
    fit = fit_colocation(oracle, pairs)
    assert [fit.values[n] for n in COLOC_PARAMS] == pytest.approx(known, abs=0.02)
    assert fit.mape_slowdown_before > 5.0
    assert fit.mape_slowdown < 0.5
    assert fit.mape_power is not None and fit.mape_power < 0.5
    assert fit.params["coloc_queue"] == pytest.approx(known[1], abs=0.02)


HEADER = "pair,model,batch,precision,step_time_alone_s,step_time_shared_s,gpu_power_alone_w,gpu_power_shared_w,sharing\n"


def test_read_pairs_parses_two_rows_per_pair(tmp_path: Path) -> None:
    f = tmp_path / "pairs.csv"
    f.write_text(
        HEADER
        + "p1,bert-base,16,bf16,0.042,0.046,234,320,mps\n"
        + "p1,distilbert,8,bf16,0.023,0.025,236,320,mps\n"
    )
    (pair,) = read_pairs(f)
    assert pair.sharing is Sharing.MPS and pair.gpu == GPU and pair.gpu_power_shared_w == 320.0
    assert pair.jobs[0].slowdown == pytest.approx(0.046 / 0.042)


def test_read_pairs_skips_comments_and_leaves_inference_pairs_out(tmp_path: Path, caplog) -> None:
    """measure --pairs writes a '# how it was made' line first and may measure inference jobs, which
    the oracle (training steps) cannot predict: those pairs are left out with a warning, line numbers
    still count the file's lines."""
    f = tmp_path / "pairs.csv"
    f.write_text(
        "# easlurm model measure --pairs: h100-sxm\n"
        + HEADER.strip()
        + ",mode\n"
        + "1,bert-base,16,bf16,0.042,0.046,234,320,,train\n"
        + "1,distilbert,8,bf16,0.023,0.025,236,320,,train\n"
        + "2,gpt2,8,bf16,0.02,0.03,300,400,,infer\n"
        + "2,vit-b16,8,bf16,0.02,0.03,300,400,,train\n"
        + "3,gpt2,8,bf16,0.02,-1,300,400,,train\n"
        + "3,vit-b16,8,bf16,0.02,0.03,300,400,,train\n"
    )
    with pytest.raises(EaslurmError, match=r"line 7: step_time_shared_s must be > 0"):
        read_pairs(f)
    f.write_text("\n".join(f.read_text().splitlines()[:-2]) + "\n")
    with caplog.at_level("WARNING"):
        pairs = read_pairs(f)
    assert [p.pair for p in pairs] == ["1"]
    assert "1 pair(s) with an inference job left out" in caplog.text


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("p1,bert-base,16,bf16,0.042,0.046,234,320,\n", r"pair 'p1' needs exactly two rows"),
        (
            "p1,bert-base,16,bf16,0.042,-1,234,320,\np1,bert-base,16,bf16,0.042,0.05,234,320,\n",
            r"line 2: step_time_shared_s must be > 0",
        ),
        (
            "p1,bert-base,16,bf16,0.042,0.05,234,320,none\np1,bert-base,16,bf16,0.042,0.05,234,320,none\n",
            r"line 2: sharing: a co-run needs",
        ),
    ],
)
def test_read_pairs_rejects_bad_rows_with_one_line(tmp_path: Path, rows: str, message: str) -> None:
    f = tmp_path / "pairs.csv"
    f.write_text(HEADER + rows)
    with pytest.raises(EaslurmError, match=message) as info:
        read_pairs(f)
    assert "\n" not in str(info.value) and str(f) in str(info.value)


def write_pairs_csv(path: Path, pairs: list[PairRun]) -> None:
    lines = [HEADER.strip()]
    for pr in pairs:
        for j in pr.jobs:
            lines.append(
                f"{pr.pair},{j.model},{j.batch},{j.precision},{j.step_time_alone_s},{j.step_time_shared_s},"
                f",{pr.gpu_power_shared_w},{pr.sharing.value}"
            )
    path.write_text("\n".join(lines) + "\n")


def test_calibrate_pairs_cli_writes_parameters_the_oracle_reads(
    oracle: Oracle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`easlurm model calibrate-pairs` on a pairs CSV writes a parameter file with the fitted values."""
    from easlurm.cli import main
    from easlurm.model.params import load_params

    known = [0.05, 0.4, 0.3]
    csv_path, out = tmp_path / "pairs.csv", tmp_path / "params.yaml"
    write_pairs_csv(csv_path, synthetic_pairs(oracle, known))
    assert main(["model", "calibrate-pairs", str(csv_path), "-O", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pairs"] > 20 and doc["mape_slowdown_pct"] < 0.5
    params = load_params(out)
    assert [params[n] for n in COLOC_PARAMS] == pytest.approx(known, abs=0.02)
    assert params["beta_gemm"] == oracle.params["beta_gemm"]  # the rest is left as it was


def test_corun_cli_reports_both_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    from easlurm.cli import main

    assert main(["model", "corun", "bert-base:16", "distilbert:8", "--sharing", "mps", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["feasible"] and doc["throughput"] > 1.5
    assert sum(j["power_shared_w"] for j in doc["jobs"]) == pytest.approx(doc["gpu_power_w"])
    assert main(["model", "corun", "bert-base", "gpt2:8"]) != 0
    assert "FIRST: expected MODEL:BATCH[:PRECISION]" in capsys.readouterr().err
    # the jobs are named as `model measure --pairs` names them; an inference job is not predicted
    assert main(["model", "corun", "bert-base:16", "gpt2:8:fp32:infer"]) != 0
    assert "SECOND: the oracle predicts training steps" in capsys.readouterr().err
    assert main(["model", "corun", "bert-base:16:fp32", "gpt2:8:tf32", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [j["job"] for j in doc["jobs"]] == ["bert-base:16:fp32", "gpt2:8:tf32"]
    assert doc["jobs"][0]["gpu_busy"] > 0.9  # FP32 keeps the GPU busy, bf16 at this batch is launch-bound


def test_a_capped_pair_draws_its_limit_and_slows_as_a_job_alone_would(oracle: Oracle) -> None:
    """One limit for the GPU: the pair draws at most the limit, and the clock that fits it under the limit
    costs each job what the oracle charges the job alone at the same clock (compute time follows it)."""
    from easlurm.model.equations import clock_under_limit

    gpu = facts(oracle)
    a, b = solo(oracle, "resnet50", 256), solo(oracle, "gpt2", 16)
    free = corun(a, b, gpu, Sharing.MPS, oracle.params)
    assert corun(a, b, gpu, Sharing.MPS, oracle.params, gpu.tdp_w) == free
    limit = 320.0
    assert free.power_w > limit
    capped = corun(a, b, gpu, Sharing.MPS, oracle.params, limit)
    assert capped.power_w == pytest.approx(limit)
    assert all(capped.speed[i] < free.speed[i] for i in range(2))
    assert sum(capped.power_share) == pytest.approx(1.0)
    clock = float(clock_under_limit(free.power_w, limit, gpu.clock_floor_w, oracle.params))
    for i, (job, model, batch) in enumerate(((a, "resnet50", 256), (b, "gpt2", 16))):
        # the limit at which the job alone runs at the pair's clock, and its step time there
        alone_limit = (
            gpu.clock_floor_w + (job.power_w - gpu.clock_floor_w) * clock ** oracle.params["cap_alpha"]
        )
        pred = oracle.predict(
            get_workload(model, precision="bf16"), Placements.of(1, batch, GPU, alone_limit)
        )
        extra = float(pred.step_time_s[0]) / job.step_time_s - 1.0  # per alone step, at the default limit
        assert 1.0 / capped.speed[i] - 1.0 / free.speed[i] == pytest.approx(extra, rel=0.02)


def test_a_pair_under_its_power_is_not_slowed_and_limits_outside_the_range_are_refused(
    oracle: Oracle,
) -> None:
    gpu = facts(oracle)
    a, b = solo(oracle, "bert-base", 16), solo(oracle, "distilbert", 8)
    free = corun(a, b, gpu, Sharing.TIME_SLICE, oracle.params)
    assert corun(a, b, gpu, Sharing.TIME_SLICE, oracle.params, free.power_w + 1.0) == free
    for bad in (gpu.min_limit_w - 1.0, gpu.tdp_w + 1.0):
        with pytest.raises(EaslurmError, match="outside the GPU's 200-700 W"):
            corun(a, b, gpu, Sharing.TIME_SLICE, oracle.params, bad)
