"""How an SWF log's processors become GPUs, and the machine its header says the log ran on.

SWF counts processors, not GPUs. Reading a CPU log as GPU jobs invents a GPU cluster and a deep-learning
workload, so the replay takes the processors per GPU only from someone who said it: `--procs-per-gpu`,
the log's own `; ProcsPerGPU:` header (written by easlurm's converters of GPU traces), or a `--cluster`
(the user chose the GPUs; one processor per GPU unless told). The header's `MaxProcs` and `MaxNodes`
(the machine's size) bound a cluster sized like the log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from easlurm.errors import ConfigError
from easlurm.sim.traces.source import open_text

#: The header key that says how many of the log's processors make one GPU (easlurm's converters write 1).
PROCS_PER_GPU_KEY = "ProcsPerGPU"


def read_header(path: str | Path) -> dict[str, str]:
    """The `; Key: value` comments before the log's first record (the first value of a repeated key)."""
    header: dict[str, str] = {}
    with open_text(str(path)) as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            if not line.startswith(";"):
                break
            key, sep, value = line[1:].partition(":")
            key = key.strip()
            if sep and key and " " not in key:
                header.setdefault(key, value.strip())
    return header


def header_int(header: dict[str, str], key: str) -> int | None:
    """A positive whole number of the header (MaxProcs, MaxNodes, ProcsPerGPU); None when absent or not one."""
    try:
        value = float(header.get(key, ""))
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value >= 1 and value == int(value) else None


@dataclass(frozen=True)
class SwfMachine:
    """What the replay assumed of an SWF log: processors per GPU (and who said so), and the machine's size."""

    procs_per_gpu: int
    source: str  # "--procs-per-gpu", "the log's ProcsPerGPU header" or "the default with --cluster"
    max_procs: int | None = None
    max_nodes: int | None = None

    @property
    def max_gpus(self) -> int | None:
        """The machine's GPUs: MaxProcs over the processors per GPU (at least 1)."""
        return None if self.max_procs is None else max(1, self.max_procs // self.procs_per_gpu)

    @property
    def node_gpus(self) -> int | None:
        """GPUs of one of the machine's nodes (MaxProcs / MaxNodes / procs per GPU, at least 1)."""
        if self.max_procs is None or self.max_nodes is None:
            return None
        return max(1, self.max_procs // self.max_nodes // self.procs_per_gpu)

    def sentence(self) -> str:
        """What was assumed, in the words of the report."""
        text = (
            f"the SWF log counts processors, not GPUs: {self.procs_per_gpu} processor"
            f"{'s' if self.procs_per_gpu > 1 else ''} per GPU ({self.source}); every job gets a deep-learning "
            "workload class from its GPUs and run time, so energies are those of that assumed workload"
        )
        if self.max_procs is not None:
            text += f"; the header's machine: MaxProcs {self.max_procs:,} ({self.max_gpus:,} GPUs)" + (
                f" on MaxNodes {self.max_nodes:,}" if self.max_nodes is not None else ""
            )
        return text


def swf_machine(path: str | Path, procs_per_gpu: int | None, cluster_given: bool) -> SwfMachine:
    """The processors per GPU of the SWF log at `path` and its machine's size; ConfigError when nobody
    said how processors become GPUs (no `--procs-per-gpu`, no `; ProcsPerGPU:` header, no `--cluster`)."""
    header = read_header(path)
    max_procs, max_nodes = header_int(header, "MaxProcs"), header_int(header, "MaxNodes")
    if procs_per_gpu is not None:
        return SwfMachine(procs_per_gpu, "--procs-per-gpu", max_procs, max_nodes)
    from_header = header_int(header, PROCS_PER_GPU_KEY)
    if from_header is not None:
        return SwfMachine(from_header, f"the log's {PROCS_PER_GPU_KEY} header", max_procs, max_nodes)
    if cluster_given:
        return SwfMachine(1, "the default with --cluster; --procs-per-gpu to change", max_procs, max_nodes)
    raise ConfigError(
        f"{path}: an SWF log counts processors, not GPUs, and says nothing of GPUs (no ; {PROCS_PER_GPU_KEY}: "
        "header): give --procs-per-gpu N (processors per GPU) or --cluster FILE"
    )
