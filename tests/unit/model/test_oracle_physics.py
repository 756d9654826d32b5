"""Closed-form checks of the oracle's terms: host-bound steps, HBM-bound work, busy-fraction power, memory."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from easlurm.model.fit.calibrate import calibrate, score
from easlurm.model.fit.dataset import placements_of, read_measurements
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import OracleParams
from easlurm.model.zoo import get_workload

H100_ROWS = Path(__file__).resolve().parents[3] / "data" / "oracle" / "h100_sxm_training_steps.csv"

#: no fixed overheads, so that the terms under test are alone
BARE = {"t_fixed_s": 0.0, "t_kern_s": 1e-9, "t_sync_s": 0.0}


def _one(oracle: Oracle, workload, batch, gpu="h100-sxm", limit=math.nan):
    pred = oracle.predict(workload, Placements.of(1, batch, gpu, limit))
    return float(pred.step_time_s[0]), float(pred.power_w[0])


def _elementwise_only(elems: float):
    b = WorkloadBuilder("fp32")
    b.linear(1, 8, 8)  # a tiny layer for the parameter count
    b.elementwise(elems, repeat=20)
    return b.build("ew", optimizer="sgd")


def test_launch_bound_step_does_not_scale_with_batch():
    """A step whose host dispatch outlasts the GPU work takes host_ops x t_host_op whatever the batch."""
    b = WorkloadBuilder("bf16")
    b.linear(256, 1024, 1024)
    b.python_ops(500)
    w = b.build("launch-bound")
    oracle = Oracle(OracleParams({**BARE, "t_host_op_s": 1e-4}))
    times = [_one(oracle, w, batch)[0] for batch in (1, 8, 64)]
    assert times[0] == pytest.approx(times[2], rel=1e-3)
    opt = max(w.opt_bytes / 3.35e12 * oracle.params["c_mem"], w.opt_ops * 1e-4)
    assert times[0] == pytest.approx(w.host_ops * 1e-4 + opt, rel=1e-3)
    # once the GPU work outgrows the host, time grows with the batch again
    assert _one(oracle, w, 65536)[0] > 2 * times[0]


def test_memory_bound_work_scales_with_bytes_over_bandwidth():
    """Element-wise work costs bytes / HBM bandwidth: twice the bytes twice the time, a GPU with more
    bandwidth proportionally less."""
    params = OracleParams({**BARE, "t_host_op_s": 5e-6, "lambda_miss": 1.0})
    oracle = Oracle(params)
    w = _elementwise_only(4e6)
    t1 = _one(oracle, w, 256)[0]
    t2 = _one(oracle, w, 512)[0]
    opt = w.opt_bytes / 3.35e12 * params["c_mem"]
    expected = (w.act_bytes * 256 + w.weight_bytes) / 3.35e12 * params["c_mem"] + opt
    assert t1 == pytest.approx(expected, rel=1e-3)
    assert (t2 - opt) == pytest.approx(2 * (t1 - opt), rel=1e-3)
    a100 = _one(oracle, w, 256, "a100-40gb")[0]
    assert a100 / t1 == pytest.approx(3350 / 1555, rel=0.01)


def test_host_bound_steps_draw_less_power_than_busy_ones():
    """Power follows the busy fractions: a launch-bound small batch draws far less than a saturated one."""
    oracle = Oracle()
    w = get_workload("bert-base", precision="bf16", seq_len=128)
    small, big = (_one(oracle, w, b)[1] for b in (8, 512))
    assert small < 0.7 * big
    assert big <= 700.0


def test_power_limit_is_respected_and_slows_compute():
    oracle = Oracle()
    w = get_workload("vit-b16", precision="bf16")
    t_free, p_free = _one(oracle, w, 128)
    t_cap, p_cap = _one(oracle, w, 128, limit=300.0)
    assert p_cap <= 300.0 + 1e-6 < p_free
    assert t_cap > t_free


def test_fp32_attention_and_16bit_tensor_cores():
    """Fused attention runs on the precision's peak: the same FLOPs take longer in FP32 than in BF16."""
    w32, w16 = (get_workload("gpt2", precision=p) for p in ("fp32", "bf16"))
    assert w32.flops_attn == w16.flops_attn > 0
    oracle = Oracle()
    assert _one(oracle, w32, 8)[0] > 1.5 * _one(oracle, w16, 8)[0]


def test_peak_memory_matches_the_measured_rows():
    """Predicted peak memory of every measured H100 row within 35 % (cuDNN's workspace for FP32 convolutions is
    not modelled: ResNet-50 FP32 at batch 64 is the worst row), and 15 % on average."""
    rows = read_measurements(H100_ROWS)
    pred = Oracle().predict_rows([m.workload() for m in rows], placements_of(rows))
    measured = np.array([m.peak_mem_gib for m in rows])
    err = np.abs(pred.peak_mem_gib / measured - 1.0)
    assert err.max() < 0.35, err
    assert err.mean() < 0.15


def test_placements_that_do_not_fit_are_infeasible():
    oracle = Oracle()
    w = get_workload("llama3-8b", precision="bf16")
    pred = oracle.predict(w, Placements.of(1, 1, "h100-sxm"))
    assert not pred.feasible[0] and math.isinf(pred.step_time_s[0])
    assert pred.peak_mem_gib[0] > 80  # weights, gradients and AdamW state alone exceed the GPU


def test_memory_scale_is_fitted_in_closed_form():
    rows = read_measurements(H100_ROWS)
    truth = OracleParams({"mem_act_scale": 1.3})
    mem = Oracle(truth).predict_rows([m.workload() for m in rows], placements_of(rows)).peak_mem_gib
    synthetic = [dataclasses.replace(m, peak_mem_gib=float(g)) for m, g in zip(rows, mem)]
    res = calibrate(synthetic, OracleParams(), free=["t_fixed_s"], maxiter=2)
    assert res.params["mem_act_scale"] == pytest.approx(1.3, rel=1e-6)
    assert res.fit.mape_mem == pytest.approx(0.0, abs=1e-6)


def test_leave_one_model_out_on_the_h100_rows():
    """Fitted on three models, the oracle predicts the fourth: the figure that says it generalises."""
    rows = read_measurements(H100_ROWS)
    errs_t, errs_p = [], []
    for held in sorted({m.model for m in rows}):
        train = [m for m in rows if m.model != held]
        test = [m for m in rows if m.model == held]
        res = calibrate(train, OracleParams(), maxiter=40, popsize=10)  # with its L-BFGS-B polish, as shipped
        fit = score(res.params, test)
        errs_t.append(fit.mape_time * len(test))
        errs_p.append(fit.mape_power * len(test))
    assert sum(errs_t) / len(rows) < 15.0
    assert sum(errs_p) / len(rows) < 10.0
