"""`easlurm model measure` on CPU torch: the CSV calibration reads, the timing method, bad input."""

import csv
import importlib.util

import pytest

from easlurm.cli import main
from easlurm.model.fit.dataset import Measurement, read_measurements, write_measurements

torch = pytest.importorskip(
    "torch", reason="easlurm model measure needs torch (pip install 'easlurm[torch]')"
)

from easlurm.measure.steps import MeasureConfig, Timing, configurations, measure_one  # noqa: E402

TORCHVISION_SHUFFLENET_V2_X0_5_PARAMS = 1_366_792  # torchvision's documented num_params


@pytest.fixture(autouse=True)
def _one_thread():
    """The test machine is shared: one torch thread keeps a step at tens of ms."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_measure_writes_a_csv_that_calibration_reads(capsys, tmp_path):
    out = tmp_path / "m.csv"
    rc, stdout, err = run(
        capsys,
        "model",
        "measure",
        "--model",
        "shufflenet",
        "--batch",
        "2",
        "--precision",
        "fp32,bf16",
        "--image-size",
        "32",
        "--sweeps",
        "2",
        "--warmup",
        "0s",
        "--window",
        "0.05s",
        "--cpu-threads",
        "1",
        "-O",
        str(out),
    )
    assert rc == 0, err
    assert "wrote" in stdout
    rows = read_measurements(out)
    assert [(m.model, m.batch, m.precision, m.image_size) for m in rows] == [
        ("shufflenet-small", 2, "fp32", 32),
        ("shufflenet-small", 2, "bf16", 32),
    ]
    assert all(m.gpu == "cpu" and m.n_gpus == 1 and m.optimizer == "adamw" for m in rows)
    assert all(m.avg_power_w is None and m.peak_mem_gib is None for m in rows)  # no CUDA, no NVML
    with out.open() as fh:
        recs = list(csv.DictReader(fh))
    for m, rec in zip(rows, recs):
        runs = [float(v) for v in rec["step_time_s_runs"].split(";")]
        assert len(runs) == 2 and min(runs) > 0
        assert m.step_time_s == pytest.approx(sum(runs) / 2, abs=1.5e-6)  # both rounded to 1 us
        assert int(rec["n_params"]) == TORCHVISION_SHUFFLENET_V2_X0_5_PARAMS
        assert rec["avg_power_w_runs"] == ""


def test_power_is_the_energy_counter_over_the_timed_window():
    """A counter rising at 250 J/s gives 250 W whatever the step time; the window lasts >= window_s."""
    import time

    run_ = measure_one(
        MeasureConfig("shufflenet-small", 2, "fp32", "sgd", image_size=32),
        "cpu",
        Timing(warmup_s=0.0, window_s=0.1),
        energy_j=lambda: 250.0 * time.perf_counter(),
    )
    assert run_.avg_power_w == pytest.approx(250.0, rel=0.02)
    assert run_.steps * run_.step_time_s >= 0.1
    assert run_.n_params == TORCHVISION_SHUFFLENET_V2_X0_5_PARAMS


def test_configurations_use_the_zoo_default_size_and_validate():
    cfgs = configurations(["ShuffleNet", "bert-base"], [8, 16], ["bf16"])
    assert [(c.model, c.batch, c.image_size, c.seq_len) for c in cfgs] == [
        ("shufflenet-small", 8, 224, None),
        ("shufflenet-small", 16, 224, None),
        ("bert-base", 8, None, 128),
        ("bert-base", 16, None, 128),
    ]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--model", "nosuch"], "unknown model"),
        (["--model", "llama3-8b"], "no torch implementation"),
        (["--model", "shufflenet", "--precision", "fp8"], "--precision"),
        (["--model", "shufflenet", "--optimizer", "lion"], "--optimizer"),
        (["--model", "shufflenet", "--batch", "0"], "--batch"),
        (["--model", "shufflenet", "--sweeps", "0"], "--sweeps"),
        (["--model", "shufflenet", "--window", "soon"], "--window"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, needle):
    rc, _, err = run(capsys, "model", "measure", *argv, "-O", str(tmp_path / "x.csv"))
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed")
def test_missing_library_names_it(capsys, tmp_path):
    rc, _, err = run(capsys, "model", "measure", "--model", "resnet50", "-O", str(tmp_path / "x.csv"))
    assert rc == 2
    assert "torchvision" in err and "easlurm[torch]" in err


def test_extra_columns_round_trip_and_are_ignored_by_the_reader(tmp_path):
    path = tmp_path / "m.csv"
    m = Measurement("resnet50", 64, "bf16", 1, "h100-sxm", 0.03, avg_power_w=500.0)
    write_measurements([m], path, extra=[{"n_params": 25557032, "step_time_s_runs": "0.029;0.031"}])
    header = path.read_text().splitlines()[0].split(",")
    assert header[-2:] == ["n_params", "step_time_s_runs"]
    assert read_measurements(path) == [m]


def test_slurm_array_script_runs_one_configuration_per_task(tmp_path):
    import subprocess

    from easlurm.measure.slurm_array import array_script

    cfgs = configurations(["shufflenet"], [2, 4], ["fp32"], image_size=32)
    text = array_script(
        cfgs,
        tmp_path,
        sweeps=1,
        timing=Timing(0.0, 0.05),
        gpu="h100-sxm",
        partition="h100",
        time_limit="5:00",
    )
    assert "#SBATCH --array=0-1\n" in text and "#SBATCH --energy-profile=gpu\n" in text
    assert "#SBATCH --partition=h100\n" in text and "#SBATCH --gres=gpu:1\n" in text
    # The case table gives task 1 its own batch: run the script's dispatch with a stub interpreter.
    stub = text.replace(text.split("\n")[-2].split(" ")[0], "echo", 1)
    res = subprocess.run(
        ["bash", "-c", stub], env={"SLURM_ARRAY_TASK_ID": "1"}, capture_output=True, text=True, check=True
    )
    assert "--batch 4" in res.stdout and "--image-size 32" in res.stdout
    assert f"-O {tmp_path}/task-1.csv" in res.stdout and "--gpu h100-sxm" in res.stdout


def test_task_power_is_the_batch_steps_gpu_energy_over_its_duration():
    from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment
    from easlurm.measure.slurm_array import task_gpu_power_w

    def rec(step, gpu_j):
        devices = [DeviceRecord("gpu0", "gpu", gpu_j), DeviceRecord("pkg", "cpu", 900.0)]
        return StepRecord(7, step, 1, [NodeRecord(0, "h100-1", 0.0, 20.0, devices)], spec="gpu")

    assert task_gpu_power_w(encode_admin_comment([rec("extern", 1.0), rec("batch", 5000.0)])) == 250.0
    assert task_gpu_power_w(encode_admin_comment([rec("batch", None)])) is None
    assert task_gpu_power_w("") is None


def test_a_configuration_torch_rejects_is_left_out_with_a_warning(capsys, tmp_path, caplog):
    """Batch 1 at 32x32 ends in a 1x1 map BatchNorm cannot train on: that row is reported and left out."""
    out = tmp_path / "m.csv"
    argv = [
        "model",
        "measure",
        "--model",
        "shufflenet",
        "--batch",
        "1,2",
        "--image-size",
        "32",
        "--sweeps",
        "1",
    ]
    rc, _, err = run(
        capsys, *argv, "--warmup", "0s", "--window", "0.02s", "--precision", "fp32", "-O", str(out)
    )
    assert rc == 0, err
    assert [m.batch for m in read_measurements(out)] == [2]
    assert any("left out: shufflenet-small batch 1 fp32" in r.getMessage() for r in caplog.records)
    rc, _, err = run(capsys, *argv[:5], "1", *argv[6:], "--window", "0.02s", "-O", str(tmp_path / "y.csv"))
    assert rc == 2 and "no configuration could be measured" in err
