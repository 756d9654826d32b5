"""The power-state log over a period: each node's time powered down (a succeeded suspend to the next
resume, clipped to the period), its power cycles and the shortest gap between two, and the energy drawn
off (off_w x off time) and avoided against idling ((idle_w - off_w) x off time)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from easlurm.accounting.power_state import (
    NodeDraw,
    PowerEvent,
    StateEvent,
    append_events,
    node_draw,
    node_power,
    parse_period_time,
    read_events,
    totals,
)
from easlurm.cli import main
from easlurm.errors import ConfigError
from easlurm.model.node_power import default_idle_w, default_off_w

S, R = PowerEvent.SUSPEND, PowerEvent.RESUME
DRAW = {"n1": NodeDraw(1000.0, 30.0), "n2": NodeDraw(200.0, 15.0)}


def ev(t: float, node: str, kind: PowerEvent, ok: bool = True) -> StateEvent:
    return StateEvent(t, node, kind, ok, None if ok else "failed")


def test_off_time_runs_from_suspend_to_resume_and_energies_follow() -> None:
    """n1 off 100..400 and 1000..1100 (two cycles 900 s apart): 400 s off, 30 W x 400 s drawn off,
    (1000 - 30) W x 400 s avoided."""
    events = [ev(100, "n1", S), ev(400, "n1", R), ev(1000, "n1", S), ev(1100, "n1", R)]
    (row,) = node_power(events, 0, 2000, DRAW)
    assert (row.node, row.off_s, row.cycles, row.min_cycle_gap_s, row.off_at_end) == (
        "n1",
        400,
        2,
        900,
        False,
    )
    assert row.off_energy_j == 30 * 400
    assert row.avoided_energy_j == 970 * 400


def test_the_period_clips_intervals_and_an_open_one_lasts_to_its_end() -> None:
    """A node powered down before the period and one still down at its end count only their share."""
    events = [ev(100, "n1", S), ev(700, "n1", R), ev(800, "n2", S)]
    rows = {r.node: r for r in node_power(events, 500, 1000, DRAW)}
    assert rows["n1"].off_s == 200 and rows["n1"].cycles == 0  # its power-down was before the period
    assert rows["n2"].off_s == 200 and rows["n2"].cycles == 1 and rows["n2"].off_at_end
    assert node_power(events, 2000, 3000, DRAW)[0].node == "n2"  # down the whole period
    assert node_power(events, 2000, 3000, DRAW)[0].off_s == 1000
    assert node_power(events, 0, 50, DRAW) == []  # nothing yet


def test_a_repeated_suspend_is_no_new_cycle_and_failures_are_counted() -> None:
    """Slurm repeats a power-down request for a node that is down already: one cycle, one interval. A
    suspend whose command failed powers nothing down; a resume ends the interval whether or not its
    command succeeded (Slurm counts the node as powering up from then)."""
    events = [
        ev(0, "n1", S, ok=False),
        ev(10, "n1", S),
        ev(50, "n1", S),
        ev(100, "n1", R, ok=False),
        ev(200, "n1", S),
        ev(260, "n1", R),
    ]
    (row,) = node_power(events, 0, 1000, DRAW)
    assert (row.off_s, row.cycles, row.min_cycle_gap_s, row.failures) == (150, 2, 190, 2)


def test_min_gap_counts_the_power_down_just_before_the_period() -> None:
    events = [ev(100, "n1", S), ev(150, "n1", R), ev(160, "n1", S), ev(170, "n1", R)]
    (row,) = node_power(events, 155, 1000, DRAW)
    assert (row.cycles, row.min_cycle_gap_s, row.off_s) == (1, 60, 10)


def test_unknown_draw_leaves_energies_blank_and_totals_say_so() -> None:
    events = [ev(0, "n1", S), ev(100, "n1", R), ev(0, "x9", S), ev(50, "x9", R)]
    rows = node_power(events, 0, 200, {"n1": DRAW["n1"]})
    x9 = next(r for r in rows if r.node == "x9")
    assert x9.off_s == 50 and x9.off_energy_j is None and x9.avoided_energy_j is None
    t = totals(rows)
    assert t["off_s"] == 150 and t["cycles"] == 2 and t["off_energy_j"] is None
    assert totals(rows[:1])["off_energy_j"] == 3000


def test_a_period_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ConfigError, match="ends before it starts"):
        node_power([], 100, 100, DRAW)


def test_default_draw_is_the_simulators_base_power_plus_the_idle_gpus() -> None:
    """No power.node_*_w: model/node_power.py's estimates by GPUs per node, and the GPUs' idle draw."""
    draw = node_draw({"g8": (8, 70.0), "cpu": (0, None)}, None, None, "power")
    assert draw["g8"] == NodeDraw(default_idle_w(8) + 8 * 70.0, default_off_w(8))
    assert draw["cpu"] == NodeDraw(default_idle_w(0), default_off_w(0))
    assert node_draw({"g8": (8, 70.0)}, 500.0, None, "power")["g8"] == NodeDraw(500.0, default_off_w(8))
    assert node_draw({"tiny": (0, None)}, 10.0, None, "power")["tiny"] == NodeDraw(10.0, 10.0)
    with pytest.raises(ConfigError, match=r"power.node_off_w .* more than node g8.s idle draw"):
        node_draw({"g8": (8, 70.0)}, 100.0, 200.0, "power")


def test_log_lines_round_trip_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "d" / "state.jsonl"
    t = datetime(2026, 11, 26, 14, 0, 0, 250000, tzinfo=UTC).timestamp()
    append_events(log, [StateEvent(t, "n1", S, True), StateEvent(t + 1, "n1", R, False, "exited 1")])
    lines = log.read_text().splitlines()
    assert json.loads(lines[0]) == {
        "time": "2026-11-26T14:00:00.250000+00:00",
        "node": "n1",
        "event": "suspend",
        "ok": True,
    }
    assert json.loads(lines[1])["error"] == "exited 1"
    with log.open("a") as f:
        f.write('{"time": "2026-11-26T14:0\n{"node": "n2"}\n')
    events, bad = read_events(log)
    assert bad == 2 and [(e.time_s, e.event, e.ok) for e in events] == [(t, S, True), (t + 1, R, False)]
    assert read_events(tmp_path / "none.jsonl") == ([], 0)


def test_period_times_read_as_sacct_does() -> None:
    now = datetime(2026, 11, 26, 12, 0, 0).timestamp()
    assert parse_period_time("now", now, "-S") == now
    assert parse_period_time("now-7days", now, "-S") == now - 7 * 86400
    assert parse_period_time("now-90minutes", now, "-S") == now - 5400
    assert parse_period_time("now-30", now, "-S") == now - 30
    assert parse_period_time("today", now, "-S") == datetime(2026, 11, 26).timestamp()
    assert parse_period_time("2026-11-20", now, "-S") == datetime(2026, 11, 20).timestamp()
    assert parse_period_time("2026-11-20T03:04:05", now, "-S") == datetime(2026, 11, 20, 3, 4, 5).timestamp()
    for bad in ("yesterday", "now-3fortnights", ""):
        with pytest.raises(ConfigError, match="-S"):
            parse_period_time(bad, now, "-S")


@pytest.fixture
def logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state log with one node down for an hour yesterday, and site draws set (no Slurm asked)."""
    for name in [n for n in os.environ if n.startswith("EASLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    log = tmp_path / "state.jsonl"
    t = datetime(2026, 1, 10, 12, 0).timestamp()
    append_events(log, [ev(t, "gpu-1", S), ev(t + 3600, "gpu-1", R)])
    monkeypatch.setenv("EASLURM_POWER__STATE_LOG", str(log))
    monkeypatch.setenv("EASLURM_POWER__NODE_IDLE_W", "1000")
    monkeypatch.setenv("EASLURM_POWER__NODE_OFF_W", "25")
    return log


def test_power_report_table_parsable_and_json(logged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-P: plain SI numbers (s, W, J); the table: units a person reads, a total row and the log's path;
    --json: units in the keys and a schema_version."""
    span = ["-S", "2026-01-10", "-E", "2026-01-11"]
    assert main(["power", "report", *span, "-P", "-n"]) == 0
    assert capsys.readouterr().out == "gpu-1|1|3600||1000|25|90000|3510000|0|no\n"
    assert main(["power", "report", *span]) == 0
    out = capsys.readouterr().out
    assert "1 h" in out and "90.00kJ" in out and "3.51MJ" in out and "total" in out and str(logged) in out
    assert main(["power", "report", *span, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["state_log"] == str(logged)
    assert doc["nodes"][0] == {
        "node": "gpu-1",
        "off_s": 3600.0,
        "cycles": 1,
        "min_cycle_gap_s": None,
        "failures": 0,
        "off_at_end": False,
        "idle_w": 1000.0,
        "off_w": 25.0,
        "off_energy_j": 90000.0,
        "avoided_energy_j": 3510000.0,
    }
    assert doc["total"]["avoided_energy_j"] == 3510000.0
    assert main(["power", "report", *span, "-P", "-o", "node,avoidedenergy"]) == 0
    assert capsys.readouterr().out == "Node|AvoidedEnergy\ngpu-1|3510000\n"


def test_report_by_node_is_the_same_table(logged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    span = ["-S", "2026-01-10", "-E", "2026-01-11"]
    assert main(["power", "report", *span, "--json"]) == 0
    power = json.loads(capsys.readouterr().out)
    assert main(["report", "--by", "node", *span, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == power["nodes"]
    assert main(["report", "--by", "node", *span, "--csv"]) == 0
    csv_lines = capsys.readouterr().out.splitlines()
    assert csv_lines[0].startswith("node,off_s,cycles") and csv_lines[1].startswith("gpu-1,3600.0,1,")
    assert main(["report", "--by", "node", *span, "--markdown"]) == 0
    assert "| gpu-1 | 1 | 1 h |" in capsys.readouterr().out
