"""Two profiled jobs on one node of the real local Slurm split its (fake) CPU package and DRAM energy by
their CPU time instead of each being billed the whole node (docs/spank.md, "Shared nodes"). The box runs
proctrack/linuxproc, so the jobs' CPU time comes from their slurmstepd process trees. Names `cpushare-it-*`."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import REPO, plugin_with_fake_sensors

pytestmark = pytest.mark.slurm
NODE = "cpu-1"
BURN_S = 6
BURN = f"timeout {BURN_S} sh -c 'while :; do :; done'"
#: seconds each job sleeps before it burns
LEAD_S = 3


@pytest.fixture
def fake_powercap(tmp_path: Path) -> Iterator[Path]:
    """A RAPL tree at 60 W package (40 W core) and 6 W DRAM, ticking while the test runs."""
    sys.path.insert(0, str(REPO / "tests" / "fakes"))
    from easlurm_fakes.powercap import FakePowercap

    fp = FakePowercap(tmp_path / "powercap", sockets=1, subzones=("core", "dram"))
    fp.start_ticker({"package-0": 60.0, "core-0": 40.0, "dram-0": 6.0}, period_s=0.005)
    os.chmod(tmp_path, 0o755)
    try:
        yield fp.root
    finally:
        fp.stop_ticker()
        fp.close()


def test_two_jobs_on_one_node_split_its_cpu_and_dram_energy(
    slurm_box: Any, tmp_path: Path, fake_powercap: Path
) -> None:
    """Job A burns two CPUs, job B one (on a busy host the ratio is not 2:1), their burns overlapping by at
    least 2 s; A ends some 8 s before B. Each is billed its CPU-time share of the package, core and
    DRAM, the shares add up to one, and the two package energies do not exceed what the node drew. B
    outlives A, so its share counts A's CPU time read while A ran (the readings before A ended), not only
    what is still there at B's end."""
    scripts = {}
    for name, burners, tail_s in (("a", 2, 1), ("b", 1, 9)):
        scripts[name] = tmp_path / f"{name}.sh"
        scripts[name].write_text(
            f"#!/bin/sh\nsleep {LEAD_S}\n" + " & ".join([BURN] * burners) + f" & wait\nsleep {tail_s}\n"
        )
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_PROFILER__POWERCAP_ROOT={fake_powercap}") as spool:
        ids = {
            name: slurm_box.sbatch(
                "-J",
                f"cpushare-it-{name}",
                "-p",
                "cpu",
                "-w",
                NODE,
                "-n1",
                "-c2",
                "-H",  # released together below, so both start in one scheduling pass
                "--energy-profile=all",
                "-o",
                str(tmp_path / f"{name}.out"),
                str(script),
            )
            for name, script in scripts.items()
        }
        try:
            slurm_box.run(["scontrol", "release", ",".join(ids.values())])
            for job in ids.values():
                assert slurm_box.wait_job(job, timeout_s=180) == "COMPLETED"
        finally:
            slurm_box.run(["scancel", *ids.values()], check=False)
    records = {}
    for name, job in ids.items():
        path = spool / job / "step-batch.json"
        wait_for(path.exists, 60, f"{path}")
        (node,) = json.loads(path.read_text())["nodes"]
        records[name] = {d["name"]: d for d in node["devices"]}
        records[name]["_window"] = (node["start_time"], node["start_time"] + node["duration_s"])
    (a_lo, a_hi), (b_lo, b_hi) = records["a"].pop("_window"), records["b"].pop("_window")
    # released together, they start in one scheduling pass or the next (3 s apart on a loaded host): what
    # the shares need is that the burns overlap, each LEAD_S after its start for BURN_S
    overlap_s = min(a_lo, b_lo) + LEAD_S + BURN_S - (max(a_lo, b_lo) + LEAD_S)
    assert overlap_s >= 2.0, (
        f"the two jobs' burns overlap {overlap_s:.1f} s (starts {b_lo - a_lo:+.1f} s apart)"
    )
    assert a_hi < b_hi - 4, "A did not end well before B"
    a, b = records["a"], records["b"]
    for zone in ("package-0", "core-0", "dram-0"):
        assert a[zone]["apportioned"] == b[zone]["apportioned"] == "cpu-time", (zone, a[zone], b[zone])
        for dev in (a[zone], b[zone]):
            assert dev["energy_j"] == pytest.approx(dev["share"] * dev["whole_gpu_energy_j"]), dev
    print(f"\nCPU-time shares: A {a['package-0']['share']:.3f}, B {b['package-0']['share']:.3f}")
    assert 0.1 < b["package-0"]["share"] < 0.9  # 2:1 burners, but the host's cores are shared with others
    assert a["package-0"]["share"] + b["package-0"]["share"] == pytest.approx(1.0, abs=0.05)
    # what the node drew over the union of the windows, against what the two jobs are billed
    node_j = 60.0 * (max(a_hi, b_hi) - min(a_lo, b_lo))
    billed_j = a["package-0"]["energy_j"] + b["package-0"]["energy_j"]
    assert billed_j <= node_j * 1.02
