"""The agent process as the plugin runs it, watching its GPUs live (fake NVML, a fake workload registry):
while the step runs its metrics file is there and parses; the GPU with no process becomes idle, the
site's action runs for it, and the episode is in the node's record; at the stop the file is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_fakes import spool as spool
from prometheus_client.parser import text_string_to_metric_families

from easlurm.accounting.step_record import StepRecord

REPO = Path(__file__).resolve().parents[3]


def _wait(pred: object, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_agent_watches_idle_gpus_and_writes_then_removes_its_metrics(spool: Path, tmp_path: Path) -> None:
    registry = tmp_path / "procs"
    registry.mkdir()
    metrics = tmp_path / "run" / "metrics"  # not there yet: the agent creates it
    action_out = tmp_path / "action.out"
    # a process of this test stands for the job's work on GPU 1; GPU 2 is allocated and left alone
    (registry / f"{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "gpu": 1, "sm_util": 70, "start_s": time.time()})
    )
    action = f"{sys.executable} -c \"import os; open('{action_out}','w').write(os.environ['EASLURM_GPU'])\""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'tests' / 'fakes'}",
        "EASLURM_PROFILER__NVML_MODULE": "easlurm_fakes.fake_nvml",
        "EASLURM_PROFILER__POWERCAP_ROOT": str(spool / "no-powercap"),
        "EASLURM_FAKE_NVML_COUNT": "4",
        "EASLURM_FAKE_NVML_POWER_W": "250",
        "EASLURM_FAKE_NVML_PROCS_DIR": str(registry),
        "EASLURM_IDLE__AFTER_S": "0.5",
        "EASLURM_IDLE__ACTION": action,
        "EASLURM_METRICS__DIR": str(metrics),
        "EASLURM_METRICS__INTERVAL_S": "0.2",
        "SLURM_CONF": "/nonexistent/slurm.conf",
        "EASLURM_SPANK__LATE_LIMIT_S": "4",
        "HOME": str(spool),
    }
    argv = [
        sys.executable, "-m", "easlurm.accounting.agent", "--job", "8", "--step", "0", "--nnodes", "1",
        "--node-id", "0", "--gid", str(os.getgid()), "--spool", str(spool), "--timeout-ms", "3000",
        "--step-start", str(time.time()), "--spec=gpu,interval=50ms", "--gpus", "1,2", "--nodelist", "h100-1",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    path = metrics / "easlurm_job8_0_n0.prom"
    try:
        assert _wait(lambda: action_out.exists() and path.exists(), 20), "no idle action or metrics file"
        fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
        idle = {s.labels["gpu"]: s.value for s in fams["easlurm_job_gpu_idle"].samples}
        assert idle == {"1": 0.0, "2": 1.0}
        util = {s.labels["gpu"]: s.value for s in fams["easlurm_job_gpu_utilization_ratio"].samples}
        assert util == {"1": 0.7, "2": 0.0}
        assert {s.labels["node"] for s in fams["easlurm_job_gpu_power_limit_watts"].samples} == {"h100-1"}
        time.sleep(0.5)
    finally:
        assert proc.stdin is not None
        proc.stdin.write(f"stop {time.time()}\n".encode())
        proc.stdin.close()
        proc.wait(timeout=30)
    assert action_out.read_text() == "2"
    assert not path.exists()
    step = StepRecord.from_dict(json.loads((spool / "8" / "step-0.json").read_text()))
    (ep,) = step.nodes[0].idle_episodes
    assert ep["gpu"] == "gpu2" and ep["end"] - ep["start"] >= 0.5
    assert ep["energy_j"] == pytest.approx(250.0 * (ep["end"] - ep["start"]), rel=0.15)
