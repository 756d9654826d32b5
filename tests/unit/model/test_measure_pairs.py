"""`easlurm model measure --pairs` without torch: pair parsing, the barrier, keeping the GPU busy until both
windows end, NVML power over the overlap (fake NVML), failures left out, the CSV, one-line errors."""

from __future__ import annotations

import csv
import functools
import multiprocessing as mp
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError, ModelError
from easlurm.measure.corun import Gate, Window
from easlurm.measure.pairs import PAIR_COLUMNS, measure_pairs, parse_pairs, write_pairs
from easlurm.measure.steps import MeasureConfig, Timing, nvml_energy_reader
from easlurm.model.fit.pairs import read_pairs

FAKES = Path(__file__).resolve().parents[2] / "fakes"
FAKE_NVML = "easlurm_fakes.fake_nvml"
FORK = mp.get_context("fork")
TIMING = Timing(warmup_s=0.0, window_s=0.15, min_warmup_steps=0)


def test_pairs_parse_with_defaults_and_per_job_settings() -> None:
    pairs = parse_pairs("bert-base:32+resnet50:64, gpt2:4:fp32:infer+ViT_B/16:16:tf32", "bf16")
    (a, b), (c, d) = pairs
    assert (a.model, a.batch, a.precision, a.mode, a.seq_len) == ("bert-base", 32, "amp-bf16", "train", 128)
    assert (b.model, b.batch, b.image_size) == ("resnet50", 64, 224)
    assert (c.model, c.precision, c.mode) == ("gpt2", "fp32", "infer")
    assert (d.model, d.precision, d.mode) == ("vit-b16", "tf32", "train")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "got nothing"),
        ("bert-base:32", "two jobs joined by '+'"),
        ("bert-base:32+resnet50:64+gpt2:4", "two jobs joined by '+'"),
        ("bert-base:32+resnet50:64,", "empty item"),
        ("bert-base+resnet50:64", "MODEL:BATCH"),
        ("bert-base:x+resnet50:64", "batch must be an integer, got 'x'"),
        ("bert-base:0+resnet50:64", "batch must be >= 1"),
        ("bert-base:32:fp16+resnet50:64", "'fp16' in 'bert-base:32:fp16' is neither a precision"),
        ("nosuch:32+resnet50:64", "unknown model 'nosuch'"),
        ("llama3-8b:1+resnet50:64", "llama3-8b has no torch implementation"),
    ],
)
def test_bad_pairs_are_one_line_naming_the_option(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_pairs(text)
    assert str(err.value).startswith("--pairs") and says in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--pairs", "bert-base:x+resnet50:64"],
            "--pairs 'bert-base:x+resnet50:64': batch must be an integer",
        ),
        (["--pairs", "bert-base:32+resnet50:64", "--model", "gpt2"], "either --model or --pairs"),
        ([], "either --model or --pairs"),
        (["--pairs", "bert-base:32+resnet50:64", "--slurm"], "no --slurm mode"),
        (["--pairs", "bert-base:32+resnet50:64", "--batch", "8"], "--batch: not with --pairs"),
        (["--pairs", "bert-base:32+resnet50:64", "--precision", "fp32,bf16"], "one value with --pairs"),
    ],
)
def test_cli_refuses_bad_pairs_before_touching_torch(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    rc = main(["model", "measure", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err


# -- a time-sliced "GPU" for the orchestration: one step at a time, whoever holds the lock ---------------


def fake_runner(
    cfg: MeasureConfig, device: str, timing: Timing, gate: Gate, *, gpu: Any, events: Any, fail: str = ""
) -> None:
    """A job whose step holds the shared device for `batch` ms; records when it was ready, its window and
    when its last step ended."""
    if cfg.model == fail:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
    ready = time.monotonic()

    def step() -> None:
        with gpu:
            time.sleep(cfg.batch * 1e-3)
        time.sleep(2e-4)  # host work between steps: the other process gets the device

    t0 = gate.wait_start()
    steps = 0
    while steps == 0 or time.monotonic() - t0 < timing.window_s:
        step()
        steps += 1
    window = Window(t0, time.monotonic(), steps)
    gate.report(window)
    while not gate.stopped:
        step()
    events.put((cfg.model, ready, window, time.monotonic()))


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake NVML at 250 W for the power side (read in this process only)."""
    if str(FAKES) not in sys.path:
        monkeypatch.syspath_prepend(str(FAKES))
    from easlurm_fakes import fake_nvml

    for var in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EASLURM_FAKE_NVML_POWER_W", "250")
    fake_nvml._state, fake_nvml._init_count = None, 0
    read, close = nvml_energy_reader(0, FAKE_NVML)
    assert read is not None
    yield read
    close()
    fake_nvml._state, fake_nvml._init_count = None, 0


def _drain(q: Any) -> list[Any]:
    out = []
    while True:
        try:
            out.append(q.get(timeout=1.0))
        except Exception:
            return out


def test_pairs_start_together_and_share_the_device_until_both_are_timed(
    fake_gpu: Any, tmp_path: Path
) -> None:
    """Each job alone, then both: the shared windows start at the barrier, after both jobs were ready;
    the job that finishes first keeps the device busy until the other's window ended; the GPU power is
    the fake's 250 W from the energy counter over the overlap; the CSV holds one row per job."""
    events = FORK.Queue()
    runner = functools.partial(fake_runner, gpu=FORK.Lock(), events=events)
    pairs = parse_pairs("bert-base:3+resnet50:5")
    rows = measure_pairs(pairs, "cpu", runner=runner, timing=TIMING, energy_j=fake_gpu, context="fork")
    got = _drain(events)
    assert len(got) == 4  # two alone, two shared
    shared = {model: (ready, window, last) for model, ready, window, last in got[2:]}
    assert set(shared) == {"bert-base", "resnet50"}
    (ra, wa, _), (rb, wb, _) = shared["bert-base"], shared["resnet50"]
    assert min(wa.start_s, wb.start_s) >= max(ra, rb)  # nobody started before both were ready
    early, late = sorted(shared, key=lambda m: shared[m][1].end_s)
    assert shared[early][2] >= shared[late][1].end_s  # the early finisher kept stepping to the late end

    assert [(r.pair, r.job, r.config.model, r.partner.model) for r in rows] == [
        (1, "a", "bert-base", "resnet50"),
        (1, "b", "resnet50", "bert-base"),
    ]
    for r in rows:
        assert r.alone.gpu_power_w == pytest.approx(250.0, rel=5e-3)
        assert r.shared.gpu_power_w == pytest.approx(250.0, rel=5e-3)
        assert r.slowdown == pytest.approx(r.step_time_shared_s / r.step_time_alone_s)
        assert r.shared.overlap_s > 0

    out = tmp_path / "pairs.csv"
    write_pairs(rows, out, "h100-sxm", "test source")
    lines = out.read_text().splitlines()
    assert lines[0] == "# test source"
    table = list(csv.DictReader(lines[1:]))
    assert list(table[0]) == list(PAIR_COLUMNS)
    assert [(t["pair"], t["job"], t["model"], t["partner"]) for t in table] == [
        ("1", "a", "bert-base", "resnet50:5:amp-bf16:train"),
        ("1", "b", "resnet50", "bert-base:3:amp-bf16:train"),
    ]
    assert float(table[0]["gpu_power_shared_w"]) == pytest.approx(250.0, rel=1e-2)
    assert float(table[1]["slowdown"]) == pytest.approx(
        float(table[1]["step_time_shared_s"]) / float(table[1]["step_time_alone_s"]), rel=1e-3
    )

    # the file is what `easlurm model calibrate-pairs` reads
    (run,) = read_pairs(out)
    assert (run.gpu, run.sharing.value) == ("h100-sxm", "time-slice")
    assert [(j.model, j.batch) for j in run.jobs] == [("bert-base", 3), ("resnet50", 5)]
    assert run.jobs[1].slowdown == pytest.approx(float(table[1]["slowdown"]), rel=1e-3)
    assert run.gpu_power_shared_w == pytest.approx(250.0, rel=1e-2)


def test_a_failing_job_leaves_its_pairs_out_and_says_why(
    fake_gpu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A job that fails alone (before the barrier) leaves out every pair it is in, with its error's
    first line; the other pairs are measured."""
    runner = functools.partial(fake_runner, gpu=FORK.Lock(), events=FORK.Queue(), fail="gpt2")
    pairs = parse_pairs("gpt2:2+resnet50:2,bert-base:2+resnet50:2")
    rows = measure_pairs(pairs, "cpu", runner=runner, timing=TIMING, energy_j=fake_gpu, context="fork")
    assert {r.pair for r in rows} == {2}
    text = caplog.text
    assert "gpt2 batch 2 amp-bf16 train: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" in text
    assert "more detail" not in text and "left out: pair 1" in text


def test_nothing_measured_is_an_error(fake_gpu: Any) -> None:
    runner = functools.partial(fake_runner, gpu=FORK.Lock(), events=FORK.Queue(), fail="gpt2")
    with pytest.raises(ModelError, match="no pair could be measured"):
        measure_pairs(parse_pairs("gpt2:2+gpt2:4"), "cpu", runner=runner, timing=TIMING, context="fork")


def test_torch_runner_times_a_window_and_keeps_stepping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch runner's loop, with `prepare` stubbed (forked processes inherit it): each window lasts at
    least --window and counts whole synchronised steps; both processes are stopped at the end."""
    from easlurm.measure import steps as measure

    def prepare(cfg: MeasureConfig, device: str, timing: Timing) -> measure.Prepared:
        return measure.Prepared(
            cfg, lambda: time.sleep(cfg.batch * 1e-3), lambda: None, 0.01, 7, lambda: None
        )

    monkeypatch.setattr(measure, "prepare", prepare)
    rows = measure_pairs(parse_pairs("bert-base:2+resnet50:3"), "cpu", timing=TIMING, context="fork")
    for r in rows:
        for group in (r.alone, r.shared):
            for w in group.windows:
                assert w.steps >= 1 and w.end_s - w.start_s >= TIMING.window_s
        assert r.alone.gpu_power_w is None and r.shared.gpu_power_w is None  # no energy reader


def test_energy_reader_reads_the_counter_itself_every_time(
    fake_gpu: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window's power is the counter's difference, not the sensor's estimate between counter reads."""
    from easlurm_fakes import fake_nvml

    calls = []
    real = fake_nvml.nvmlDeviceGetTotalEnergyConsumption
    monkeypatch.setattr(
        fake_nvml, "nvmlDeviceGetTotalEnergyConsumption", lambda h: calls.append(h) or real(h)
    )
    e0 = fake_gpu()
    e1 = fake_gpu()
    assert len(calls) == 2 and e1 >= e0
