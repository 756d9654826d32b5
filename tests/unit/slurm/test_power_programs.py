"""`easlurm power suspend|resume HOSTLIST`, the programs a site sets as SuspendProgram/ResumeProgram: the
hostlist becomes nodes, each node's site command runs as an argv (no shell), every node's event is logged
with whether its command succeeded, and a failure exits 1 naming the node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easlurm.cli import main
from easlurm.errors import ConfigError, SlurmError
from easlurm.slurm.power_save import expand_nodes, node_argv, run_for_nodes


def test_hostlists_expand_in_order_without_duplicates() -> None:
    assert expand_nodes(["h100-[1-2]", "cpu-1,h100-2"]) == ["h100-1", "h100-2", "cpu-1"]
    assert expand_nodes(["n[08-10]"]) == ["n08", "n09", "n10"]


def test_a_hostlist_the_pure_expander_cannot_read_goes_to_scontrol() -> None:
    """Two bracket groups ("r[1-2]n[1-2]") are Slurm's to expand (`scontrol show hostnames`)."""
    asked = []

    def scontrol(text: str) -> str:
        asked.append(text)
        return "r1n1\nr1n2\nr2n1\nr2n2\n"

    assert expand_nodes(["r[1-2]n[1-2]"], scontrol) == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert asked == ["r[1-2]n[1-2]"]


def test_an_unreadable_hostlist_is_one_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"hostlist 'h\[1-': "):
        expand_nodes(["h[1-"])

    def failing(text: str) -> str:
        raise SlurmError("scontrol failed: Invalid hostlist")

    with pytest.raises(
        ConfigError, match=r"hostlist 'r\[1-2\]n\[1-2\]': cannot expand it .*Invalid hostlist"
    ):
        expand_nodes(["r[1-2]n[1-2]"], failing)
    with pytest.raises(ConfigError, match="no node"):
        expand_nodes([""])


def test_each_node_gets_its_own_argv_and_a_failure_names_the_node() -> None:
    ran: list[list[str]] = []

    def runner(argv: list[str], timeout_s: float) -> tuple[int, str]:
        ran.append(argv)
        return (3, "BMC unreachable\n") if "n2-bmc" in argv else (0, "")

    template = ["ipmitool", "-H", "{node}-bmc", "chassis", "power", "off"]
    assert node_argv(template, "n1") == ["ipmitool", "-H", "n1-bmc", "chassis", "power", "off"]
    actions = run_for_nodes(["n1", "n2", "n3"], template, 5.0, runner, clock=lambda: 100.0)
    assert sorted(ran) == sorted(node_argv(template, n) for n in ("n1", "n2", "n3"))
    assert [(a.node, a.ok, a.time_s) for a in actions] == [
        ("n1", True, 100.0),
        ("n2", False, 100.0),
        ("n3", True, 100.0),
    ]
    assert actions[1].error == "ipmitool -H n2-bmc chassis power off exited 3: BMC unreachable"


def test_a_command_that_hangs_or_cannot_run_fails_its_node_only() -> None:
    def hangs(argv: list[str], timeout_s: float) -> tuple[int, str]:
        raise subprocess.TimeoutExpired(argv, timeout_s)

    (a,) = run_for_nodes(["n1"], ["wake", "{node}"], 2.0, hangs)
    assert not a.ok and a.error == "wake n1: no answer within 2 s"
    (b,) = run_for_nodes(["n1"], ["/nonexistent/wake", "{node}"], 2.0)
    assert not b.ok and "cannot run" in (b.error or "")


def test_without_a_command_every_node_is_logged_as_done() -> None:
    actions = run_for_nodes(["n1", "n2"], None, 1.0, clock=lambda: 5.0)
    assert [(a.node, a.ok, a.error) for a in actions] == [("n1", True, None), ("n2", True, None)]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site command that records its node (and fails for node `bad`), and a state log, by environment."""
    for name in [n for n in os.environ if n.startswith("EASLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    script = tmp_path / "bmc.py"
    script.write_text(
        "import sys\n"
        f"open({str(tmp_path / 'ran')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "sys.exit(4 if sys.argv[-1] == 'bad' else 0)\n"
    )
    monkeypatch.setenv("EASLURM_POWER__STATE_LOG", str(tmp_path / "power" / "state.jsonl"))
    for event in ("suspend", "resume"):
        monkeypatch.setenv(
            f"EASLURM_POWER__{event.upper()}_COMMAND",
            json.dumps([sys.executable, str(script), event, "{node}"]),
        )
    return tmp_path


def _log(tmp: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp / "power" / "state.jsonl").read_text().splitlines()]


def test_suspend_runs_the_site_command_per_node_and_logs_each(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["power", "suspend", "gpu-[1-2]"]) == 0
    assert sorted((site / "ran").read_text().splitlines()) == ["suspend gpu-1", "suspend gpu-2"]
    log = _log(site)
    assert [(e["node"], e["event"], e["ok"]) for e in log] == [
        ("gpu-1", "suspend", True),
        ("gpu-2", "suspend", True),
    ]
    assert all(str(e["time"]).endswith("+00:00") and "error" not in e for e in log)
    assert capsys.readouterr().err == ""


def test_a_failed_node_exits_1_naming_it_and_is_logged_not_ok(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["power", "resume", "gpu-1,bad"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("easlurm: error: power resume bad: ") and "exited 4" in err[0]
    assert [(e["node"], e["ok"]) for e in _log(site)] == [("gpu-1", True), ("bad", False)]
    assert "exited 4" in str(_log(site)[1]["error"])


def test_an_unwritable_log_still_powers_the_nodes_and_says_so(
    site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (site / "blocker").write_text("a file where the log's directory should be\n")
    monkeypatch.setenv("EASLURM_POWER__STATE_LOG", str(site / "blocker" / "state.jsonl"))
    assert main(["power", "suspend", "gpu-1"]) == 2
    assert (site / "ran").read_text() == "suspend gpu-1\n"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "power.state_log" in err[0] and "blocker" in err[0]


def test_the_log_defaults_to_the_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No power.state_log: `<spank.spool>/power/state.jsonl`; no command: the events alone."""
    for name in [n for n in os.environ if n.startswith("EASLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("EASLURM_SPANK__SPOOL", str(tmp_path / "spool"))
    assert main(["power", "suspend", "n1"]) == 0
    lines = (tmp_path / "spool" / "power" / "state.jsonl").read_text().splitlines()
    assert [json.loads(x)["node"] for x in lines] == ["n1"]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("ipmitool chassis power off", "must name the node as {node}"),
        ("wake {host}", "unknown field(s) {host}"),
        ('wake "{node}', "cannot split"),
        ("[]", "the command is empty"),
        ("[1, 2]", "expected a command"),
    ],
)
def test_a_bad_command_setting_is_one_line_and_runs_nothing(
    site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, says: str
) -> None:
    monkeypatch.setenv("EASLURM_POWER__SUSPEND_COMMAND", value)
    assert main(["power", "suspend", "gpu-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "power.suspend_command" in err[0] and says in err[0], err
    assert not (site / "ran").exists() and not (site / "power").exists()
