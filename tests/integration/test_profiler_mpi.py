"""The profiler under real Open MPI with 4 ranks on one node: synchronised, no double counting, rank 0 tables."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes"
sys.path.insert(0, str(FAKES))
from easlurm_fakes.powercap import FakePowercap  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
MISSING = (
    "mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)"
    if shutil.which("mpirun") is None
    else "mpi4py not installed (pip install 'easlurm[mpi]')"
    if importlib.util.find_spec("mpi4py") is None
    else None
)

APP = """
import json, sys, time
import numpy as np
from easlurm.energy import EnergyProfiler

out, powercap = sys.argv[1], sys.argv[2]
prof = EnergyProfiler(devices="gpu,cpu,dram", interval_s=0.02, out_dir=out, powercap_root=powercap,
                      nvml_module="easlurm_fakes.fake_nvml", mpi=True)
prof.start()
with prof.region("matmul"):
    a = np.random.default_rng(prof.mpi.rank).random((200, 200))
    for _ in range(20):
        a = a @ a / 200.0
time.sleep(1.0)
result = prof.stop()
if prof.mpi.rank == 0:
    print("CLUSTER " + json.dumps(prof.cluster.to_dict()))
"""


@pytest.mark.mpi
def test_four_ranks_one_node(tmp_path: Path) -> None:
    if MISSING:
        if IN_CI:
            pytest.fail(f"CI=true but the MPI test cannot run: {MISSING}")
        pytest.skip(MISSING)
    app = tmp_path / "app.py"
    app.write_text(APP)
    fp = FakePowercap(tmp_path / "powercap", sockets=1, subzones=("core",))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_VISIBLE", "SLURM_", "EASLURM_"))}
    env.update(
        PYTHONPATH=f"{FAKES}{os.pathsep}{env.get('PYTHONPATH', '')}",
        EASLURM_FAKE_NVML_COUNT="2",
        EASLURM_FAKE_NVML_POWER_W="100",
        OMPI_MCA_rmaps_base_oversubscribe="1",
    )
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4"]
    argv += [sys.executable, str(app), str(tmp_path / "run"), str(fp.root)]
    fp.start_ticker({"package-0": 80.0}, period_s=0.002)
    try:
        res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240, check=False)
    finally:
        fp.close()
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("CLUSTER "))
    cluster = json.loads(line[len("CLUSTER ") :])
    assert cluster["ranks"] == 4
    (node,) = cluster["nodes"]  # all ranks share this host: one node
    devices = {d["name"]: d for d in node["devices"]}
    # Exactly one rank read the node-level sensors: 80 W once, not 4 x 80 W.
    pkg = devices["package-0"]
    assert pkg["energy_j"] == pytest.approx(80.0 * pkg["duration_s"], rel=0.03)
    assert devices["dram"]["modelled"] is True  # no RAPL dram zone in this tree
    for g in ("gpu0", "gpu1"):
        assert devices[g]["energy_j"] == pytest.approx(100.0 * devices[g]["duration_s"], rel=0.02)
    assert node["cpu_energy_j"] == pytest.approx(pkg["energy_j"])
    # Per-rank run directories; only the node leader lists CPU/DRAM devices.
    ranks = sorted((tmp_path / "run").glob("rank-*"))
    assert [r.name for r in ranks] == ["rank-0", "rank-1", "rank-2", "rank-3"]
    readers = [r for r in ranks if "package-0" in (r / "summary.json").read_text()]
    assert len(readers) == 1
    # Synchronised start: all ranks started within a fraction of a second of each other.
    starts = [json.loads((r / "summary.json").read_text())["start_time"] for r in ranks]
    assert max(starts) - min(starts) < 0.5
    nodes_csv = (tmp_path / "run" / "nodes.csv").read_text().splitlines()
    assert nodes_csv[0] == "Node,Pkg(J),gpu0(J),gpu1(J),RAM(J),Total(J),Time(s)"
    assert nodes_csv[-1].startswith("Total,")
