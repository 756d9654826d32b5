"""Oracle predictions: vectorisation, monotonic properties, power limits, feasibility, cache, noise."""

import math

import numpy as np
import pytest

from easlurm.errors import ModelError
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.oracle import NoisyOracle, Oracle, Placements
from easlurm.model.params import OracleParams
from easlurm.model.workload import Precision
from easlurm.model.zoo import get_workload

NAN = math.nan


@pytest.fixture(scope="module")
def oracle():
    return Oracle()


def test_grid_is_a_cartesian_product_and_accepts_aliases(oracle):
    pl = Placements.grid([1, 2, 4, 8], [256, 512], ["a100", "h100"], [NAN, 300.0])
    assert len(pl) == 4 * 2 * 2 * 2
    pred = oracle.predict(get_workload("vit-b16"), pl)
    assert len(pred) == len(pl)
    assert np.all(np.isfinite(pred.step_time_s))


def test_of_broadcasts_scalars():
    pl = Placements.of([1, 2, 4], 256, "a100-40gb")
    assert len(pl) == 3
    assert list(pl.gpu) == ["a100-40gb"] * 3
    assert np.isnan(pl.power_limit_w).all()


def test_vectorised_equals_one_by_one(oracle):
    w = get_workload("bert-base", precision="bf16")
    pl = Placements.grid([1, 2, 8, 16], [64, 1024], ["a100-40gb", "h100-sxm", "l40s"], [NAN, 250.0])
    together = oracle.predict(w, pl)
    for i in range(len(pl)):
        one = oracle.predict(w, pl.take(np.array([i])))
        assert one.step_time_s[0] == pytest.approx(together.step_time_s[i])
        assert one.power_w[0] == pytest.approx(together.power_w[i])


def test_predict_many_matches_predict(oracle):
    ws = [get_workload("resnet50"), get_workload("gpt2", seq_len=256, precision="fp32")]
    pl = Placements.grid([1, 4], [128], ["a100-80gb", "h200"])
    many = oracle.predict_many(ws, pl)
    for j, w in enumerate(ws):
        one = oracle.predict(w, pl)
        np.testing.assert_allclose(many.edp[j * len(pl) : (j + 1) * len(pl)], one.edp)


def test_energy_and_edp_are_consistent(oracle):
    pred = oracle.predict(get_workload("resnet50"), Placements.grid([1, 2, 4], [256], ["a100"]))
    np.testing.assert_allclose(pred.energy_j, pred.power_w * pred.step_time_s)
    np.testing.assert_allclose(pred.edp, pred.energy_j * pred.step_time_s)
    np.testing.assert_allclose(pred.samples_per_s, 256 / pred.step_time_s)


def test_more_gpus_less_compute_more_communication():
    """Data parallel at a fixed global batch: each GPU computes less, the all-reduce grows with N."""
    from easlurm.model.equations import HardwareArrays, WorkloadArrays, evaluate
    from easlurm.model.hardware import load_catalogue

    params = OracleParams()
    w = WorkloadArrays.of([get_workload("vit-b16")], params)
    hw = HardwareArrays.table([load_catalogue().get("a100-40gb")] * 4)
    n = np.array([1, 2, 4, 8])
    res = evaluate(w, hw, n, np.full(4, 512), np.full(4, NAN), params.values)
    assert np.all(np.diff(res.t_pass_s) < 0)
    assert res.t_comm_s[0] == 0
    assert np.all(np.diff(res.t_comm_s) > 0)


def test_power_stays_between_idle_and_tdp(oracle):
    cat = oracle.catalogue
    pl = Placements.grid([1, 8], [32, 512], cat.keys())
    pred = oracle.predict(get_workload("distilbert"), pl)
    ok = pred.feasible
    idle = np.array([cat.get(g).idle_w for g in pl.gpu]) * pl.n_gpus
    tdp = np.array([cat.get(g).tdp_w for g in pl.gpu]) * pl.n_gpus
    assert np.all(pred.power_w[ok] > idle[ok]) and np.all(pred.power_w[ok] <= tdp[ok] + 1e-9)


def _memory_bound_workload():
    """Elementwise-only work with tiny GEMMs: HBM-bound like the TRIAD kernel of thesis 6.3.3."""
    b = WorkloadBuilder(Precision.FP32)
    b.linear(tokens=1, d_in=64, d_out=64)
    b.elementwise(5e7, repeat=4)
    return b.build("triad-like")


def test_power_limit_slows_compute_bound_more_than_memory_bound(oracle):
    pl = Placements.of(1, 64, "a100-40gb", [NAN, 250.0])
    gemm = oracle.predict(get_workload("vit-l16", precision="bf16"), pl)
    triad = oracle.predict(_memory_bound_workload(), pl)
    slow_gemm = gemm.step_time_s[1] / gemm.step_time_s[0]
    slow_triad = triad.step_time_s[1] / triad.step_time_s[0]
    assert slow_gemm > 1.1
    assert slow_triad < 1.05
    assert gemm.power_w[1] <= 250.0 + 1e-9 and triad.power_w[1] <= 250.0 + 1e-9


def test_memory_bound_work_has_its_best_edp_below_tdp(oracle):
    limits = np.arange(100.0, 401.0, 25.0)
    pred = oracle.predict(_memory_bound_workload(), Placements.of(1, 64, "a100-40gb", limits))
    assert limits[np.argmin(pred.edp)] < 400.0


def test_power_limit_outside_range_is_an_error(oracle):
    with pytest.raises(ModelError, match="power limit 50 W"):
        oracle.predict(get_workload("resnet50"), Placements.of(1, 64, "a100", 50.0))


def test_unknown_gpu_is_an_error(oracle):
    with pytest.raises(ModelError, match="unknown GPU 'tpu'"):
        oracle.predict(get_workload("resnet50"), Placements.of(1, 64, "tpu"))


def test_model_that_does_not_fit_is_infeasible(oracle):
    """Llama-3-8B with AdamW needs ~128 GB of states: no single A10 or A100 holds it."""
    pred = oracle.predict(get_workload("llama3-8b"), Placements.of(1, 8, ["a10", "a100-40gb"]))
    assert not pred.feasible.any()
    assert np.isinf(pred.step_time_s).all() and np.isinf(pred.edp).all()


def test_large_batches_use_gradient_accumulation(oracle):
    pred = oracle.predict(get_workload("tinyllama-1.1b"), Placements.of(1, [4, 512], "a100-40gb"))
    assert pred.grad_accum[0] == 1 and pred.grad_accum[1] > 1
    assert pred.step_time_s[1] > 50 * pred.step_time_s[0]


def test_batch_smaller_than_gpus_is_infeasible(oracle):
    pred = oracle.predict(get_workload("resnet50"), Placements.of(8, 4, "a100"))
    assert not pred.feasible[0]


def test_cache_returns_the_same_prediction():
    o = Oracle(cache_size=2)
    w = get_workload("resnet50")
    pl = Placements.of([1, 2], 128, "a100")
    first = o.predict(w, pl)
    second = o.predict(w, Placements.of([1, 2], 128, "a100"))
    assert second is first and o.hits == 1


def test_noisy_oracle_is_seeded_capped_and_unbiased():
    w = get_workload("vit-b16")
    pl = Placements.of(np.full(4000, 4), 512, "a100-40gb", 250.0)
    clean = Oracle().predict(w, pl)
    a = NoisyOracle(sigma=0.1, seed=7).predict(w, pl)
    b = NoisyOracle(sigma=0.1, seed=7).predict(w, pl)
    np.testing.assert_array_equal(a.step_time_s, b.step_time_s)
    assert np.all(a.power_w <= 4 * 250.0 + 1e-9)
    ratio = a.step_time_s / clean.step_time_s
    assert ratio.mean() == pytest.approx(1.0, abs=0.01)
    assert ratio.std() == pytest.approx(0.1, rel=0.1)


def test_params_change_predictions():
    w = get_workload("bert-base")
    pl = Placements.of(1, 64, "a100")
    base = Oracle(OracleParams()).predict(w, pl)
    slow = Oracle(OracleParams(scalars={"bert.gemm": 3.0})).predict(w, pl)
    assert slow.step_time_s[0] > 1.5 * base.step_time_s[0]


def test_noisy_predict_many_draws_per_job():
    """Two identical jobs in one batch call still get independent noise."""
    w = get_workload("resnet50")
    pred = NoisyOracle(sigma=0.1, seed=1).predict_many([w, w], Placements.of([1, 2], 256, "a100"))
    assert pred.step_time_s[0] != pred.step_time_s[2]


def test_power_cap_sweet_spots_follow_the_thesis():
    """Thesis 6.3.3 on A100: compute-bound GEMM has its best EDP near TDP, memory-bound TRIAD far below it."""
    b = WorkloadBuilder(Precision.BF16)
    b.linear(tokens=4096, d_in=8192, d_out=8192)
    gemm = b.build("gemm")
    oracle = Oracle(OracleParams())
    limits = np.arange(150.0, 401.0, 10.0)
    pl = Placements.of(1, 64, "a100-40gb", limits)
    best_gemm = limits[np.argmin(oracle.predict(gemm, pl).edp)]
    best_triad = limits[np.argmin(oracle.predict(_memory_bound_workload(), pl).edp)]
    assert best_gemm >= 300.0
    assert best_triad <= 250.0
