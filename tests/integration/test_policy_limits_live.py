"""Power limits chosen by an energy policy, end to end on the local Slurm: the daemon (zeus) chooses a
declared job's GPU limit with its placement and publishes it in the job's hints; the node agents set it on
the step's (fake NVML) GPUs, restore the default at the end, and the step record shows it in `easlurm
sacct` (PowerLimit). A job that declared `nolimit` runs at the default."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.energy.power_limits import LEDGER_DIR
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.slurm.sched_client import CliSchedClient

pytestmark = pytest.mark.slurm
NODE = "h100-2"
SPEC = "model=resnet50,steps=200,batch=256,gpus=2"


def submit(box: Any, tmp_path: Path, name: str, spec: str, limits: Path) -> str:
    """A declared 2-GPU job whose one step records its GPUs and the GPU limits it sees while it runs."""
    return str(
        box.sbatch(
            "-J",
            name,
            f"--energy-profile=gpu,{spec}",
            f"--comment=energy-profile={spec}",
            "--begin=now+8",
            "-p",
            "h100",
            f"--nodelist={NODE}",
            "--gres=gpu:h100:2",
            "-o",
            str(tmp_path / f"{name}.out"),
            "--wrap",
            f"srun bash -c 'sleep 3; echo $SLURM_STEP_GPUS > {tmp_path}/{name}.gpus; "
            f"cat {limits} 2>/dev/null || echo {{}}' > {tmp_path}/{name}.seen.json",
        )
    )


def test_zeus_limit_reaches_the_gpus_is_restored_and_shows_in_sacct(slurm_box: Any, tmp_path: Path) -> None:
    limits = tmp_path / "limits.json"
    ids: list[str] = []
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_LIMITS_FILE={limits}") as spool:
        try:
            # a begin time ahead (as a site's job_submit.lua sets for declared jobs) and the daemon's gate
            # (a budget this cluster never reaches): held before Slurm can start them, started by the
            # daemon once their hints are published (docs/schedd.md)
            capped = submit(slurm_box, tmp_path, "pl-it-capped", SPEC, limits)
            opted = submit(slurm_box, tmp_path, "pl-it-nolimit", f"{SPEC},nolimit", limits)
            ids = [capped, opted]
            cfg = DaemonConfig(
                policy="zeus",
                interval_s=1.0,
                power_budget_w=1e6,
                hold_ttl_s=120.0,
                decision_log=tmp_path / "log.jsonl",
                env_dir=spool / "sched",
                name_prefix="pl-it-",
                nodes=(NODE,),
            )
            daemon = Daemon(CliSchedClient(env=slurm_box.env), cfg)
            stop = threading.Event()
            t = threading.Thread(target=daemon.run, args=(stop,), name="pl-it-schedd", daemon=True)
            t.start()
            try:
                for job in ids:
                    assert slurm_box.wait_job(job, timeout_s=180) == "COMPLETED"
            finally:
                stop.set()
                t.join(timeout=60)
        finally:
            slurm_box.run(["scancel", *ids], check=False)
        starts = {
            s["job_id"]: s
            for line in map(json.loads, (tmp_path / "log.jsonl").read_text().splitlines())
            for s in (line.get("decision") or {}).get("starts", [])
        }
        chosen = starts[capped]["power_limit_w"]
        assert chosen is not None and 0 < chosen < 700, starts[capped]  # zeus chose a limit under TDP
        assert starts[opted]["power_limit_w"] is None
        for name, want in (("pl-it-capped", round(chosen * 1000)), ("pl-it-nolimit", 700_000)):
            gpus = (tmp_path / f"{name}.gpus").read_text().strip().split(",")
            seen = json.loads((tmp_path / f"{name}.seen.json").read_text())
            assert len(gpus) == 2 and [seen.get(g, 700_000) for g in gpus] == [want, want], (name, gpus, seen)
        wait_for(lambda: not list((spool / LEDGER_DIR).glob("*.json")), 30, "every ledger to be restored")
        assert all(v == 700_000 for v in json.loads(limits.read_text()).values())
        res = run_easlurm(
            slurm_box, "sacct", "-j", ",".join(ids), "-P", "-o", "JobID,PowerLimitRaw,EnergyFlags"
        )
        assert res.returncode == 0, res.stderr
        rows = {r.split("|")[0]: r.split("|") for r in res.stdout.splitlines()[1:]}
        assert float(rows[f"{capped}.0"][1]) == pytest.approx(chosen), res.stdout
        assert rows[f"{opted}.0"][1] == "", res.stdout
        assert "limit-unset" not in res.stdout


def test_a_limit_the_gpus_refuse_runs_at_the_default_and_sacct_says_so(
    slurm_box: Any, tmp_path: Path
) -> None:
    """The driver refuses the limit (not root on a real node; here the fake NVML's NO_PERMISSION): the step
    runs at the default limit, its record keeps the request and why, sacct flags it."""
    refuse = "env=EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION=1"
    with plugin_with_fake_sensors(slurm_box, refuse) as spool:
        job = str(
            slurm_box.sbatch(
                "-H",
                "-J",
                "pl-it-refused",
                "-p",
                "h100",
                "--gres=gpu:h100:1",
                "--energy-profile=gpu",
                "-o",
                str(tmp_path / "refused.out"),
                "--wrap",
                "srun sleep 1",
            )
        )
        (spool / "sched").mkdir(mode=0o755, exist_ok=True)
        (spool / "sched" / f"job-{job}.env").write_text("EASLURM_POWER_LIMIT_W=300\n")
        slurm_box.run(["scontrol", "release", job])
        assert slurm_box.wait_job(job, timeout_s=120) == "COMPLETED"
    res = run_easlurm(slurm_box, "sacct", "-j", job, "-P", "-o", "JobID,PowerLimitRaw,EnergyFlags")
    assert res.returncode == 0, res.stderr
    rows = {r.split("|")[0]: r.split("|") for r in res.stdout.splitlines()[1:]}
    assert rows[f"{job}.0"][1] == "" and "limit-unset:300W" in rows[f"{job}.0"][2], res.stdout
    doc = json.loads(run_easlurm(slurm_box, "sacct", "-j", job, "--json").stdout)
    step = next(r for r in doc["rows"] if r["job_id"] == f"{job}.0")
    node = step["energy_record"]["nodes"][0]
    assert node["power_limit_requested_w"] == 300 and "not set" in node["limit_error"]
