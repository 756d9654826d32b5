"""The daemon's Prometheus metrics: no headroom without a budget, the last cycle's time, a listen address."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from easlurm.errors import ConfigError
from easlurm.priority.metrics import Metrics

pytest.importorskip("prometheus_client", reason="needs the [metrics] extra")


def test_no_headroom_gauge_without_a_budget() -> None:
    """Without a budget the headroom is not exported at all (a 0 would read as 'at the budget')."""
    m = Metrics()
    m.observe_state(3, 1200.0, None, None, 0)
    assert "easlurm_schedd_budget_headroom_watts" not in m.text()
    m.observe_state(3, 1200.0, None, 5000.0, 0)
    assert "easlurm_schedd_budget_headroom_watts 3800.0" in m.text()
    m.observe_state(3, 1200.0, None, None, 0)  # the budget was lifted: the gauge goes with it
    assert "easlurm_schedd_budget_headroom_watts" not in m.text()


def test_last_cycle_timestamp() -> None:
    m = Metrics()
    assert "easlurm_schedd_last_cycle_timestamp_seconds 0.0" in m.text()
    m.observe_cycle({"policy": 0.01}, at_s=1_800_000_000.0)
    assert "easlurm_schedd_last_cycle_timestamp_seconds 1.8e+09" in m.text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_served_on_the_given_address() -> None:
    m = Metrics()
    port = _free_port()
    m.serve(port, "127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert b"easlurm_schedd_last_cycle_timestamp_seconds" in resp.read()


def test_bad_metrics_address_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot listen on"):
        Metrics().serve(_free_port(), "no-such-host.invalid")


def test_grafana_dashboard_reads_only_metrics_the_daemon_exports() -> None:
    """docs/grafana-schedd.json parses, and every easlurm_* series its queries name is exported."""
    import json
    import re
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[3] / "docs" / "grafana-schedd.json").read_text())
    m = Metrics()
    m.observe_cycle({"policy": 0.01}, at_s=1.0)
    m.observe_state(1, 100.0, 90.0, 500.0, 1)
    m.count_actions("zeus", ["requeue"])
    m.count_error("slurm")
    exported = set(re.findall(r"^(easlurm_\w+?)(?:\{| )", m.text(), re.M))
    used = {
        name for p in doc["panels"] for t in p["targets"] for name in re.findall(r"easlurm_\w+", t["expr"])
    }
    assert used and used <= exported, used - exported
