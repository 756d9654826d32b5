"""The queue depth a replay's decisions see is a setting (`sim.queue_depth`, `sim replay --queue-depth`):
it reaches the simulator, the notice of a trace that does not fit names it, and bad values are refused in
one line before any work (docs/replay.md, "Queue depth")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from easlurm.cli import main
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine.pending import DEFAULT_QUEUE_DEPTH
from easlurm.sim.replay import ReplayRequest, replay

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
OVERSIZED = FIX / "sacct_oversized.psv"  # 48 GPUs at once: does not fit 16


class _Capture:
    """Stands in for easlurm.sim.runner.simulate: keeps the keywords it is called with."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, cluster: Any, jobs: Any, policy: Any, **kw: Any) -> dict[str, Any]:
        rows = [{"submit_s": j.submit_s, "start_s": j.submit_s} for j in jobs]
        self.calls.append(kw)
        return {"metrics": {"completed_jobs": float(len(rows))}, "jobs": rows}


def test_the_depth_reaches_each_simulated_run_and_the_notice() -> None:
    notices: list[str] = []
    sim = _Capture()
    replay(
        ReplayRequest(
            OVERSIZED,
            ClusterSpec.default(),
            ["zeus", "pollux"],
            simulate_fn=sim,
            queue_depth=7,
            on_notice=notices.append,
        )
    )
    assert [c["queue_depth"] for c in sim.calls] == [7, 7]
    assert any("each decision sees the first 7 pending jobs" in n for n in notices)
    default = _Capture()
    replay(ReplayRequest(OVERSIZED, ClusterSpec.default(), ["zeus"], simulate_fn=default))
    assert [c["queue_depth"] for c in default.calls] == [DEFAULT_QUEUE_DEPTH]


def test_the_flag_and_the_setting_reach_the_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real replay through the command: the notice names the depth the flag (or, without it, the
    setting) gives."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n  - {name: n, gpu_type: a100-40gb, gpus: 8, count: 2}\n")
    argv = ["sim", "replay", str(OVERSIZED), "--policies", "pollux", "--cluster", str(cluster), "--no-html"]
    assert main([*argv, "--queue-depth", "3", "--out", str(tmp_path / "a")]) == 0
    assert "each decision sees the first 3 pending jobs" in capsys.readouterr().err
    monkeypatch.setenv("EASLURM_SIM__QUEUE_DEPTH", "5")
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    assert "each decision sees the first 5 pending jobs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "env", "named"),
    [
        (["--queue-depth", "0"], None, "--queue-depth"),
        (["--queue-depth", "2.5"], None, "--queue-depth"),
        ([], "0", "sim.queue_depth"),
        ([], "2.5", "sim.queue_depth"),
    ],
)
def test_a_bad_depth_is_one_line_naming_it(
    flag: list[str],
    env: str | None,
    named: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("EASLURM_SIM__QUEUE_DEPTH", env)
    rc = main(["sim", "replay", str(OVERSIZED), "--policies", "zeus", *flag, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and named in err
    assert not (tmp_path / "o" / "report.md").exists()
