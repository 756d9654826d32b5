"""Layered configuration: precedence, validation and one-line errors naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.config import DEFAULTS, load_config
from easlurm.errors import ConfigError


def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path / "none.yaml"


def test_defaults_when_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(environ={}, system_file=_isolated(tmp_path, monkeypatch))
    assert cfg.get("profiler.interval_s") == DEFAULTS["profiler"]["interval_s"]
    assert cfg.origin == {}


def test_layers_later_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "system.yaml"
    system.write_text("profiler:\n  interval_s: 0.5\nsched:\n  policy: hades\n")
    user = tmp_path / "xdg" / "easlurm" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("profiler:\n  interval_s: 0.25\n")
    explicit = tmp_path / "explicit.yaml"
    explicit.write_text("sched:\n  interval_s: 30\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cfg = load_config(
        explicit,
        overrides={"sched": {"policy": "charon", "power_budget_w": None}},
        environ={"EASLURM_SCHED__POWER_BUDGET_W": "4500", "EASLURM_PROFILER__INTERVAL_S": "0.2"},
        system_file=system,
    )
    assert cfg.get("profiler.interval_s") == 0.2  # environment beats the user file
    assert cfg.origin["profiler.interval_s"] == "environment"
    assert cfg.get("sched.interval_s") == 30.0 and isinstance(cfg.get("sched.interval_s"), float)
    assert cfg.get("sched.policy") == "charon"  # flags beat everything
    assert cfg.get("sched.power_budget_w") == 4500  # a None flag does not erase a lower layer


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("profiler: [1, 2\n", "bad.yaml:2: invalid YAML"),
        ("profilr:\n  interval_s: 1\n", "unknown section 'profilr'"),
        ("profiler:\n  intervall: 1\n", "unknown key profiler.intervall"),
        ("profiler:\n  interval_s: fast\n", "profiler.interval_s: expected float"),
        ("- a\n- b\n", "top level must be a mapping"),
    ],
)
def test_bad_file_gives_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, needle: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(bad, environ={}, system_file=_isolated(tmp_path, monkeypatch))
    message = str(info.value)
    assert needle in message
    assert str(bad) in message and "\n" not in message


def test_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "nope.yaml", environ={}, system_file=_isolated(tmp_path, monkeypatch))
