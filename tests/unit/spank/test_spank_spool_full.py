"""A full spool (ENOSPC/EDQUOT on write): one log line, no traceback, and a record flagged `spool-full`
that still carries the step's energy (published from node 0's memory)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import FakeClient, ctx, run_node
from agent_fakes import spool as spool

import easlurm.accounting.agent as agent_mod
from easlurm.accounting.sacct_rows import build_rows
from easlurm.accounting.step_record import decode_admin_comment


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_spool_is_one_log_line_and_a_flagged_record(
    spool: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    def full(path: Path, doc: dict[str, Any], gid: int) -> None:
        raise OSError(code, "No space left on device")

    monkeypatch.setattr(agent_mod, "write_record", full)
    client = FakeClient()
    with caplog.at_level(logging.WARNING):
        step = run_node(ctx(spool, nnodes=1), client)
    assert step is not None and step.spool_error is not None and "spool full" in step.spool_error
    published = decode_admin_comment(client.published[-1][2])
    assert published[0].spool_error and published[0].gpu_energy_j == pytest.approx(2 * 600.0)
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in caplog.records)
    rows = [
        {"JobIDRaw": "42", "JobID": "42", "State": "COMPLETED", "AdminComment": client.published[-1][2]},
        {"JobIDRaw": "42.0", "JobID": "42.0", "State": "COMPLETED", "AdminComment": ""},
    ]
    out, _ = build_rows(rows)
    assert "spool-full" in out[1]["EnergyFlags"].split(",") and out[1]["GPUEnergy"] == pytest.approx(1200.0)


def test_the_agent_log_in_a_full_spool_costs_one_line_not_a_traceback(
    spool: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: logging printed `--- Logging error ---` and a traceback (about 12 lines) per message."""
    c = ctx(spool, nnodes=1)
    root = logging.getLogger()
    before = list(root.handlers)
    agent_mod.keep_log_in_spool(c)
    [handler] = [h for h in root.handlers if h not in before]

    def no_space() -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(handler, "_open", no_space)
    try:
        log = logging.getLogger("easlurm.accounting.agent")
        log.error("first message")
        log.error("second message")
    finally:
        root.removeHandler(handler)
    err = capsys.readouterr().err
    lines = [
        ln for ln in err.splitlines() if "spool full" in ln or "Traceback" in ln or "Logging error" in ln
    ]
    assert len(lines) == 1 and "spool full" in lines[0] and str(c.log_file) in lines[0], err
