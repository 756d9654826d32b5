"""`easlurm predict` and `easlurm model calibrate|list` end to end (no GPU, no Slurm)."""

import dataclasses
import json

import pytest

from easlurm.cli import main
from easlurm.model.fit.dataset import Measurement, placements_of, write_measurements
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams
from easlurm.model.workload import Precision


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_predict_table_marks_the_best_edp(capsys):
    rc, out, _ = run(
        capsys,
        "predict",
        "--model",
        "vit-b16",
        "--batch",
        "256",
        "--gpus",
        "1,2,4,8",
        "--gpu",
        "a100-40gb,h100-sxm",
        "--power-limit",
        "300,400,700",
    )
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["GPUType", "GPUs", "Nodes", "Batch"]
    body = lines[2:]
    assert len(body) == 4 * 2 + 4 * 3  # 700 W only applies to the H100
    assert sum(line.rstrip().endswith("*") for line in body) == 1


def test_predict_json_has_schema_and_one_best(capsys):
    rc, out, _ = run(capsys, "predict", "--model", "bert-base", "--gpus", "1,4", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    assert [p["n_gpus"] for p in doc["placements"]] == [1, 4]
    assert sum(p["best_edp"] for p in doc["placements"]) == 1
    p = doc["placements"][0]
    assert p["energy_per_step_j"] == pytest.approx(p["power_w"] * p["step_time_s"])


def test_predict_over_node_counts_leaves_out_what_cannot_hold_the_gpus(capsys):
    rc, out, err = run(
        capsys,
        "predict",
        "--model",
        "bert-large",
        "--gpus",
        "8,16",
        "--nodes",
        "1,2,16",
        "-P",
        "-n",
        "-o",
        "GPUs,Nodes,StepTime",
        "--gpu",
        "a100-40gb",
    )
    assert rc == 0
    rows = [line.split("|") for line in out.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("8", "1"), ("8", "2"), ("16", "2"), ("16", "16")]
    times = [float(r[2].rstrip("s")) for r in rows]
    assert times[1] > times[0] and times[3] > times[2]  # spreading costs
    assert "--nodes 16 cannot hold 8 a100-40gb GPUs" in err
    assert "--nodes 1 cannot hold 16 a100-40gb GPUs (1 to 8 per node)" in err
    rc, _, err = run(capsys, "predict", "--model", "bert-large", "--gpus", "16", "--nodes", "1")
    assert rc == 2 and err.count("\n") >= 1 and "no node count can hold" in err


def test_predict_parsable(capsys):
    rc, out, _ = run(capsys, "predict", "--model", "resnet50", "-P", "-o", "GPUs,StepTime")
    assert rc == 0
    assert out.splitlines()[0] == "GPUs|StepTime"


def test_unknown_model_is_one_line_and_exit_2(capsys):
    rc, _, err = run(capsys, "predict", "--model", "resnet51")
    assert rc == 2
    assert err.startswith("easlurm: error: unknown model 'resnet51'")


def test_predict_from_yaml_workload(capsys, tmp_path):
    from easlurm.model.yaml_workload import EXAMPLE

    f = tmp_path / "net.yaml"
    f.write_text(EXAMPLE)
    rc, out, _ = run(capsys, "predict", "--workload", str(f), "--json")
    assert rc == 0
    assert json.loads(out)["model"] == "my-encoder"


def test_calibrate_writes_versioned_params(capsys, tmp_path):
    csv = synthetic_csv(tmp_path)
    out_file = tmp_path / "params.yaml"
    rc, out, _ = run(
        capsys,
        "model",
        "calibrate",
        str(csv),
        "-O",
        str(out_file),
        "--free",
        "beta_gemm,c_mem",
        "--maxiter",
        "15",
        "--folds",
        "2",
        "--version",
        "t-1",
    )
    assert rc == 0, out
    assert "fold 2" in out
    from easlurm.model.params import load_params

    p = load_params(out_file)
    assert p.version == "t-1" and p.meta["rows"] > 0
    rc, out, _ = run(capsys, "predict", "--model", "bert-base", "--params", str(out_file), "--json")
    assert json.loads(out)["params_version"] == "t-1"


def test_model_list(capsys):
    rc, out, _ = run(capsys, "model", "list")
    assert rc == 0
    assert "llama3-8b" in out and "h200" in out


def synthetic_csv(tmp_path):
    truth = OracleParams({"beta_gemm": 0.5, "c_mem": 1.5})
    rows = [
        Measurement(m, b * n, p, n, "a100-40gb", 1.0, seq_len=128)
        for m in ("bert-base", "distilbert")
        for p in ("bf16", "fp32")
        for n in (1, 2)
        for b in (16, 64)
    ]
    pred = Oracle(truth).predict_rows([r.workload() for r in rows], placements_of(rows))
    rows = [
        dataclasses.replace(r, step_time_s=float(t), avg_power_w=float(w))
        for r, t, w in zip(rows, pred.step_time_s, pred.power_w)
    ]
    path = tmp_path / "m.csv"
    write_measurements(rows, path, "synthetic")
    return path


def test_predict_notes_a_precision_the_gpu_lacks(capsys):
    """bf16 asked on a V100 or T4 runs (and is predicted) in FP32: predict says so on stderr, once per
    precision it falls back to, and says nothing for GPUs that have it."""
    bf16, fp32 = Precision.BF16.value, Precision.FP32.value
    argv = ("predict", "--model", "resnet50", "--batch", "64", "--precision", "bf16")
    rc, out, err = run(capsys, *argv, "--gpu", "v100,t4,h100-sxm", "--json")
    assert rc == 0
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == [f"note: v100, t4: no tensor cores for {bf16}; predicted as it runs there, in {fp32}"]
    doc = json.loads(out)
    assert doc["precision"] == bf16
    assert [(p["gpu"], p["precision"]) for p in doc["placements"]] == [
        ("v100", fp32),
        ("t4", fp32),
        ("h100-sxm", bf16),
    ]
    rc, _, err = run(capsys, *argv, "--gpu", "h100-sxm,a100-40gb")
    assert rc == 0 and "note:" not in err


def test_predict_without_a_precision_runs_each_gpu_at_its_own_default(capsys):
    """No --precision: BF16 where tensor cores run it, FP16 on Volta/Turing tensor cores and the P100's packed
    rate, FP32 on a GeForce Pascal (FP16 no faster); each GPU not on BF16 is named in a note, and its row is the
    one --precision would give for that GPU alone."""
    base = ("predict", "--model", "resnet50", "--batch", "64")
    rc, out, err = run(capsys, *base, "--gpu", "h100-sxm,v100,t4,p100,gtx1080ti", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["precision"] is None
    runs = {p["gpu"]: p["precision"] for p in doc["placements"]}
    bf16, fp16, fp32 = Precision.BF16.value, Precision.FP16.value, Precision.FP32.value
    assert runs == {"h100-sxm": bf16, "v100": fp16, "t4": fp16, "p100": fp16, "gtx1080ti": fp32}
    assert [line for line in err.splitlines() if line.startswith("note:")] == [
        f"note: v100, t4, p100: no precision given; predicted at the GPU's default, in {fp16}",
        f"note: gtx1080ti: no precision given; predicted at the GPU's default, in {fp32}",
    ]
    for gpu, precision in (("v100", "fp16"), ("h100-sxm", "bf16"), ("gtx1080ti", "fp32")):
        rc, alone, _ = run(capsys, *base, "--gpu", gpu, "--precision", precision, "--json")
        (row,) = json.loads(alone)["placements"]
        mixed = next(p for p in doc["placements"] if p["gpu"] == gpu)
        assert mixed["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9), gpu
        assert mixed["power_w"] == pytest.approx(row["power_w"], rel=1e-9), gpu
    rc, _, err = run(capsys, *base, "--gpu", "h100-sxm,a100-40gb")
    assert rc == 0 and "note:" not in err
