"""Pick the reader for a trace file and put its jobs in submit order with a bounded buffer."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from easlurm.errors import TraceError
from easlurm.sim.traces.csv_trace import CsvReader
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_json import SacctJsonReader
from easlurm.sim.traces.sacct_text import SacctTextReader
from easlurm.sim.traces.source import open_text, strip_suffixes
from easlurm.sim.traces.swf import SwfReader

log = logging.getLogger(__name__)

FORMATS = ("sacct", "sacct-json", "swf", "csv")


def detect_format(path: str | Path) -> str:
    """The format of a trace from its suffix, else from its first non-blank line."""
    suffix = strip_suffixes(path)
    by_suffix = {".json": "sacct-json", ".swf": "swf", ".csv": "csv", ".sacct": "sacct", ".psv": "sacct"}
    if suffix in by_suffix:
        return by_suffix[suffix]
    with open_text(path) as fh:
        for line in fh:
            s = line.strip()
            if not s:
                continue
            if s.startswith("{"):
                return "sacct-json"
            if s.startswith(";"):
                return "swf"
            if "|" in s:
                return "sacct"
            if "," in s and "submit" in s.lower():
                return "csv"
            if len(s.split()) == 18:
                return "swf"
            break
    raise TraceError(f"{path}: cannot tell the trace format (use --format {'/'.join(FORMATS)})")


def open_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    skip_bad: bool = False,
    stats: TraceStats | None = None,
    **options: Any,
) -> Iterable[TraceJob]:
    """A re-iterable-per-call reader of `path` (streaming: each iteration reads the file again).

    `options`: `columns` for header-less sacct dumps, `delimiter` for dumps made with
    `sacct --delimiter=` (implies sacct), `procs_per_gpu` for SWF.
    """
    if not Path(path).is_file():
        raise TraceError(f"{path}: trace file not found")
    delimiter = options.get("delimiter")
    kind = ("sacct" if delimiter else detect_format(path)) if fmt == "auto" else fmt
    stats = stats if stats is not None else TraceStats()
    if kind == "sacct":
        return SacctTextReader(
            path, skip_bad=skip_bad, stats=stats, columns=options.get("columns"), delimiter=delimiter
        )
    if kind == "sacct-json":
        return SacctJsonReader(path, skip_bad=skip_bad, stats=stats)
    if kind == "swf":
        return SwfReader(path, skip_bad=skip_bad, stats=stats, procs_per_gpu=options.get("procs_per_gpu", 1))
    if kind == "csv":
        return CsvReader(path, skip_bad=skip_bad, stats=stats)
    raise TraceError(f"unknown trace format {fmt!r} (known: auto, {', '.join(FORMATS)})")


def in_submit_order(
    jobs: Iterable[TraceJob], window: int = 10_000, stats: TraceStats | None = None
) -> Iterator[TraceJob]:
    """Yield jobs sorted by submit time, holding at most `window` of them.

    sacct lists jobs by id, which is nearly submit order (arrays and requeues are the exceptions).
    A job older than one already yielded (further out of order than the window) is yielded at the
    time of the last yielded job and counted in `stats.reordered`, never dropped.
    """
    heap: list[tuple[float, int, TraceJob]] = []
    last = float("-inf")

    def pop() -> TraceJob:
        nonlocal last
        submit, _, out = heapq.heappop(heap)
        if submit < last:
            if stats is not None:
                stats.reordered += 1
            if stats is None or not stats.quiet:
                log.warning(
                    "%s: submitted %.0f s before a job already replayed; moved to its time",
                    out.source,
                    last - submit,
                )
            return replace(out, submit_s=last)
        last = submit
        return out

    for seq, job in enumerate(jobs):
        heapq.heappush(heap, (job.submit_s, seq, job))
        if len(heap) > window:
            yield pop()
    while heap:
        yield pop()
