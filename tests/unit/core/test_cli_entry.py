"""The `easlurm` console entry point: help, version, config, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from easlurm import __version__
from easlurm.cli import COMMANDS, main


def test_help_lists_every_registered_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_every_registered_command_imports_and_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in COMMANDS:
        assert main([name, "--help"]) == 0, name
    assert "Usage" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_config_json_reflects_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sched:\n  policy: hades\n")
    assert main(["-c", str(cfg), "config", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["sched"]["policy"] == "hades"
    assert doc["origin"]["sched.policy"] == str(cfg)
    assert doc["schema_version"] == 1


def test_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sched:\n  policy: [unterminated\n")
    res = subprocess.run(
        [sys.executable, "-m", "easlurm.cli", "-c", str(cfg), "config"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("easlurm: error:") and "c.yaml" in lines[0]


def test_unknown_command_fails() -> None:
    assert main(["no-such-command"]) != 0
