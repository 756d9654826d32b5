"""Per-job metrics in a real Prometheus (Debian's `prometheus`, scraping `easlurm metrics serve` every
second): a profiled job on the local cluster (fake NVML, one GPU busy, one idle) shows its series with its
job id, its idle GPU, and data for every query of docs/grafana-jobs.json; once it ends its series are
gone (an instant query honours Prometheus's staleness markers), its step record holds the idle episode,
and the site's idle action ran once for it with the job, the GPU and the seconds idle."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.step_record import StepRecord

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prom:
    """A Prometheus on 127.0.0.1 with its own data directory, queried through its HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])


@pytest.fixture(scope="module")
def stack(slurm_box: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The plugin's agents writing metrics (every 1 s, idle after 3 s), `easlurm metrics serve`, and a
    Prometheus scraping it every second."""
    if not os.access(PROMETHEUS, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is not installed (scripts/slurm-box install installs it)")
        pytest.skip("prometheus is not installed (scripts/slurm-box install installs it)")
    tmp = tmp_path_factory.mktemp("prom")
    tmp.chmod(0o755)
    metrics, registry = tmp / "metrics", tmp / "procs"
    metrics.mkdir(mode=0o755)
    registry.mkdir(mode=0o777)
    action = tmp / "idle-action"  # the site's command: what it is told, one line per episode
    action.write_text('#!/bin/sh\necho "$EASLURM_JOB_ID $EASLURM_GPU $EASLURM_IDLE_S" >> "$0.out"\n')
    action.chmod(0o755)
    procs: list[subprocess.Popen[str]] = []
    extra = (
        f"env=EASLURM_METRICS__DIR={metrics}",
        "env=EASLURM_METRICS__INTERVAL_S=1",
        "env=EASLURM_IDLE__AFTER_S=3",
        f"env=EASLURM_IDLE__ACTION={action}",
        f"env=EASLURM_FAKE_NVML_PROCS_DIR={registry}",
    )
    try:
        with plugin_with_fake_sensors(slurm_box, *extra) as spool:
            serve = subprocess.Popen(
                [sys.executable, "-m", "easlurm.cli", "metrics", "serve", "--dir", str(metrics), "--port", "0",
                 "--address", "127.0.0.1"],
                env={**os.environ, "PYTHONPATH": str(REPO / "src")}, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            procs.append(serve)
            assert serve.stderr is not None
            m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", serve.stderr.readline())
            assert m, "easlurm metrics serve did not say where it listens"
            port = free_port()
            conf = tmp / "prometheus.yml"
            conf.write_text(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                f"scrape_configs:\n  - job_name: easlurm\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{m.group(1)}']\n"
            )
            log = (tmp / "prometheus.log").open("w")
            procs.append(
                subprocess.Popen(  # type: ignore[call-overload]
                    [PROMETHEUS, f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}"],
                    stdout=log, stderr=log, text=True,
                )
            )  # fmt: skip
            prom = Prom(f"http://127.0.0.1:{port}")
            wait_for(lambda: _ready(prom), 30, "Prometheus ready")
            yield {"prom": prom, "spool": spool, "metrics": metrics, "registry": registry, "tmp": tmp}
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def _ready(prom: Prom) -> bool:
    try:
        with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _job(box: Any, tmp: Path, registry: Path) -> str:
    """Two GPUs for ~12 s: the first runs a fake workload at 60 %, the second is left idle."""
    script = tmp / "job.sh"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        export PYTHONPATH={REPO / "tests" / "fakes"} EASLURM_FAKE_NVML_PROCS_DIR={registry}
        {sys.executable} -m easlurm_fakes.gpu_load --util 60 --seconds 12
        """)
    )
    script.chmod(0o755)
    return str(
        box.sbatch("-J", "prom-it", "-p", "a100", "-N1", "--gres=gpu:a100:2", "--energy-profile=gpu",
                   "-o", str(tmp / "job.out"), str(script))
    )  # fmt: skip


def _exprs() -> list[str]:
    doc = json.loads((REPO / "docs" / "grafana-jobs.json").read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_a_jobs_series_appear_with_its_id_and_vanish_after_it_ends(
    stack: dict[str, Any], slurm_box: Any
) -> None:
    prom: Prom = stack["prom"]
    job = _job(slurm_box, stack["tmp"], stack["registry"])
    try:
        power = f'easlurm_job_gpu_power_watts{{jobid="{job}"}}'
        wait_for(lambda: len(prom.query(power)) == 2, 40, f"job {job}'s two GPUs in Prometheus")
        series = prom.query(power)
        assert {s["metric"]["jobid"] for s in series} == {job}
        assert {s["metric"]["step"] for s in series} == {"batch"}
        # bounded labels: the job's ids and where it runs, plus Prometheus's own target labels
        assert set(series[0]["metric"]) == {"__name__", "jobid", "step", "node", "gpu", "instance", "job"}
        assert all(float(s["value"][1]) == pytest.approx(250.0, rel=0.05) for s in series)
        idle = f'easlurm_job_gpu_idle{{jobid="{job}"}} == 1'
        wait_for(lambda: len(prom.query(idle)) == 1, 20, "the idle GPU marked idle")
        (busy,) = prom.query(f'easlurm_job_gpu_utilization_ratio{{jobid="{job}"}} > 0')
        assert float(busy["value"][1]) == pytest.approx(0.6)
        (idle_gpu,) = [s["metric"]["gpu"] for s in prom.query(idle)]
        assert idle_gpu != busy["metric"]["gpu"]
        node = busy["metric"]["node"]
        (count,) = prom.query(f'easlurm_node_idle_allocated_gpus{{node="{node}"}}')
        assert float(count["value"][1]) >= 1
        for expr in _exprs():  # every panel of the dashboard, for this job
            q = expr.replace("${job}", job).replace("$job", job)
            assert prom.query(q), f"no data for the dashboard query {q}"
    finally:
        assert slurm_box.wait_job(job, timeout_s=60) == "COMPLETED"
    # an instant query sees a series until Prometheus marks it stale: at the first scrape without it
    wait_for(lambda: not prom.query(f'{{jobid="{job}"}}'), 15, f"job {job}'s series gone")
    assert not list(stack["metrics"].glob(f"easlurm_job{job}_*"))
    step_file = Path(stack["spool"]) / job / "step-batch.json"
    wait_for(step_file.exists, 30, "the batch step record")
    (ep,) = StepRecord.from_dict(json.loads(step_file.read_text())).idle_episodes
    assert ep["gpu"] == f"gpu{idle_gpu}" and ep["energy_j"] > 0 and ep["end"] - ep["start"] >= 3
    ((got_job, got_gpu, idle_s),) = [
        ln.split() for ln in (stack["tmp"] / "idle-action.out").read_text().splitlines()
    ]
    assert (got_job, got_gpu) == (job, idle_gpu) and int(idle_s) >= 3
    # the card lists the episode with the energy it burned (records published from the agent)
    card: dict[str, Any] = {}

    def seff_lists_it() -> bool:
        res = run_easlurm(slurm_box, "seff", job, "--json", timeout=60)
        card.update(json.loads(res.stdout) if res.returncode == 0 else {})
        return bool(card.get("idle_episodes"))

    wait_for(seff_lists_it, 30, "the idle episode in easlurm seff")
    (shown,) = card["idle_episodes"]
    assert shown["gpu"] == f"gpu{idle_gpu}" and shown["energy_j"] == pytest.approx(ep["energy_j"])
