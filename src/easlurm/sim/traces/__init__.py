"""Workload trace readers (sacct -P, sacct --json, SWF, CSV) streaming reader-neutral TraceJob records."""

from easlurm.sim.traces.reader import FORMATS, detect_format, in_submit_order, open_trace
from easlurm.sim.traces.record import TraceJob, TraceStats

__all__ = [
    "FORMATS",
    "TraceJob",
    "TraceStats",
    "detect_format",
    "in_submit_order",
    "open_trace",
]
