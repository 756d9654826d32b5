"""Slurm's SuspendProgram and ResumeProgram: a hostlist argument -> one site power command per node.

slurmctld runs the programs as SlurmUser with the nodes as a hostlist ("h100-[1-2]"); each node's command
is the site's own (IPMI, Redfish, a cloud API), an argv template with `{node}` run without a shell.
A failure is reported per node and never touches jobs: Slurm marks a node that does not come back DOWN
after ResumeTimeout and requeues what waited for it.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from easlurm.errors import ConfigError, EaslurmError
from easlurm.slurm.hostlist import expand_hostlist

log = logging.getLogger(__name__)

#: Power commands run at once at most (a BMC per node, so they are independent; a large hostlist waits).
MAX_PARALLEL = 16


@dataclass(frozen=True)
class NodeAction:
    """One node's power command: when it was started (unix s), whether it succeeded, and why not."""

    node: str
    time_s: float
    ok: bool
    error: str | None = None


def expand_nodes(hostlists: Sequence[str], scontrol: Callable[[str], str] | None = None) -> list[str]:
    """Node names of Slurm hostlist arguments, in order, duplicates dropped. The pure expander reads the
    usual forms ("h100-[1-2,4],cpu-1"); anything else goes to `scontrol` (`scontrol show hostnames`,
    through the Slurm client) when given. ConfigError naming the argument when neither can read it."""
    names: list[str] = []
    for text in hostlists:
        try:
            expanded = _expand_strictly(text)
        except ValueError as exc:
            if scontrol is None:
                raise ConfigError(f"hostlist {text!r}: {exc}") from None
            try:
                expanded = scontrol(text).split()
            except EaslurmError as exc2:
                raise ConfigError(f"hostlist {text!r}: cannot expand it ({exc2})") from None
        names.extend(expanded)
    if not names:
        raise ConfigError(f"no node named in {' '.join(map(repr, hostlists)) or 'the arguments'}")
    return list(dict.fromkeys(names))


#: One hostlist entry the pure expander reads exactly: a name with at most one bracket group of numbers
#: and ascending ranges ("h100-[1-2,4]"); anything else (two groups, a bracket left open) is Slurm's.
_ENTRY = re.compile(r"[A-Za-z0-9._-]*(?:\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\])?[A-Za-z0-9._-]*")
_ENTRIES = re.compile(rf"{_ENTRY.pattern}(?:,{_ENTRY.pattern})*")


def _expand_strictly(text: str) -> list[str]:
    """The pure expander where it is exact: every entry named, every range ascending; ValueError else."""
    if not _ENTRIES.fullmatch(text.strip()):
        raise ValueError("not a plain hostlist")
    names = expand_hostlist(text)
    for lo, hi in re.findall(r"(\d+)-(\d+)", "".join(re.findall(r"\[[^\]]*\]", text))):
        if int(lo) > int(hi):
            raise ValueError(f"range {lo}-{hi} runs backwards")
    return names


def node_argv(template: Sequence[str], node: str) -> list[str]:
    """The command for one node: `{node}` replaced in every argument (the template is checked by the
    configuration: `config.argv_template`)."""
    return [arg.format(node=node) for arg in template]


def run_for_nodes(
    nodes: Sequence[str],
    template: Sequence[str] | None,
    timeout_s: float,
    runner: Callable[[list[str], float], tuple[int, str]] | None = None,
    clock: Callable[[], float] = time.time,
) -> list[NodeAction]:
    """Run the site's command for each node (at most MAX_PARALLEL at once), in node order; without a
    template every node succeeds (the events are logged, nothing is run)."""
    run = runner or _run

    def one(node: str) -> NodeAction:
        started = clock()
        if template is None:
            return NodeAction(node, started, True)
        argv = node_argv(template, node)
        try:
            rc, err = run(argv, timeout_s)
        except subprocess.TimeoutExpired:
            return NodeAction(node, started, False, f"{shlex.join(argv)}: no answer within {timeout_s:g} s")
        except OSError as exc:
            return NodeAction(node, started, False, f"{shlex.join(argv)}: cannot run ({exc.strerror})")
        if rc != 0:
            tail = err.strip().replace("\n", "; ")[-300:]
            return NodeAction(
                node, started, False, f"{shlex.join(argv)} exited {rc}" + (f": {tail}" if tail else "")
            )
        return NodeAction(node, started, True)

    if len(nodes) <= 1:
        return [one(n) for n in nodes]
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(nodes))) as pool:
        return list(pool.map(one, nodes))


def _run(argv: list[str], timeout_s: float) -> tuple[int, str]:
    log.info("$ %s", shlex.join(argv))
    res = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False
    )
    return res.returncode, res.stderr or res.stdout


__all__ = ["MAX_PARALLEL", "NodeAction", "expand_nodes", "node_argv", "run_for_nodes"]
