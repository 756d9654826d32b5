"""The box does what docs/spank.md asks of a site for GPU power caps: `easlurm power restore-caps` with
the agents' NVML (the checkout's fake one, its limits in the box), before the slurmds start and from a
timer-like loop process that is no daemon Slurm needs (a box started without it is still up)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from easlurm_fakes import fake_nvml

from easlurm.energy.power_limits import Ledger, StepRef, apply_limit, ledger_path, this_host
from easlurm.slurm.box import CAP_CHECK, SlurmBox


def test_the_boxs_cap_check_restores_a_crashed_steps_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = SlurmBox(root=tmp_path / "box")
    env = box.cap_check_env()
    assert env["EASLURM_PROFILER__NVML_MODULE"] == "easlurm_fakes.fake_nvml"
    limits = box.paths.fake_nvml_limits
    limits.parent.mkdir(parents=True)
    box.paths.spool.mkdir(parents=True)
    for key in ("EASLURM_FAKE_NVML_COUNT", "EASLURM_FAKE_NVML_LIMITS_FILE"):
        monkeypatch.setenv(key, env[key])
    fake_nvml.nvmlInit()
    try:
        dead = Ledger(9, "h100-1", this_host(), [StepRef(2**22 + 3, "batch")])
        apply_limit(fake_nvml, [0, 7], 300.0, ledger_path(box.paths.spool, 9, "h100-1"), dead)
    finally:
        fake_nvml.nvmlShutdown()
    assert json.loads(limits.read_text()) == {"0": 300_000, "7": 300_000}
    res = subprocess.run(
        box.cap_check_argv(),
        env={**os.environ, **box.env, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == f"restored {ledger_path(box.paths.spool, 9, 'h100-1')}\n"
    assert json.loads(limits.read_text()) == {"0": 700_000, "7": 700_000}


def test_the_cap_check_is_listed_but_not_needed_for_the_box_to_be_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = SlurmBox(root=tmp_path / "box")
    monkeypatch.setattr(box, "pid_of", lambda name: None if name == CAP_CHECK else 4242)
    assert box.status()[CAP_CHECK] is None and CAP_CHECK not in box.daemons()
    assert box.is_up()
