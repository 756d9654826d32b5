"""Workload trace readers (sacct -P, sacct --json, SWF, CSV) streaming reader-neutral TraceJob records."""

from easlurm.sim.traces.reader import FORMATS, detect_format, in_submit_order, open_trace
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.slurmtime import format_elapsed, parse_elapsed_s, parse_timelimit_s, parse_timestamp_s

__all__ = [
    "FORMATS",
    "TraceJob",
    "TraceStats",
    "detect_format",
    "format_elapsed",
    "in_submit_order",
    "open_trace",
    "parse_elapsed_s",
    "parse_timelimit_s",
    "parse_timestamp_s",
]
