"""The node agent's live watch and per-job metrics: idle episodes and the site's action, the step's metrics
file in Prometheus's text format (checked with prometheus_client's own parser), what `easlurm metrics
serve` serves from a directory (live agents only, each family once, each node's idle GPUs), and the
episodes in step records (old records stay readable)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from easlurm.accounting.live import STOP_WAIT_S, LiveWatch, WatchedStep, WatchSettings, run_action
from easlurm.accounting.metrics import (
    GpuMetrics,
    collect,
    merge,
    metrics_file,
    render_step,
    sweep,
    write_step,
)
from easlurm.accounting.step_record import (
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)
from easlurm.config import load_config
from easlurm.energy.gpu_watch import GpuReading, IdleRule
from easlurm.errors import TraceError

REPO = Path(__file__).resolve().parents[3]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(name, labels): value} as Prometheus's own parser reads the text (it raises on a bad exposition)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class ScriptedReader:
    """Readings a test scripts, one list per tick (the NVML side is tested in test_energy_gpu_watch)."""

    def __init__(self, ticks: list[list[GpuReading]]) -> None:
        self.ticks = ticks
        self.n = 0
        self.closed = False

    def read(self, now_s: float) -> list[GpuReading]:
        out = self.ticks[min(self.n, len(self.ticks) - 1)]
        self.n += 1
        return out

    def close(self) -> None:
        self.closed = True


def busy(i: int) -> GpuReading:
    return GpuReading(
        i,
        util_pct=90.0,
        memory_used_bytes=2**30,
        memory_total_bytes=80 * 10**9,
        processes=1,
        power_limit_w=400.0,
    )


def idle(i: int) -> GpuReading:
    return GpuReading(
        i, util_pct=0.0, memory_used_bytes=0, memory_total_bytes=80 * 10**9, processes=0, power_limit_w=400.0
    )


def watch(
    tmp_path: Path, ticks: list[list[GpuReading]], action: list[str] | None = None
) -> tuple[LiveWatch, dict[str, tuple[float, float]]]:
    energy = {"gpu0": (0.0, 0.0), "gpu1": (0.0, 0.0)}
    settings = WatchSettings(IdleRule(1.0, 20.0), interval_s=10.0, metrics_dir=tmp_path, action=action)
    w = LiveWatch(
        WatchedStep(42, "0", 1, "a100-2", [0, 1]), settings, lambda: dict(energy), ScriptedReader(ticks)
    )
    return w, energy


def test_watch_writes_the_steps_metrics_and_marks_the_idle_gpu(tmp_path: Path) -> None:
    """GPU 0 works, GPU 1 sits idle: after the time GPU 1 reads idle in the file; power is the energy's
    rate between reads; the series carry job, step, node and GPU, nothing else."""
    w, energy = watch(tmp_path, [[busy(0), idle(1)]])
    for k in range(4):
        energy.update(gpu0=(10.0 * k, 300.0 * 10 * k), gpu1=(10.0 * k, 60.0 * 10 * k))
        w.tick(now=1000.0 + 10 * k, mono=10.0 * k)
    path = metrics_file(tmp_path, 42, "0", 1)
    text = path.read_text()
    assert text.startswith(f"# easlurm-agent pid={os.getpid()} start=")
    assert text.splitlines()[0].endswith(" interval_s=10")
    got = samples(text)
    lab0 = (("gpu", "0"), ("jobid", "42"), ("node", "a100-2"), ("step", "0"))
    lab1 = (("gpu", "1"), ("jobid", "42"), ("node", "a100-2"), ("step", "0"))
    assert got[("easlurm_job_gpu_power_watts", lab0)] == pytest.approx(300.0)
    assert got[("easlurm_job_gpu_power_watts", lab1)] == pytest.approx(60.0)
    assert got[("easlurm_job_gpu_energy_joules_total", lab0)] == 9000.0
    assert got[("easlurm_job_gpu_utilization_ratio", lab0)] == 0.9
    assert got[("easlurm_job_gpu_memory_used_bytes", lab0)] == 2**30
    assert got[("easlurm_job_gpu_power_limit_watts", lab1)] == 400.0
    assert (got[("easlurm_job_gpu_idle", lab0)], got[("easlurm_job_gpu_idle", lab1)]) == (0.0, 1.0)
    assert got[("easlurm_job_gpu_idle_seconds", lab1)] == 30.0
    assert got[("easlurm_job_gpu_idle_energy_joules_total", lab1)] == 60.0 * 30
    assert got[("easlurm_job_gpu_idle_energy_joules_total", lab0)] == 0.0
    assert {k for _, labels in got for k, _ in labels} == {"jobid", "step", "node", "gpu"}
    episodes = w.stop(end_time=1045.0)
    assert not path.exists()  # no series left behind
    assert episodes == [{"gpu": "gpu1", "start": 1000.0, "end": 1045.0, "energy_j": 1800.0}]


def test_power_is_the_rate_between_energy_readings_not_between_ticks(tmp_path: Path) -> None:
    """The profiler drains the driver's power samples every few seconds: between two drains the energy
    stands still, and the power shown stays the last drain's rate (never 0 W, then twice the power)."""
    w, energy = watch(tmp_path, [[busy(0), busy(1)]])
    seen = []
    for k in range(9):
        drained = 3.0 * (k // 3)  # a drain every third tick
        energy.update(gpu0=(drained, 250.0 * drained), gpu1=(drained, 100.0 * drained))
        w.tick(now=1000.0 + k, mono=float(k))
        got = samples(metrics_file(tmp_path, 42, "0", 1).read_text())
        seen.append(
            got.get(
                (
                    "easlurm_job_gpu_power_watts",
                    (("gpu", "0"), ("jobid", "42"), ("node", "a100-2"), ("step", "0")),
                )
            )
        )
    w.stop(end_time=1009.0)
    assert seen == [None, None, None] + [250.0] * 6


def test_a_read_hanging_in_the_driver_does_not_hold_up_the_steps_record(tmp_path: Path) -> None:
    """The step ends while the watch's read hangs (a wedged driver): stop returns within its bound, with
    the episode closed at the step's end and the metrics file gone."""
    hang = threading.Event()

    class Wedged(ScriptedReader):
        def read(self, now_s: float) -> list[GpuReading]:
            if self.n >= 3:
                hang.wait()
            return super().read(now_s)

    w, energy = watch(tmp_path, [[busy(0), idle(1)]])
    w.reader = Wedged([[busy(0), idle(1)]])
    for k in range(3):
        energy.update(gpu0=(10.0 * k, 300.0 * 10 * k), gpu1=(10.0 * k, 60.0 * 10 * k))
        w.tick(now=1000.0 + 10 * k, mono=10.0 * k)
    stuck = threading.Thread(target=w.tick, daemon=True)
    stuck.start()
    t0 = time.monotonic()
    episodes = w.stop(end_time=1030.0)
    assert time.monotonic() - t0 < 3 * STOP_WAIT_S
    hang.set()
    stuck.join(timeout=10)
    assert episodes == [{"gpu": "gpu1", "start": 1000.0, "end": 1030.0, "energy_j": 1200.0}]
    assert not metrics_file(tmp_path, 42, "0", 1).exists()  # the late read wrote nothing back


def test_no_nvml_no_watch_and_the_step_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    settings = WatchSettings(IdleRule(1.0, 20.0))
    with caplog.at_level(logging.WARNING):
        got = LiveWatch.for_step(WatchedStep(7, "0", 0, "n1", [0]), settings, dict, "no_such_nvml_module")
    assert got is None and "GPUs not watched" in caplog.text


def test_the_action_runs_once_per_episode_with_the_job_gpu_and_seconds(tmp_path: Path) -> None:
    out = tmp_path / "action.out"
    script = "import os,sys; open(sys.argv[1],'a').write(' '.join(os.environ[k] for k in ('EASLURM_JOB_ID','EASLURM_GPU','EASLURM_IDLE_S','EASLURM_NODE'))+'\\n')"
    w, _ = watch(
        tmp_path,
        [[busy(0), idle(1)]] * 3 + [[busy(0), busy(1)]] + [[busy(0), idle(1)]] * 3,
        [sys.executable, "-c", script, str(out)],
    )
    for k in range(7):
        w.tick(now=1000.0 + 10 * k, mono=10.0 * k)
    w.stop(end_time=1070.0)
    for th in w.actions:
        th.join(timeout=30)
    assert out.read_text().splitlines() == ["42 1 20 a100-2", "42 1 20 a100-2"]


def test_a_failing_action_is_logged_and_the_watch_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        assert not run_action(
            [sys.executable, "-c", "import sys; sys.exit('no mail today')"], dict(os.environ), 30
        )
        assert not run_action([str(tmp_path / "missing")], dict(os.environ), 30)
        assert not run_action([sys.executable, "-c", "import time; time.sleep(5)"], dict(os.environ), 0.2)
    text = caplog.text
    assert "exit 1: no mail today" in text and "missing" in text and "timed out" in text


def test_serve_merges_live_files_and_skips_dead_and_stale_ones(tmp_path: Path) -> None:
    """Two live steps on one node holding the same idle GPU count it once; a dead agent's and a stale
    file's series are not served; each family's HELP and TYPE appear once (else Prometheus refuses)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    me = os.getpid()
    files = {
        metrics_file(tmp_path, 1, "batch", 0): render_step(
            1, "batch", "n1", [GpuMetrics(0, 250.0, idle=True), GpuMetrics(1, 300.0)], me, 1
        ),
        metrics_file(tmp_path, 1, "0", 0): render_step(
            1, "0", "n1", [GpuMetrics(0, 250.0, idle=True)], me, 1
        ),
        metrics_file(tmp_path, 2, "0", 0): render_step(2, "0", "n2", [GpuMetrics(3, 100.0)], me, 1),
        metrics_file(tmp_path, 3, "0", 0): render_step(
            3, "0", "n2", [GpuMetrics(5, 100.0, idle=True)], gone.pid, 1
        ),
        metrics_file(tmp_path, 4, "0", 0): render_step(4, "0", "n3", [GpuMetrics(6, 100.0)], me, 1),
    }
    for path, text in files.items():
        write_step(path, text)
    old = time.time() - 120
    os.utime(metrics_file(tmp_path, 4, "0", 0), (old, old))
    text = collect(tmp_path)
    assert text.count("# TYPE easlurm_job_gpu_power_watts gauge") == 1
    assert sweep(tmp_path) == [metrics_file(tmp_path, 3, "0", 0), metrics_file(tmp_path, 4, "0", 0)]
    after = collect(tmp_path)
    assert after.split("# HELP easlurm_metrics_files")[0] == text.split("# HELP easlurm_metrics_files")[0]
    assert 'easlurm_metrics_files{state="live"} 3' in after and 'state="gone"} 0' in after  # the live stay
    got = samples(text)
    jobs = {dict(labels).get("jobid") for _, labels in got}
    assert jobs == {"1", "2", None}  # None: the node series and the files' count
    assert [got[("easlurm_metrics_files", (("state", s),))] for s in ("live", "gone", "stale")] == [3, 1, 1]
    assert got[("easlurm_node_idle_allocated_gpus", (("node", "n1"),))] == 1.0
    assert got[("easlurm_node_idle_allocated_gpus", (("node", "n2"),))] == 0.0
    assert ("easlurm_node_idle_allocated_gpus", (("node", "n3"),)) not in got
    assert merge([]) == ""


def test_labels_never_carry_unexpected_text() -> None:
    with pytest.raises(ValueError, match="unexpected"):
        render_step(1, "0", 'n1"} evil{x="', [GpuMetrics(0, 1.0)], 1, 1)


def test_episodes_travel_in_records_and_admin_comment_and_old_records_read() -> None:
    ep = {"gpu": "gpu1", "start": 1.7e9, "end": 1.7e9 + 700, "energy_j": 42000.0}
    node = NodeRecord(0, "a100-1", 1.7e9, 800.0, idle_episodes=[ep])
    step = StepRecord(9, "batch", 1, [node])
    again = StepRecord.from_dict(json.loads(json.dumps(step.to_dict())))
    assert again.nodes[0].idle_episodes == [ep]
    assert again.idle_episodes == [{**ep, "host": "a100-1"}]
    (decoded,) = decode_admin_comment(encode_admin_comment([step]))
    assert decoded.idle_episodes == [{**ep, "host": "a100-1"}]
    assert decoded.reduced("step").nodes[0].idle_episodes[0]["gpu"] == "a100-1:gpu1"
    old = step.to_dict()
    for n in old["nodes"]:
        del n["idle_episodes"]
    assert StepRecord.from_dict(old).idle_episodes == []
    bad = step.to_dict()
    bad["nodes"][0]["idle_episodes"] = [{**ep, "end": ep["start"] - 1}]
    with pytest.raises(TraceError, match="idle episode ends before it starts"):
        StepRecord.from_dict(bad)


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("EASLURM_IDLE__GPU_UTIL_PCT", "-1", "idle.gpu_util_pct: must be between 0 and 100"),
        ("EASLURM_IDLE__AFTER_S", "0", "idle.after_s: must be > 0"),
        ("EASLURM_METRICS__INTERVAL_S", "0.01", "metrics.interval_s: must be between 0.1 and 3600"),
        ("EASLURM_IDLE__ACTION", "'unterminated", "idle.action: cannot split"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(var: str, value: str, message: str) -> None:
    env = {**os.environ, var: value, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run(
        [sys.executable, "-m", "easlurm.cli", "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr


def test_settings_from_config(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"idle:\n  gpu_util_pct: 3\n  after_s: 120\n  action: notify --job x\nmetrics:\n  dir: {tmp_path}\n"
    )
    s = WatchSettings.from_config(load_config(conf, environ={}))
    assert (s.rule, s.action, s.metrics_dir, s.interval_s) == (
        IdleRule(3.0, 120.0),
        ["notify", "--job", "x"],
        tmp_path,
        10.0,
    )


def test_metrics_serve_answers_metrics_over_http_and_nothing_else(tmp_path: Path) -> None:
    """The command a node runs: /metrics is the merged live files with Prometheus's content type."""
    write_step(
        metrics_file(tmp_path, 5, "0", 0), render_step(5, "0", "n1", [GpuMetrics(2, 120.0)], os.getpid(), 10)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    argv = [
        sys.executable,
        "-m",
        "easlurm.cli",
        "metrics",
        "serve",
        "--dir",
        str(tmp_path),
        "--port",
        "0",
        "--address",
        "127.0.0.1",
    ]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        port = line.rsplit(":", 1)[1].split("/")[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert samples(body) == samples(collect(tmp_path))
        assert 'easlurm_job_gpu_power_watts{jobid="5",step="0",node="n1",gpu="2"} 120' in body
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    res = subprocess.run(
        [*argv[:4], "show", "--dir", str(tmp_path / "none")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (
        res.returncode == 2
        and res.stderr.strip() == f"easlurm: error: --dir {tmp_path / 'none'}: not a directory"
    )


def test_a_file_whose_pid_now_names_another_process_is_not_served(tmp_path: Path) -> None:
    """The agent died and its PID went to another process: the start time in the header tells."""
    path = metrics_file(tmp_path, 6, "0", 0)
    text = render_step(6, "0", "n1", [GpuMetrics(0, 1.0)], os.getpid(), 10)
    write_step(path, text)
    assert collect(tmp_path)
    first, rest = text.split("\n", 1)
    write_step(path, re.sub(r"start=\d+", "start=1", first) + "\n" + rest)
    assert "easlurm_job_" not in collect(tmp_path)
    assert 'easlurm_metrics_files{state="gone"} 1' in collect(tmp_path)
