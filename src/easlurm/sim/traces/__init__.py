"""Workload trace readers (sacct -P, sacct --json, SWF, CSV) streaming reader-neutral TraceJob records."""

from easlurm.sim.traces.reader import FORMATS, detect_format, in_submit_order, open_trace
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.slurmtime import format_elapsed, parse_elapsed_s, parse_timelimit_s, parse_timestamp_s
from easlurm.sim.traces.tres import gpus_from_gres, gpus_from_tres, parse_tres

__all__ = [
    "FORMATS",
    "TraceJob",
    "TraceStats",
    "detect_format",
    "format_elapsed",
    "gpus_from_gres",
    "gpus_from_tres",
    "in_submit_order",
    "open_trace",
    "parse_elapsed_s",
    "parse_timelimit_s",
    "parse_timestamp_s",
    "parse_tres",
]
