"""Per-architecture physics: tensor-core precisions, factors that scale the shared parameters on one
architecture only, power that saturates at the limit, and calibration that recovers known factors."""

import dataclasses
import math

import numpy as np
import pytest

from easlurm.errors import ModelError
from easlurm.model.equations import HardwareArrays, WorkloadArrays, evaluate
from easlurm.model.fit.calibrate import arch_free, calibrate, default_free
from easlurm.model.fit.dataset import Measurement, placements_of
from easlurm.model.fit.evaluate import make_splits, parse_cv
from easlurm.model.hardware import Catalogue, load_catalogue
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import OracleParams, load_params, params_from_doc, params_to_doc
from easlurm.model.workload import Precision
from easlurm.model.zoo import get_workload

NAN = math.nan
#: no fixed overheads, so that the terms under test are alone
BARE = {"t_fixed_s": 0.0, "t_kern_s": 1e-9, "t_sync_s": 0.0, "t_host_op_s": 5e-6}


def _step(oracle, workload, gpu, batch=64, limit=NAN):
    pred = oracle.predict(workload, Placements.of(1, batch, gpu, limit))
    return float(pred.step_time_s[0]), float(pred.power_w[0])


def test_tensor_core_precisions_follow_the_architecture():
    """Volta runs FP16 on tensor cores but TF32 and BF16 as plain FP32; Ampere runs all three on them."""
    cat = load_catalogue()
    v100, a100 = cat.get("v100"), cat.get("a100-40gb")
    assert v100.runs_as(Precision.TF32) is Precision.FP32
    assert v100.runs_as(Precision.BF16) is Precision.FP32
    assert v100.runs_as(Precision.FP16) is Precision.FP16
    assert v100.peak_flops(Precision.BF16) == v100.peak_flops(Precision.FP32)
    assert a100.peak_flops(Precision.TF32) > a100.peak_flops(Precision.FP32)
    oracle = Oracle(OracleParams(BARE))
    fp32 = _step(oracle, get_workload("bert-base", precision="fp32", seq_len=128), "v100")
    tf32 = _step(oracle, get_workload("bert-base", precision="tf32", seq_len=128), "v100")
    fp16 = _step(oracle, get_workload("bert-base", precision="fp16", seq_len=128), "v100")
    assert tf32[0] == pytest.approx(fp32[0], rel=1e-9)
    assert fp16[0] < 0.5 * fp32[0]
    a_fp32 = _step(oracle, get_workload("bert-base", precision="fp32", seq_len=128), "a100-40gb")
    a_tf32 = _step(oracle, get_workload("bert-base", precision="tf32", seq_len=128), "a100-40gb")
    assert a_tf32[0] < 0.5 * a_fp32[0]


def test_architecture_factor_scales_its_gpus_only():
    """'volta.beta_gemm' halves the GEMM efficiency on V100 and leaves the Ampere and Hopper GPUs alone."""
    w = get_workload("bert-base", precision="fp16", seq_len=128)
    base = Oracle(OracleParams(BARE))
    slow = Oracle(OracleParams(BARE, {"volta.beta_gemm": 0.5}))
    assert _step(slow, w, "v100")[0] > 1.3 * _step(base, w, "v100")[0]
    for gpu in ("a100-40gb", "h100-sxm"):
        assert _step(slow, w, gpu) == _step(base, w, gpu)


def test_architecture_factor_names_are_checked():
    with pytest.raises(ModelError, match="architecture factor"):
        OracleParams(scalars={"volta.nonsense": 1.0})
    with pytest.raises(ModelError, match="unknown architecture"):
        OracleParams(architectures=("fermi",))
    doc = params_to_doc(OracleParams(scalars={"turing.c_p": 1.4}, architectures=("hopper", "turing")))
    back = params_from_doc(doc, "x")
    assert back.architectures == ("hopper", "turing") and back.scalars == {"turing.c_p": 1.4}


def test_gpu_of_an_uncalibrated_architecture_says_it_uses_shared_physics():
    """Parameters calibrated on Hopper alone flag V100 rows (shared physics), not H100 rows."""
    oracle = Oracle(dataclasses.replace(load_params(), architectures=("hopper",)))
    w = get_workload("resnet50", precision="fp16")
    pred = oracle.predict(w, Placements.of(1, 64, np.array(["h100-sxm", "v100"], dtype=object)))
    assert pred.shared_physics is not None and pred.shared_physics.tolist() == [False, True]
    many = oracle.predict_many([w, w], Placements.of(1, 64, np.array(["v100", "h100-sxm"], dtype=object)))
    assert many.shared_physics is not None and many.shared_physics.tolist() == [True, False, True, False]
    assert oracle.uncalibrated_gpus(["h100-sxm", "v100"]) == ["v100"]


def _gemm_workload():
    b = WorkloadBuilder("fp16")
    b.linear(4096, 4096, 4096, repeat=8)
    return b.build("gemm", optimizer="sgd")


def _row(w, spec, limit, params):
    wa = WorkloadArrays.of([w], params)
    hw = HardwareArrays.table([spec])
    return evaluate(wa, hw, np.array([1]), np.array([64]), np.array([limit]), params.physics)


def test_step_at_a_limit_below_its_demand_slows_down_and_draws_the_limit():
    """Closed form: demand P above the limit L lowers the SM clock to ((L - floor) / (P - floor))^(1/alpha);
    the step draws L and its compute time grows by 1/clock (memory-bound work above the knee keeps its speed)."""
    params = OracleParams({**BARE, "mem_clock_knee": 0.1, "cap_alpha": 2.0, "p_floor_frac": 0.2})
    spec = load_catalogue().get("a100-40gb")
    w = _gemm_workload()
    free = _row(w, spec, 10_000.0, params)  # a limit far above the demand: the unthrottled step
    demand = float(free.power_w[0])
    assert demand < spec.tdp_w
    limit = 0.6 * demand
    capped = _row(w, spec, limit, params)
    # the P0 idle power and a share of the range above it
    floor = spec.p0_w + 0.2 * (spec.tdp_w - spec.p0_w)
    clock = ((limit - floor) / (demand - floor)) ** 0.5
    assert clock > params["cap_clock_min"]  # a limit the board can hold
    assert float(capped.power_w[0]) == pytest.approx(limit)
    assert float(capped.clock_scale[0]) == pytest.approx(clock)
    slower = float(capped.step_time_s[0]) - float(free.step_time_s[0])
    assert slower == pytest.approx(float(free.t_pass_s[0]) * (1 / clock - 1), rel=0.02)


def test_a_limit_below_what_the_lowest_clock_costs_is_not_held():
    """Closed form below the lowest clock a cap reaches: the clock stops at cap_clock_min and the step draws
    floor + (P - floor) x cap_clock_min^alpha, above the limit (the board cannot hold it), never stalling."""
    params = OracleParams({**BARE, "mem_clock_knee": 0.1, "cap_alpha": 2.0, "p_floor_frac": 0.2})
    spec = load_catalogue().get("a100-40gb")
    w = _gemm_workload()
    free = _row(w, spec, 10_000.0, params)
    demand = float(free.power_w[0])
    floor = spec.p0_w + 0.2 * (spec.tdp_w - spec.p0_w)
    c_min = params["cap_clock_min"]
    lowest = floor + (demand - floor) * c_min**2.0
    limit = floor + 0.5 * (lowest - floor)  # half way from the floor to the lowest clock's draw
    capped = _row(w, spec, limit, params)
    assert float(capped.clock_scale[0]) == pytest.approx(c_min)
    assert float(capped.power_w[0]) == pytest.approx(lowest)
    assert float(capped.power_w[0]) > limit
    slower = float(capped.step_time_s[0]) - float(free.step_time_s[0])
    assert slower == pytest.approx(float(free.t_pass_s[0]) * (1 / c_min - 1), rel=0.02)


def test_small_tdp_card_saturates_at_its_tdp():
    """A 70 W card whose full-load demand exceeds its TDP is predicted at 70 W by default, and slower than it
    would run unconstrained (the throttled clock); no explicit limit is needed."""
    t4 = dataclasses.replace(
        load_catalogue().get("a10"),
        key="t4x",
        name="T4-like",
        architecture="turing",
        fp32_tflops=8.1,
        tf32_tflops=8.1,
        bf16_tflops=65.0,
        hbm_gbs=320.0,
        tdp_w=70.0,
        idle_w=10.0,
        min_power_limit_w=60.0,
        aliases=(),
    )
    params = OracleParams({**BARE, "c_p": 1.0}, {"turing.c_p": 2.5})
    w = _gemm_workload()
    default = _row(w, t4, NAN, params)
    unconstrained = _row(w, t4, 10_000.0, params)
    assert float(unconstrained.power_w[0]) > 70.0
    assert float(default.power_w[0]) == pytest.approx(70.0)
    assert float(default.step_time_s[0]) > 1.1 * float(unconstrained.step_time_s[0])
    oracle = Oracle(params, Catalogue({"t4x": t4}))
    assert _step(oracle, w, "t4x")[1] == pytest.approx(70.0)


def _fp32_gemm_workload():
    b = WorkloadBuilder("fp32")
    b.linear(4096, 4096, 4096, repeat=8)
    return b.build("gemm32", optimizer="sgd")


def test_cuda_core_work_costs_energy_per_flop_not_a_share_of_the_tdp():
    """Closed form: FP32 work on the CUDA cores adds e_simt_pj x its FLOPs to the step's energy, so a
    board with half the FP32 rate spends the same energy on the same work over a longer step (a lower power),
    whatever its TDP; tensor-core work keeps its share of the power range."""
    params = OracleParams({**BARE, "u_mem": 0.0, "u_idle": 0.0, "c_p": 0.7, "e_simt_pj": 20.0})
    fast = dataclasses.replace(load_catalogue().get("rtx6000"), min_power_limit_w=100.0)
    slow = dataclasses.replace(fast, fp32_tflops=fast.fp32_tflops / 2)
    w = _fp32_gemm_workload()
    flops = 64 * (w.flops_gemm + w.flops_conv + w.flops_attn)
    for spec in (fast, slow):
        res = _row(w, spec, 10_000.0, params)
        above_p0 = (float(res.power_w[0]) - spec.p0_w) * float(res.step_time_s[0])
        assert above_p0 == pytest.approx(20e-12 * flops, rel=1e-6)
    p_fast = float(_row(w, fast, 10_000.0, params).power_w[0])
    p_slow = float(_row(w, slow, 10_000.0, params).power_w[0])
    assert p_slow < p_fast
    twice = OracleParams({**params.values, "e_simt_pj": 40.0})
    res = _row(w, fast, 10_000.0, twice)
    assert (float(res.power_w[0]) - fast.p0_w) * float(res.step_time_s[0]) == pytest.approx(
        40e-12 * flops, rel=1e-6
    )
    tensor = _row(_gemm_workload(), fast, 10_000.0, twice)
    assert float(tensor.power_w[0]) == pytest.approx(
        float(_row(_gemm_workload(), fast, 10_000.0, params).power_w[0])
    )


def test_shipped_parameters_hold_low_tdp_boards_at_their_tdp_on_fp32_work():
    """docs/oracle-gpus.md: with energy per FLOP on the CUDA cores, FP32 ResNet-50 needs more than a T4's or an
    A10's TDP, so both are predicted at it, slower than their rate; on tensor cores the T4 stays under it."""
    oracle = Oracle(load_params())
    fp32 = get_workload("resnet50", precision="fp32-strict")
    for gpu, tdp in (("t4", 70.0), ("a10", 150.0)):
        _, power = _step(oracle, fp32, gpu, batch=128)
        assert power == pytest.approx(tdp)
    assert _step(oracle, get_workload("resnet50", precision="fp16"), "t4", batch=128)[1] < 70.0


#: per-architecture factors the synthetic "truth" holds (Hopper is the reference: its factors are 1.0)
TRUE_FACTORS = {
    "volta.beta_gemm": 0.7,
    "volta.c_mem": 1.4,
    "volta.c_p": 1.25,
    "ampere.beta_gemm": 1.15,
    "ampere.c_mem": 1.3,
}


def synthetic_arch_rows(params):
    rows = []
    for gpu in ("h100-sxm", "a100-40gb", "v100"):
        for model, size in (("bert-base", {"seq_len": 128}), ("gpt2", {"seq_len": 256})):
            for prec in ("fp16", "fp32"):
                for b in (1, 8, 32):
                    rows.append(Measurement(model, b, prec, 1, gpu, 1.0, **size))
    pred = Oracle(params).predict_rows([m.workload() for m in rows], placements_of(rows))
    return [
        dataclasses.replace(m, step_time_s=float(t), avg_power_w=float(p))
        for m, t, p in zip(rows, pred.step_time_s, pred.power_w)
    ]


def test_calibration_recovers_known_architecture_factors():
    """Rows made by an oracle with known per-architecture factors: a fit of those factors from 1.0 finds them,
    and the calibrated set records the architectures it saw."""
    truth = OracleParams(BARE, TRUE_FACTORS)
    rows = synthetic_arch_rows(truth)
    free = list(TRUE_FACTORS)
    res = calibrate(rows, OracleParams(BARE), free, maxiter=40, popsize=10, seed=1)
    for name, value in TRUE_FACTORS.items():
        assert res.params.scalars[name] == pytest.approx(value, rel=0.03), name
    assert set(res.params.architectures) == {"hopper", "ampere", "volta"}
    assert res.fit.loss < 0.5


def test_default_free_set_has_factors_for_all_but_the_reference_architecture():
    rows = synthetic_arch_rows(OracleParams(BARE))
    names = arch_free(rows)
    # three GPUs tie: the first is the reference
    assert {n.split(".")[0] for n in names} == {"ampere", "volta"}
    assert "volta.c_p" in names and "volta.beta_gemm" in names
    assert set(names) <= set(default_free(rows))


def test_power_factors_are_fitted_for_all_but_the_most_power_measured_architecture():
    """The power reference is the architecture with the most power rows, even when another has more GPU
    types: a GPU of an architecture without power then takes measured power physics, not the bare priors."""
    rows = synthetic_arch_rows(OracleParams(BARE))
    rows = [m if m.gpu == "v100" else dataclasses.replace(m, avg_power_w=None) for m in rows]
    rows += [dataclasses.replace(m, gpu="a100-80gb", avg_power_w=None) for m in rows if m.gpu == "a100-40gb"]
    names = arch_free(rows)
    assert not any(
        n.startswith("volta.") and n.split(".")[1] in ("c_p", "u_comp", "e_simt_pj", "u_mem") for n in names
    )
    assert "volta.beta_gemm" in names  # time factors: Ampere (two GPU types) is the time reference
    assert not any(n.startswith("ampere.") for n in names)
    assert not any(n.split(".")[1] == "c_p" for n in names)


def test_leave_one_gpu_out_never_trains_on_the_held_out_gpu():
    rows = synthetic_arch_rows(OracleParams(BARE))
    rows = [dataclasses.replace(m, gpu="a100") if m.gpu == "a100-40gb" and m.batch == 1 else m for m in rows]
    splits = make_splits(rows, parse_cv("leave-one-gpu-out"))
    assert [s.name for s in splits] == ["a100-40gb", "h100-sxm", "v100"]  # aliases are one GPU type
    tested = np.concatenate([s.test for s in splits])
    assert sorted(tested.tolist()) == list(range(len(rows)))
    for s in splits:
        assert s.name not in {load_catalogue().resolve(rows[i].gpu) for i in s.train}
    with pytest.raises(ModelError, match="2 GPU types"):
        make_splits([m for m in rows if m.gpu == "v100"], parse_cv("logo"))


def test_cli_leave_one_gpu_out_reports_per_gpu(capsys, tmp_path):
    """`easlurm model evaluate --cv leave-one-gpu-out` refits without each GPU type and scores it apart."""
    import json

    from easlurm.cli import main
    from easlurm.model.fit.dataset import write_measurements

    rows = synthetic_arch_rows(OracleParams(BARE, TRUE_FACTORS))
    path = tmp_path / "rows.csv"
    write_measurements(rows, path)
    argv = ["model", "evaluate", str(path), "--cv", "leave-one-gpu-out", "--baseline", "none"]
    assert main([*argv, "--maxiter", "3", "--popsize", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cv"] == "leave-one-gpu-out"
    per_gpu = doc["methods"]["oracle"]["per_gpu"]
    assert [g["gpu"] for g in per_gpu] == ["a100-40gb", "h100-sxm", "v100"]
    assert all(g["rows"] == 12 and g["mape_time_pct"] is not None for g in per_gpu)
    splits = {r["gpu"]: r["split"] for r in doc["methods"]["oracle"]["rows"]}
    assert splits == {"a100-40gb": "a100-40gb", "h100-sxm": "h100-sxm", "v100": "v100"}


def _sweep_rows(params, gpu="a100-40gb", limits=(150.0, 200.0, 250.0, 300.0, 350.0, 400.0)):
    rows = [
        Measurement(model, b, "fp16", 1, gpu, 1.0, None, limit, **size)
        for model, size in (("bert-base", {"seq_len": 128}), ("resnet50", {"image_size": 224}))
        for b in (16, 128)
        for limit in limits
    ]
    pred = Oracle(params).predict_rows([m.workload() for m in rows], placements_of(rows))
    return [
        dataclasses.replace(m, step_time_s=float(t), avg_power_w=float(p))
        for m, t, p in zip(rows, pred.step_time_s, pred.power_w)
    ]


def test_power_limit_choice_costs_nothing_with_the_true_response_and_more_with_a_wrong_one():
    """On a sweep made by an oracle, that oracle picks the measured best limit (0 % excess); an oracle that
    believes low limits are nearly free (high floor, steep clock response) picks a lower limit that costs
    measured energy, and the summary says how much."""
    from easlurm.model.fit.evaluate import evaluate_method, fixed_oracle
    from easlurm.model.fit.limits import limit_choices, summarise_limits

    truth = OracleParams({**BARE, "p_floor_frac": 0.1, "cap_alpha": 1.5, "mem_clock_knee": 0.9})
    rows = _sweep_rows(truth)
    splits = make_splits(rows, parse_cv("none"))
    right = limit_choices(evaluate_method(rows, splits, fixed_oracle(truth), "oracle", ""))
    assert len(right) == 4 and all(c.limits_w == (150, 200, 250, 300, 350, 400) for c in right)
    assert all(c.excess_pct == pytest.approx(0.0, abs=1e-9) and c.chosen_w == c.best_w for c in right)
    assert all(c.ratio_err_pct == pytest.approx(0.0, abs=1e-6) for c in right)
    wrong = OracleParams({**BARE, "p_floor_frac": 0.6, "cap_alpha": 4.0, "mem_clock_knee": 0.1})
    bad = limit_choices(evaluate_method(rows, splits, fixed_oracle(wrong), "oracle", ""))
    assert any(c.excess_pct > 1.0 for c in bad)
    for c in bad:
        i = c.limits_w.index(c.chosen_w)
        assert c.excess_pct == pytest.approx((c.measured_j[i] / min(c.measured_j) - 1) * 100)
    (gpu, every) = summarise_limits(bad)
    assert gpu.gpu == "a100-40gb" and every.gpu == "all" and every.groups == 4
    assert every.mean_excess_pct == pytest.approx(np.mean([c.excess_pct for c in bad]))


def test_cli_power_limits_scores_the_sweeps(capsys, tmp_path):
    import json

    from easlurm.cli import main
    from easlurm.model.fit.dataset import write_measurements

    rows = _sweep_rows(load_params())
    path = tmp_path / "sweep.csv"
    write_measurements(rows, path)
    argv = ["model", "evaluate", str(path), "--baseline", "none", "--power-limits"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    summary = doc["power_limits"]["summary"]
    assert summary[-1]["gpu"] == "all" and summary[-1]["groups"] == 4
    assert summary[-1]["mean_excess_pct"] == pytest.approx(0.0, abs=1e-9)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "MeanExcess" in out and "0.00%" in out
    unlimited = {repr(u): u for u in (dataclasses.replace(m, power_limit_w=None) for m in rows)}
    write_measurements(list(unlimited.values()), path)  # rows differing only by their limit are one now
    assert main(argv) == 2
    assert "--power-limits" in capsys.readouterr().err


def test_calibrate_reads_several_files_and_can_skip_rows_out_of_memory(capsys, tmp_path):
    """Rows of all files are one set; a row the model finds out of memory is an error, or left out (and said)
    with --skip-infeasible; the written parameters name the architectures they were fitted on."""
    from easlurm.cli import main
    from easlurm.model.fit.calibrate import feasible_rows
    from easlurm.model.fit.dataset import write_measurements

    rows = synthetic_arch_rows(OracleParams(BARE, TRUE_FACTORS))
    huge = Measurement("llama3-8b", 64, "fp32", 1, "v100", 1.0, seq_len=2048)
    ok, dropped = feasible_rows([*rows[:3], huge], OracleParams())
    assert ok == rows[:3] and dropped == [huge]
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_measurements([r for r in rows if r.gpu != "v100"], a)
    write_measurements([*(r for r in rows if r.gpu == "v100"), huge], b)
    out = tmp_path / "p.yaml"
    argv = [
        "model",
        "calibrate",
        str(a),
        str(b),
        "--maxiter",
        "2",
        "--popsize",
        "2",
        "--folds",
        "0",
        "-O",
        str(out),
    ]
    assert main(argv) != 0
    assert "infeasible" in capsys.readouterr().err
    assert main([*argv, "--skip-infeasible", "--free", "volta.c_mem"]) == 0
    assert "left out 1 rows" in capsys.readouterr().err
    params = load_params(out)
    assert {"hopper", "ampere", "volta"} <= set(params.architectures) and "volta.c_mem" in params.scalars


def test_predict_says_which_gpus_take_the_shared_physics(capsys, tmp_path):
    import json

    from easlurm.cli import main
    from easlurm.model.params import save_params

    path = tmp_path / "p.yaml"
    save_params(dataclasses.replace(load_params(), architectures=("hopper",)), path)
    argv = ["predict", "--model", "resnet50", "--gpu", "h100,v100", "--batch", "64", "--params", str(path)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "v100 (volta)" in err and "shared physics" in err and "h100" not in err
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["shared_physics"] for p in doc["placements"]] == [False, True]


def test_staged_calibration_recovers_shared_and_architecture_parameters_together():
    """Shared parameters and per-architecture factors free at once (the staged fit: shared, then each
    architecture on its rows, then a joint polish) recover both."""
    truth = OracleParams({**BARE, "c_mem": 1.8, "beta_gemm": 0.5}, TRUE_FACTORS)
    rows = synthetic_arch_rows(truth)
    free = ["c_mem", "beta_gemm", *TRUE_FACTORS]
    res = calibrate(rows, OracleParams(BARE), free, maxiter=40, popsize=10, seed=2)
    for name in free:
        assert res.params.vector([name])[0] == pytest.approx(truth.vector([name])[0], rel=0.05), name
    assert res.fit.loss < 1.0


def test_depthwise_convolutions_add_their_time_at_their_own_efficiency():
    """Closed form: halving `beta_dw` adds micro x dw FLOPs / (FP32 peak x beta_dw) to a step bound by the
    GPU; calibration frees `beta_dw` only for rows that hold depthwise work."""
    from easlurm.model.oracle import Oracle, Placements
    from easlurm.model.zoo import get_workload

    w = get_workload("shufflenet-v2-cifar", precision="fp32", image_size=32)
    assert w.flops_dw > 0.01 * w.flops_total and get_workload("resnet50").flops_dw == 0
    spec = load_catalogue().get("rtx6000")
    beta = 0.01
    steps = [
        Oracle(OracleParams({"beta_dw": b})).predict_rows([w], Placements.of([1], [512], ["rtx6000"], [NAN]))
        for b in (beta, beta / 2)
    ]
    added = 512 * w.flops_dw / (spec.fp32_tflops * 1e12 * beta)
    assert all(float(s.power_w[0]) < spec.tdp_w for s in steps)  # below the TDP: no clock lost to the limit
    assert float(steps[1].step_time_s[0] - steps[0].step_time_s[0]) == pytest.approx(added, rel=1e-9)
    row = dict(batch=512, precision="fp32", n_gpus=1, gpu="rtx6000", step_time_s=0.2)
    assert "beta_dw" in default_free([Measurement(model="shufflenet-v2-cifar", image_size=32, **row)])
    assert "beta_dw" not in default_free([Measurement(model="resnet50", **row)])
