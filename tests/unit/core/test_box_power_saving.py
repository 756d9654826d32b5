"""The local cluster runs Slurm's power saving: slurm.conf names its SuspendProgram and ResumeProgram
(wrappers that run `easlurm power suspend|resume` with this Python and the box's settings baked in),
whose per-node commands are `slurm-box node-off|node-on NODE`; SuspendTime is box.suspend_time_s."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from easlurm.config import argv_template
from easlurm.slurm import box_cli
from easlurm.slurm.box import RESUME_TIMEOUT_S, SUSPEND_TIMEOUT_S, SlurmBox, powered_down


def test_slurm_conf_names_the_power_programs_and_timeouts(tmp_path: Path) -> None:
    box = SlurmBox(tmp_path, suspend_time_s=7200)
    conf = box._slurm_conf().splitlines()
    assert f"SuspendProgram={tmp_path}/etc/power-suspend" in conf
    assert f"ResumeProgram={tmp_path}/etc/power-resume" in conf
    assert "SuspendTime=7200" in conf
    assert f"SuspendTimeout={SUSPEND_TIMEOUT_S}" in conf and f"ResumeTimeout={RESUME_TIMEOUT_S}" in conf


def test_the_programs_run_easlurm_with_the_boxs_settings(tmp_path: Path) -> None:
    """Each program is a script slurmctld can run with its own environment: an absolute Python, the
    checkout on PYTHONPATH, SLURM_CONF and the box's easlurm settings, and a settings file whose commands
    stop and start one node's slurmd."""
    box = SlurmBox(tmp_path)
    box.paths.etc.mkdir(parents=True)
    box._write_power_programs()
    for event in ("suspend", "resume"):
        prog = box.paths.power_program(event)
        assert prog.stat().st_mode & 0o111
        exec_line = prog.read_text().splitlines()[-1]
        argv = shlex.split(exec_line)
        assert argv[:3] == ["exec", "/usr/bin/env", "-i"]
        env = dict(a.split("=", 1) for a in argv[3:] if "=" in a and not a.startswith("-"))
        assert env["SLURM_CONF"] == str(box.paths.slurm_conf)
        assert env["EASLURM_BOX__DIR"] == str(tmp_path) and env["EASLURM_SPANK__SPOOL"] == str(
            box.paths.spool
        )
        assert Path(env["PYTHONPATH"], "easlurm", "cli.py").is_file()
        assert argv[-8:] == [
            sys.executable,
            "-m",
            "easlurm.cli",
            "-c",
            str(box.paths.power_config),
            "power",
            event,
            "$@",
        ]
    settings = json.loads(box.paths.power_config.read_text().split("\n", 1)[1])["power"]
    off = argv_template(settings["suspend_command"], "suspend")
    on = argv_template(settings["resume_command"], "resume")
    assert off == [sys.executable, "-m", "easlurm.slurm.box_cli", "node-off", "{node}"]
    assert on[-2:] == ["node-on", "{node}"]


def test_only_an_idle_node_powered_down_counts_as_off() -> None:
    """`up` leaves such a node's slurmd stopped (Slurm resumes it on demand) and waits for the others;
    a DOWN or drained node that happens to be powered down needs its slurmd to return to service."""
    assert powered_down("idle~") and powered_down("idle%")
    assert not powered_down("idle") and not powered_down("idle!") and not powered_down("alloc#")
    assert not powered_down("down~") and not powered_down("drain~") and not powered_down("")


def test_suspend_time_comes_from_the_box_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EASLURM_BOX__DIR", str(tmp_path))
    assert box_cli.make_box().suspend_time_s == 86400
    monkeypatch.setenv("EASLURM_BOX__SUSPEND_TIME_S", "600")
    assert "SuspendTime=600" in box_cli.make_box()._slurm_conf().splitlines()


@pytest.mark.parametrize("argv", [["node-off"], ["node-on"], ["up", "h100-1"]])
def test_node_actions_take_exactly_one_node(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        box_cli.main(argv)
    assert info.value.code == 2
    assert "NODE" in capsys.readouterr().err


def test_an_unknown_node_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EASLURM_BOX__DIR", str(tmp_path))
    assert box_cli.main(["node-off", "gpu-99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown node 'gpu-99'" in err[0]
