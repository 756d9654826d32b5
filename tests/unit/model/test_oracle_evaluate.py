"""`easlurm model evaluate`: CV splits never train on what they test; the oracle scores ~0 on its own data."""

import dataclasses
import json

import numpy as np
import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError, ModelError
from easlurm.model.fit.baseline import FEATURES, baseline_fitter, features, resolve_kind, sklearn_available
from easlurm.model.fit.dataset import Measurement, placements_of, write_measurements
from easlurm.model.fit.evaluate import (
    CvScheme,
    calibrating_oracle,
    evaluate_method,
    fixed_oracle,
    make_splits,
    parse_cv,
)
from easlurm.model.oracle import Oracle
from easlurm.model.params import load_params

CONFIGS = [
    ("bert-base", {"seq_len": 128}, (16, 64)),
    ("gpt2", {"seq_len": 256}, (4, 8)),
    ("resnet50", {"image_size": 224}, (32, 128)),
    ("vit-b16", {"image_size": 224}, (32, 64)),
]


def synthetic_rows(params=None):
    """Rows 'measured' by the oracle itself with the shipped parameters (whatever they are today)."""
    rows = [
        Measurement(model, b, prec, 1, "h100-sxm", 1.0, **size)
        for model, size, batches in CONFIGS
        for prec in ("bf16", "tf32")
        for b in batches
    ]
    pred = Oracle(params or load_params()).predict_rows([m.workload() for m in rows], placements_of(rows))
    return [
        dataclasses.replace(m, step_time_s=float(t), avg_power_w=float(p))
        for m, t, p in zip(rows, pred.step_time_s, pred.power_w)
    ]


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    "text,expected",
    [
        ("none", CvScheme("none")),
        ("leave-one-model-out", CvScheme("lomo")),
        ("LOMO", CvScheme("lomo")),
        ("kfold:4", CvScheme("kfold", 4)),
    ],
)
def test_parse_cv(text, expected):
    assert parse_cv(text) == expected


@pytest.mark.parametrize("text", ["bogus", "kfold:1", "kfold:x", "kfold:"])
def test_parse_cv_rejects_names_the_option(text):
    with pytest.raises(ConfigError, match="--cv"):
        parse_cv(text)


def test_leave_one_model_out_never_trains_on_the_held_out_model():
    rows = synthetic_rows()
    splits = make_splits(rows, parse_cv("leave-one-model-out"))
    assert [s.name for s in splits] == sorted({m.model for m in rows})
    tested = np.concatenate([s.test for s in splits])
    assert sorted(tested.tolist()) == list(range(len(rows)))  # every row tested exactly once
    for s in splits:
        assert {rows[i].model for i in s.test} == {s.name}
        assert s.name not in {rows[i].model for i in s.train}
        assert len(s.train) + len(s.test) == len(rows)


def test_kfold_partitions_rows_and_is_seeded():
    rows = synthetic_rows()
    splits = make_splits(rows, parse_cv("kfold:3"), seed=7)
    tested = np.concatenate([s.test for s in splits])
    assert sorted(tested.tolist()) == list(range(len(rows)))
    for s in splits:
        assert not set(s.train.tolist()) & set(s.test.tolist())
    again = make_splits(rows, parse_cv("kfold:3"), seed=7)
    assert all(np.array_equal(a.test, b.test) for a, b in zip(splits, again))
    other = make_splits(rows, parse_cv("kfold:3"), seed=8)
    assert not all(np.array_equal(a.test, b.test) for a, b in zip(splits, other))


def test_split_errors():
    rows = synthetic_rows()
    with pytest.raises(ModelError, match="2 models"):
        make_splits([r for r in rows if r.model == "gpt2"], parse_cv("lomo"))
    with pytest.raises(ModelError, match="K <= rows"):
        make_splits(rows[:3], parse_cv("kfold:5"))


def test_oracle_on_its_own_data_has_no_error():
    rows = synthetic_rows()
    rep = evaluate_method(rows, make_splits(rows, parse_cv("none")), fixed_oracle(load_params()), "o", "")
    assert rep.mape_time == pytest.approx(0.0, abs=1e-9)
    assert rep.mape_power == pytest.approx(0.0, abs=1e-9)
    assert [s.model for s in rep.per_model()] == sorted({m.model for m in rows})


def test_errors_are_signed_and_mape_is_their_mean_size():
    rows = synthetic_rows()
    slow = [dataclasses.replace(m, step_time_s=m.step_time_s * 2) for m in rows]  # measured 2x the prediction
    rep = evaluate_method(slow, make_splits(slow, parse_cv("none")), fixed_oracle(load_params()), "o", "")
    assert all(r.time_err_pct == pytest.approx(-50.0) for r in rep.rows)
    assert rep.mape_time == pytest.approx(50.0)
    no_power = [dataclasses.replace(m, avg_power_w=None) for m in rows]
    rep = evaluate_method(no_power, make_splits(rows, parse_cv("none")), fixed_oracle(load_params()), "o", "")
    assert rep.mape_power is None and rep.rows[0].power_err_pct is None


def test_each_row_is_predicted_by_the_split_that_held_it_out():
    rows = synthetic_rows()
    seen: list[tuple[set[str], set[str]]] = []

    def spy(train, number):
        trained = {m.model for m in train}

        def predict(test):
            seen.append((trained, {m.model for m in test}))
            return np.ones(len(test)), np.ones(len(test))

        return predict

    rep = evaluate_method(rows, make_splits(rows, parse_cv("lomo")), spy, "spy", "", "lomo")
    assert len(seen) == 4
    assert all(not (trained & tested) for trained, tested in seen)
    assert [r.split for r in rep.rows] == [r.model for r in rep.rows]


def test_calibrating_oracle_refits_per_split_and_reports_progress():
    rows = synthetic_rows()
    gens: list[int] = []
    fit = calibrating_oracle(load_params(), maxiter=3, popsize=4, seed=0, progress=gens.append)
    rep = evaluate_method(rows, make_splits(rows, parse_cv("lomo")), fit, "oracle", "", "lomo")
    assert len(rep.rows) == len(rows)
    assert rep.mape_time is not None and rep.mape_time >= 0
    assert gens and max(gens) <= 3


def test_splits_fitted_in_parallel_give_the_same_report_as_one_at_a_time():
    """--jobs forks one process per split: each split's fit is seeded by its number, so the rows are the
    same, and the progress callback still hears of every split."""
    rows = synthetic_rows()
    splits = make_splits(rows, parse_cv("lomo"))
    fit = calibrating_oracle(load_params(), maxiter=2, popsize=3, seed=0)
    serial = evaluate_method(rows, splits, fit, "oracle", "", "lomo")
    done: list[int] = []
    forked = evaluate_method(rows, splits, fit, "oracle", "", "lomo", done.append, jobs=3)
    assert forked.rows == serial.rows
    assert sorted(done) == list(range(len(splits)))


def test_cli_jobs_option_gives_the_same_figures(tmp_path, capsys):
    rows = synthetic_rows()
    path = tmp_path / "rows.csv"
    write_measurements(rows, path)
    args = [
        "model",
        "evaluate",
        str(path),
        "--cv",
        "lomo",
        "--maxiter",
        "2",
        "--popsize",
        "3",
        "--json",
        "--baseline",
        "ridge",
    ]
    (rc1, one, _), (rc2, two, _) = run(capsys, *args), run(capsys, *args, "--jobs", "2")
    assert rc1 == rc2 == 0

    def figures(value):  # everything but wall-clock times
        if isinstance(value, dict):
            return {k: figures(v) for k, v in value.items() if "wall" not in k}
        return [figures(v) for v in value] if isinstance(value, list) else value

    assert figures(json.loads(one)) == figures(json.loads(two))
    assert json.loads(one)["rows"]
    rc, _, err = run(capsys, *args, "--jobs", "0")
    assert rc == 2 and "--jobs" in err


@pytest.mark.parametrize("kind", ["ridge", "rf"])
def test_baseline_shapes_and_held_out_rows(kind):
    if kind == "rf" and not sklearn_available():
        pytest.skip("scikit-learn not installed")
    rows = synthetic_rows()
    x = features(rows)
    assert x.shape == (len(rows), len(FEATURES)) and np.isfinite(x).all()
    t, p = baseline_fitter(kind)(rows, 0)(rows[:5])
    assert t.shape == p.shape == (5,)
    assert (t > 0).all() and np.isfinite(p).all()
    rep = evaluate_method(rows, make_splits(rows, parse_cv("none")), baseline_fitter(kind), kind, "")
    assert rep.mape_time is not None and rep.mape_time < 25.0  # in-sample fit is close


def test_baseline_lomo_never_sees_held_out_rows(monkeypatch):
    import easlurm.model.fit.baseline as baseline

    rows = synthetic_rows()
    trained_on: list[set[str]] = []
    real = baseline.features

    def spy(rs, cat=None):
        trained_on.append({m.model for m in rs})
        return real(rs, cat)

    monkeypatch.setattr(baseline, "features", spy)
    splits = make_splits(rows, parse_cv("lomo"))
    evaluate_method(rows, splits, baseline_fitter("ridge"), "ridge", "", "lomo")
    fits = trained_on[0::2]  # each split computes training features, then test features
    tests = trained_on[1::2]
    assert len(fits) == len(splits)
    assert all(s.name not in f and t == {s.name} for s, f, t in zip(splits, fits, tests))


def test_baseline_without_power_predicts_nan_power():
    rows = [dataclasses.replace(m, avg_power_w=None) for m in synthetic_rows()]
    t, p = baseline_fitter("ridge")(rows, 0)(rows)
    assert np.isfinite(t).all() and np.isnan(p).all()


def test_resolve_kind():
    assert resolve_kind("ridge") == "ridge"
    assert resolve_kind("auto") == ("rf" if sklearn_available() else "ridge")
    with pytest.raises(ConfigError, match="--baseline"):
        resolve_kind("xgboost")


def write_csv(tmp_path, rows=None):
    path = tmp_path / "m.csv"
    write_measurements(rows or synthetic_rows(), path, "synthetic")
    return path


def test_cli_table_and_summary(capsys, tmp_path):
    rc, out, _ = run(capsys, "model", "evaluate", str(write_csv(tmp_path)), "--baseline", "ridge")
    assert rc == 0
    assert "TimeErr" in out and "PredPower" in out and "BaseTimeErr" in out
    assert "oracle       all" in out or "oracle all" in " ".join(out.split())
    assert "0.00%" in out  # the oracle reproduces its own data
    assert "baseline-ridge" in out


def test_cli_parsable_and_json(capsys, tmp_path):
    path = str(write_csv(tmp_path))
    rc, out, _ = run(capsys, "model", "evaluate", path, "-P", "--baseline", "none", "-o", "model,timeerr")
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0] == "Model|TimeErr"
    assert all(" " not in line for line in lines if line and "|" in line)
    rc, out, _ = run(capsys, "model", "evaluate", path, "--json", "--baseline", "ridge")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["cv"] == "none"
    assert set(doc["methods"]) == {"oracle", "baseline-ridge"}
    assert doc["methods"]["oracle"]["mape_time_pct"] == pytest.approx(0.0, abs=1e-9)
    assert len(doc["methods"]["oracle"]["rows"]) == doc["rows"]


def test_cli_lomo_writes_reports(capsys, tmp_path):
    path = str(write_csv(tmp_path))
    out_dir = tmp_path / "report"
    rc, out, err = run(
        capsys,
        "model",
        "evaluate",
        path,
        "--cv",
        "leave-one-model-out",
        "--maxiter",
        "2",
        "--popsize",
        "3",
        "--baseline",
        "ridge",
        "--out",
        str(out_dir),
    )
    assert rc == 0, err
    doc = json.loads((out_dir / "evaluate.json").read_text())
    assert doc["cv"] == "leave-one-model-out"
    assert {r["split"] for r in doc["methods"]["oracle"]["rows"]} == {m for m, _, _ in CONFIGS}
    md = (out_dir / "evaluate.md").read_text()
    assert "# Oracle evaluation" in md and "| Method |" in md
    assert "Split" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["/nonexistent/m.csv"], "cannot read"),
        (["CSV", "--cv", "bogus"], "--cv: unknown scheme"),
        (["CSV", "--baseline", "xgboost"], "--baseline"),
        (["CSV", "--cv", "lomo", "--refit"], "--refit"),
        (["CSV", "-o", "nope"], "unknown column"),
        (["CSV", "--params", "/nonexistent/p.yaml"], "p.yaml"),
        (["CSV", "--cv", "kfold:1"], "K >= 2"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, tmp_path, args, message):
    path = str(write_csv(tmp_path))
    rc, _, err = run(capsys, "model", "evaluate", *[path if a == "CSV" else a for a in args])
    assert rc == 2
    assert err.startswith("easlurm: error:") and message in err
    assert len(err.strip().splitlines()) == 1


def test_cli_malformed_csv_names_the_line(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("model,batch,precision,n_gpus,gpu,step_time_s\nresnet50,x,bf16,1,h100-sxm,0.1\n")
    rc, _, err = run(capsys, "model", "evaluate", str(bad))
    assert rc == 2 and "bad.csv:2" in err and "batch" in err


def test_without_scikit_learn_auto_falls_back_to_ridge(monkeypatch):
    import easlurm.model.fit.baseline as baseline

    monkeypatch.setattr(baseline, "sklearn_available", lambda: False)
    assert baseline.resolve_kind("auto") == "ridge"
    with pytest.raises(ConfigError, match=r"easlurm\[baseline\]"):
        baseline.resolve_kind("rf")
