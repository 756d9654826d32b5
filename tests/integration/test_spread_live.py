"""A placement spread over nodes, end to end on the local Slurm: with one GPU free on each H100 node, the
daemon (pollux: fastest placement now) spreads a declared 2-GPU job over both nodes, Slurm is asked for
NumNodes=2 and one GPU per node on exactly those nodes, and the job runs there (sacct NNodes=2)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from box_support import mine, wait_for

from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.slurm.sched_client import CliSchedClient

pytestmark = pytest.mark.slurm
NODES = ("h100-1", "h100-2")
SPEC = "model=resnet50,steps=200,batch=256,gpus=2"


def blocker(box: Any, node: str) -> str:
    """7 of the node's 8 GPUs, so that one is left free there."""
    return str(
        box.sbatch(
            "-J",
            f"spread-blk-{node}",
            "-p",
            "h100",
            f"--nodelist={node}",
            "--gres=gpu:h100:7",
            "--wrap",
            "sleep 300",
        )
    )


def test_a_declared_job_the_policy_spreads_gets_two_nodes(slurm_box: Any, tmp_path: Path) -> None:
    ids: list[str] = []
    try:
        ids += [blocker(slurm_box, n) for n in NODES]
        wait_for(lambda: all(j.running for j in mine(slurm_box, ids).values()), 120, "the blockers to run")
        job = str(
            slurm_box.sbatch(
                "-J",
                "spread-it-job",
                f"--comment=energy-profile={SPEC}",
                "-p",
                "h100",
                "--gres=gpu:h100:2",
                "--wrap",
                "sleep 4",
            )
        )
        ids.append(job)
        cfg = DaemonConfig(
            policy="pollux",
            interval_s=1.0,
            decision_log=tmp_path / "log.jsonl",
            env_dir=tmp_path / "sched",
            name_prefix="spread-it-",
            nodes=NODES,
        )
        daemon = Daemon(CliSchedClient(env=slurm_box.env), cfg)
        stop = threading.Event()
        t = threading.Thread(target=daemon.run, args=(stop,), name="spread-it-schedd", daemon=True)
        t.start()
        try:
            assert slurm_box.wait_job(job, timeout_s=120) == "COMPLETED"
        finally:
            stop.set()
            t.join(timeout=60)
    finally:
        slurm_box.run(["scancel", *ids], check=False)
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    starts = [
        s for line in lines for s in (line.get("decision") or {}).get("starts", []) if s["job_id"] == job
    ]
    assert starts and starts[0]["nodes"] == list(NODES) and starts[0]["node_gpus"] == [1, 1], starts
    places = [
        a for line in lines for a in line.get("actions", []) if a["kind"] == "place" and a["job_id"] == job
    ]
    # the GRES is spelt as Slurm reports the job's own request ("gres:" on 22.05, "gres/" on 24.11+)
    fields = dict(places[0]["fields"]) if places else {}
    assert re.fullmatch(r"gres[:/]gpu:h100:1", fields.pop("TresPerNode", "")), places
    assert fields == {"NumNodes": "2", "NodeList": "h100-1,h100-2"}, places
    res = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "NNodes,NodeList,AllocTRES"])
    nnodes, nodelist, tres = res.stdout.strip().splitlines()[0].split("|")
    assert nnodes == "2" and nodelist == "h100-[1-2]", res.stdout
    assert "gres/gpu=2" in tres, res.stdout
