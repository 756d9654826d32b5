"""`scripts/slurm-box env` exports everything easlurm needs for the box: Slurm's configuration, the
plugin's spool, the scheduler's hint directory under it and a decision log inside the box."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from easlurm.config import load_config
from easlurm.slurm import box_cli

REPO = Path(__file__).resolve().parents[3]


def exported(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert box_cli.main(["env"]) == 0
    out: dict[str, str] = {}
    for line in capsys.readouterr().out.splitlines():
        word, assignment = shlex.split(line)
        assert word == "export"
        key, _, value = assignment.partition("=")
        out[key] = value
    return out


def test_env_points_easlurm_at_the_boxs_spool_and_hint_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EASLURM_BOX__DIR", str(tmp_path / "box"))
    monkeypatch.setenv("EASLURM_BOX__BASE_PORT", "23017")
    env = exported(capsys)
    box = tmp_path / "box"
    assert env["SLURM_CONF"] == str(box / "etc" / "slurm.conf")
    cfg = load_config(environ=env, system_file=tmp_path / "none.yaml")
    assert cfg.get("spank.spool") == str(box / "spool" / "easlurm")
    assert cfg.get("sched.env_dir") == str(box / "spool" / "easlurm" / "sched")
    assert cfg.get("sched.decision_log") == str(box / "log" / "schedd.jsonl")
    assert cfg.get("box.dir") == str(box) and cfg.get("box.base_port") == 23017
    # the same spool as the plugin's: spank/install-box writes spool=$box/spool/easlurm
    assert 'spool="$box/spool/easlurm"' in (REPO / "spank" / "install-box").read_text()


def test_fake_sensors_are_a_box_setting_on_by_default_and_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """box.fake_sensors: on for the box by default (a fake RAPL process among its daemons, the setting
    exported so that spank/install-box follows it); EASLURM_BOX__FAKE_SENSORS=false turns it off."""
    from easlurm.config import DEFAULTS
    from easlurm.slurm.box import FAKE_POWERCAP

    assert DEFAULTS["box"]["fake_sensors"] is True
    assert "fake_sensors" not in DEFAULTS["profiler"] and "fake_sensors" not in DEFAULTS["spank"]
    monkeypatch.setenv("EASLURM_BOX__DIR", str(tmp_path / "box"))
    box = box_cli.make_box()
    assert box.fake_sensors and FAKE_POWERCAP in box.daemons()
    assert exported(capsys)["EASLURM_BOX__FAKE_SENSORS"] == "true"
    monkeypatch.setenv("EASLURM_BOX__FAKE_SENSORS", "false")
    box = box_cli.make_box()
    assert not box.fake_sensors and FAKE_POWERCAP not in box.daemons()
    assert exported(capsys)["EASLURM_BOX__FAKE_SENSORS"] == "false"
    text = (REPO / "spank" / "install-box").read_text()
    assert "EASLURM_BOX__FAKE_SENSORS" in text and "easlurm_fakes.fake_nvml" in text
