"""`--energy-profile` on the real local cluster: every step's energy, per node and device, reaches
`easlurm sacct` within 1% of what the fake sensors drew; jobs without the option carry no record; a
burst of 200 profiled steps in one job keeps every record (one writer at a time owns AdminComment),
and an agent still busy past the plugin's bound is left to finish: its record arrives late, not never."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spank_support import GPU_W, REPO, plugin_with_fake_sensors, run_easlurm, slurmd_log

pytestmark = pytest.mark.slurm

CPU_W = 80.0
#: How long after the step's end the agent's closing reading may come (it reads the plugin's stop, then
#: stops its samplers; a loaded CI root is slower than this box).
STOP_LAG_S = 0.5


def easlurm_sacct(box: Any, *args: str) -> dict[str, Any]:
    res = run_easlurm(box, "sacct", *args, "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def step_rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["job_id"].split(".", 1)[1]: r for r in doc["rows"] if "." in r["job_id"]}


def rows_once_published(
    box: Any, job: str, steps: set[str], timeout_s: float = 180
) -> dict[str, dict[str, Any]]:
    """The job's step rows once every step in `steps` carries a record. Agents left to finish in the
    background (overloaded node) publish after the job ends, so the last records may come late."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = step_rows(easlurm_sacct(box, "-j", job))
        if (
            all(rows.get(s, {}).get("energy_record") is not None for s in steps)
            or time.monotonic() > deadline
        ):
            return rows
        time.sleep(2)


@pytest.fixture
def fake_powercap(tmp_path: Path) -> Iterator[Path]:
    """A RAPL tree at CPU_W for package-0, ticking while the test runs (the agent runs as root here)."""
    sys.path.insert(0, str(REPO / "tests" / "fakes"))
    from easlurm_fakes.powercap import FakePowercap

    root = tmp_path / "powercap"
    fp = FakePowercap(root, sockets=1, subzones=("core",))
    fp.start_ticker({"package-0": CPU_W}, period_s=0.005)
    os.chmod(tmp_path, 0o755)
    try:
        yield root
    finally:
        fp.stop_ticker()
        fp.close()


def test_multi_node_steps_are_accounted_per_node_and_device(
    slurm_box: Any, tmp_path: Path, fake_powercap: Path
) -> None:
    """sbatch -N2 --energy-profile=all with three srun steps: each step, node and GPU within 1%."""
    script = tmp_path / "job.sh"
    script.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        srun sleep 3
        srun -N1 -n1 --gres=gpu:a100:2 sleep 3
        srun -N2 --gres=gpu:a100:4 sleep 3
        """)
    )
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_PROFILER__POWERCAP_ROOT={fake_powercap}"):
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "-N2",
            "--ntasks-per-node=1",
            "--gres=gpu:a100:8",
            "--energy-profile=all",
            "-o",
            str(tmp_path / "out"),
            str(script),
        )
        assert slurm_box.wait_job(job) == "COMPLETED"
    steps = step_rows(easlurm_sacct(slurm_box, "-j", job))
    assert set(steps) >= {"batch", "0", "1", "2"}
    expected_gpus = {"batch": 8, "0": 8, "1": 2, "2": 4}
    expected_nodes = {"batch": 1, "0": 2, "1": 1, "2": 2}
    for name, row in steps.items():
        if name == "extern":
            continue
        rec = row["energy_record"]
        assert not rec["partial"], name
        assert len(rec["nodes"]) == expected_nodes[name], name
        assert sorted(n["host"] for n in rec["nodes"]) == sorted(
            {f"a100-{i + 1}" for i in range(expected_nodes[name])}
        )
        gpu_total = 0.0
        for node in rec["nodes"]:
            gpus = [d for d in node["devices"] if d["kind"] == "gpu"]
            assert len(gpus) == expected_gpus[name], (name, node["host"])
            wall_s = node["step_end_time"] - node["step_start_time"]
            # the record covers the step's wall time on this node, from the step's start (the lead-in
            # before the agent's first sample is in it) to the agent's closing reading just after the end
            assert node["start_time"] == pytest.approx(node["step_start_time"], abs=1e-3), (name, node)
            assert wall_s - 0.05 <= node["duration_s"] <= wall_s + STOP_LAG_S, (name, node, wall_s)
            for dev in gpus:
                # the device's window (the lead-in, then first to last reading) covers the wall time too...
                assert wall_s - 0.05 <= dev["duration_s"] <= wall_s + STOP_LAG_S, (name, dev, wall_s)
                # ...its lead-in mostly from the driver's power buffer (the fake's reaches back 12 s)
                assert dev["lead_in_buffered_s"] > 0, (name, dev)
                assert dev["lead_in_extrapolated_s"] <= dev["lead_in_buffered_s"], (name, dev)
                # ...and its energy is the fake's known power over that window
                assert dev["energy_j"] == pytest.approx(GPU_W * dev["duration_s"], rel=0.01), (name, dev)
                gpu_total += dev["energy_j"]
            cpu = [d for d in node["devices"] if d["name"] == "package-0"]
            assert cpu, (name, node["devices"])
            assert cpu[0]["energy_j"] == pytest.approx(CPU_W * cpu[0]["duration_s"], rel=0.01), (name, cpu)
        assert row["gpu_energy_j"] == pytest.approx(gpu_total)
        assert row["total_energy_j"] >= row["gpu_energy_j"]
    # the per-step JSON files are there for the user too
    spool = Path(slurm_box.dir) / "spool" / "easlurm" / job
    assert {p.name for p in spool.glob("step-*.json")} >= {
        "step-batch.json",
        "step-0.json",
        "step-1.json",
        "step-2.json",
    }


def test_job_without_the_option_has_no_record(slurm_box: Any, tmp_path: Path) -> None:
    with plugin_with_fake_sensors(slurm_box):
        job = slurm_box.sbatch(
            "-p", "a100", "-N1", "--gres=gpu:a100:1", "-o", str(tmp_path / "out"), "--wrap", "srun sleep 1"
        )
        assert slurm_box.wait_job(job) == "COMPLETED"
    doc = easlurm_sacct(slurm_box, "-j", job)
    assert doc["rows"] and all(r["total_energy_j"] is None and "energy_record" not in r for r in doc["rows"])
    assert not (Path(slurm_box.dir) / "spool" / "easlurm" / job).exists()
    res = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment"])
    assert res.stdout.strip() == ""


def test_burst_of_200_profiled_steps_keeps_every_record(slurm_box: Any, tmp_path: Path) -> None:
    """200 srun steps submitted together in one job: all 200 (and the batch step) are in AdminComment."""
    script = tmp_path / "burst.sh"
    script.write_text(
        textwrap.dedent("""\
        #!/bin/bash
        for i in $(seq 200); do srun -n1 -N1 --exact --gres=none sleep 0.2 & done
        wait
        """)
    )
    with plugin_with_fake_sensors(slurm_box):
        job = slurm_box.sbatch(
            "-p",
            "h100",
            "-N1",
            "-n16",
            "--energy-profile=gpu,interval=50ms",
            "-o",
            str(tmp_path / "out"),
            str(script),
        )
        assert slurm_box.wait_job(job, timeout_s=400) == "COMPLETED"
    steps = rows_once_published(slurm_box, job, {str(i) for i in range(200)} | {"batch"})
    srun_steps = {k: v for k, v in steps.items() if k.isdigit()}
    assert len(srun_steps) == 200, (tmp_path / "out").read_text()[-2000:]
    missing = [k for k, v in srun_steps.items() if v.get("energy_record") is None]
    assert missing == []
    assert steps["batch"].get("energy_record") is not None


def test_an_agent_past_the_bound_is_left_to_finish_and_publishes_late(slurm_box: Any, tmp_path: Path) -> None:
    """The plugin waits `timeout_ms` and lets the step go on; the agent (here slowed to start 3 s late,
    as on an overloaded node) is not killed, and its records reach the database after the job ended."""
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 3\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    tmp_path.chmod(0o755)
    with plugin_with_fake_sensors(slurm_box, agent=str(slow), timeout_ms=300):
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "-N1",
            "--gres=gpu:a100:1",
            "--energy-profile=gpu",
            "-o",
            str(tmp_path / "out"),
            "--wrap",
            "srun sleep 1",
        )
        assert slurm_box.wait_job(job) == "COMPLETED"
    logs = slurmd_log(slurm_box, job)
    assert f"step {job}.0: agent still running after 300 ms; left to finish in the background" in logs
    assert f"step {job}.0: agent did not finish" not in logs
    steps = rows_once_published(slurm_box, job, {"0", "batch"}, timeout_s=60)
    assert steps["0"].get("energy_record") is not None, steps
    assert steps["batch"].get("energy_record") is not None, steps
