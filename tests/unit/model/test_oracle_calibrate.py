"""Calibration: recovers known parameters from synthetic data; CSV parsing names bad lines; CV holds out."""

import dataclasses

import pytest

from easlurm.errors import ModelError, TraceError
from easlurm.model.fit.calibrate import calibrate, cross_validate, default_free, score
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements, write_measurements
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams, load_params, save_params

TRUE = OracleParams(
    {"beta_gemm": 0.55, "c_mem": 1.6, "t_fixed_s": 0.02, "c_p": 0.85, "u_mem": 0.4},
    {"albert.mem": 2.5},
)


def synthetic_rows(params=TRUE):
    """Configurations measured by an oracle with known parameters (the ground truth)."""
    rows = []
    configs = [
        ("bert-base", {"seq_len": 128}),
        ("albert-base", {"seq_len": 256}),
        ("resnet50", {"image_size": 224}),
    ]
    for model, size in configs:
        for prec in ("bf16", "fp32"):
            for n in (1, 4):
                for b in (32, 128):
                    for limit in (None, 250.0):
                        rows.append(Measurement(model, b * n, prec, n, "a100-40gb", 1.0, None, limit, **size))
    pred = Oracle(params).predict_rows([m.workload() for m in rows], placements_of(rows))
    return [
        dataclasses.replace(m, step_time_s=float(t), avg_power_w=float(p))
        for m, t, p in zip(rows, pred.step_time_s, pred.power_w)
    ]


def test_calibration_recovers_known_parameters():
    rows = synthetic_rows()
    free = ["beta_gemm", "c_mem", "t_fixed_s", "c_p", "u_mem", "albert.mem"]
    # c_p and u_mem are told apart by the BF16 rows alone (FP32 work costs energy per FLOP): more generations
    res = calibrate(rows, free=free, maxiter=150, seed=0)
    for name in free:
        assert res.params.vector([name])[0] == pytest.approx(TRUE.vector([name])[0], rel=0.02), name
    assert res.fit.loss < 0.1
    assert score(OracleParams(), rows).loss > 10 * res.fit.loss  # the defaults were really off


def test_default_free_set_follows_the_data():
    rows = synthetic_rows()
    free = default_free(rows)
    assert "c_p" in free and "cap_alpha" in free and "albert.mem" in free
    time_only = [dataclasses.replace(m, avg_power_w=None, power_limit_w=None) for m in rows]
    assert "c_p" not in default_free(time_only)


def test_cross_validation_reports_held_out_error():
    rows = synthetic_rows()
    folds = cross_validate(rows, k=3, free=["beta_gemm", "c_mem", "t_fixed_s"], maxiter=20)
    assert len(folds) == 3
    assert sum(f.n_rows for f in folds) == len(rows)
    assert all(f.mape_time >= 0 for f in folds)


def test_params_round_trip_through_yaml(tmp_path):
    path = tmp_path / "p.yaml"
    save_params(dataclasses.replace(TRUE, version="test-1"), path)
    back = load_params(path)
    assert back.version == "test-1"
    assert back["beta_gemm"] == pytest.approx(0.55)
    assert back.scalars["albert.mem"] == pytest.approx(2.5)
    assert Oracle(back).predict(rows_workload(), placements_of(synthetic_rows()[:1])).step_time_s[0] > 0


def rows_workload():
    return synthetic_rows()[0].workload()


def test_shipped_default_params_load():
    p = load_params()
    assert p.version and set(p.values) >= {"beta_gemm", "c_p"}


def test_csv_round_trip_and_errors(tmp_path):
    rows = synthetic_rows()[:3]
    path = tmp_path / "m.csv"
    write_measurements(rows, path, "synthetic")
    back = read_measurements(path)
    assert back[0].step_time_s == pytest.approx(rows[0].step_time_s)
    assert back[0].seq_len == 128
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "model,batch,precision,n_gpus,gpu,step_time_s\nresnet50,64,bf16,1,a100,0.1\nresnet50,64,bf16,1,a100,fast\n"
    )
    with pytest.raises(TraceError, match=r"bad.csv:3: step_time_s"):
        read_measurements(bad)
    bad.write_text("model,batch,precision,n_gpus,gpu,step_time_s\nnot-a-model,64,bf16,1,a100,0.1\n")
    with pytest.raises(TraceError, match=r"bad.csv:2: unknown model"):
        read_measurements(bad)


def test_unknown_parameter_is_an_error():
    with pytest.raises(ModelError, match="unknown parameter"):
        calibrate(synthetic_rows()[:2], free=["warp_speed"])
