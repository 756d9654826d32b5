"""Where the ranks of a data-parallel measurement meet: a free port here, or the first node of a Slurm job.

`python -m easlurm.measure.rendezvous` prints `HOST PORT` for a job script running on the first node
of its allocation (where Slurm runs the batch script): the node's name and a port free on it now."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping

from easlurm.errors import ConfigError
from easlurm.slurm.hostlist import first_node


def free_port(host: str = "") -> int:
    """A TCP port nobody listens on now (the kernel's pick), for one rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


def job_master(env: Mapping[str, str]) -> str:
    """The first node of the job's allocation (SLURM_JOB_NODELIST), where rank 0 runs."""
    host = first_node(env.get("SLURM_JOB_NODELIST", ""))
    if not host:
        raise ConfigError("SLURM_JOB_NODELIST: not set or unreadable (run inside a Slurm job)")
    return host


def master_addr(env: Mapping[str, str], resolves: Callable[[str], bool] = _resolves) -> str:
    """MASTER_ADDR as a rank connects to it: the name the job script chose, or, when that name is not in
    DNS (nodes known to Slurm only by NodeAddr), SLURM_LAUNCH_NODE_IPADDR, the address srun was started
    from: the batch host, which is the same first node."""
    name = env.get("MASTER_ADDR", "")
    if not name:
        raise ConfigError("MASTER_ADDR: not set (the measurement job script exports it)")
    if resolves(name):
        return name
    launch = env.get("SLURM_LAUNCH_NODE_IPADDR", "")
    if launch:
        return launch
    raise ConfigError(f"MASTER_ADDR: {name!r} does not resolve and srun gave no SLURM_LAUNCH_NODE_IPADDR")


def main() -> int:
    try:
        print(job_master(os.environ), free_port())
    except ConfigError as exc:
        print(f"easlurm: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
