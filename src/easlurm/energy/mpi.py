"""MPI runs: synchronised start/stop, one reader of node-level sensors per node, rank 0 aggregates."""

from __future__ import annotations

import csv
import io
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easlurm.energy import rundir
from easlurm.energy.result import DeviceEnergy, DeviceKind, ProfileResult
from easlurm.errors import ConfigError

log = logging.getLogger(__name__)


class MpiContext:
    """Communicator, node-local sub-communicator (shared memory) and this rank's role on its node."""

    def __init__(self, comm: Any = None) -> None:
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise ConfigError("MPI profiling needs mpi4py (pip install 'easlurm[mpi]')") from exc
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.local = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.is_node_leader = self.local.Get_rank() == 0

    def barrier(self) -> None:
        self.comm.Barrier()

    def node_pids(self, pid: int) -> list[int]:
        """The profiled pids of every rank on this node (the DRAM model covers them all)."""
        return list(self.local.allgather(pid))

    def gather(self, result: ProfileResult, out_dir: Path | None) -> ClusterResult | None:
        """Collective: rank 0 receives every rank's result, merges per node, writes the tables."""
        docs = self.comm.gather(result.to_dict(), root=0)
        if self.rank != 0 or docs is None:
            return None
        cluster = aggregate([ProfileResult.from_dict(d) for d in docs])
        if out_dir is not None:
            try:
                rundir.write_json(out_dir / "cluster.json", cluster.to_dict())
                (out_dir / "nodes.csv").write_text(cluster.to_csv())
            except OSError as exc:
                log.error("cannot write cluster summary in %s: %s", out_dir, exc)
        return cluster


def merge_node(results: list[ProfileResult]) -> ProfileResult:
    """Ranks of one node -> one node result: each device once (GPUs seen by several ranks, node sensors)."""
    seen: dict[str, DeviceEnergy] = {}
    for r in results:
        for d in r.devices:
            if d.name not in seen or (seen[d.name].energy_j is None and d.energy_j is not None):
                seen[d.name] = d
    first = min(results, key=lambda r: r.start_time)
    return ProfileResult(
        host=first.host,
        start_time=first.start_time,
        duration_s=max(r.duration_s for r in results),
        devices=sorted(seen.values(), key=lambda d: (d.kind, d.name)),
        interval_s=first.interval_s,
        sampler_cpu_s=sum(r.sampler_cpu_s or 0.0 for r in results),
    )


@dataclass
class ClusterResult:
    """Per-node results and the totals over nodes (as the thesis's Tables 3.7-3.10)."""

    nodes: list[ProfileResult] = field(default_factory=list)
    ranks: int = 0

    @property
    def total_energy_j(self) -> float | None:
        vals = [n.total_energy_j for n in self.nodes if n.total_energy_j is not None]
        return sum(vals) if vals else None

    @property
    def duration_s(self) -> float:
        return max((n.duration_s for n in self.nodes), default=0.0)

    def gpu_names(self) -> list[str]:
        names = {d.name for n in self.nodes for d in n.devices if d.kind == DeviceKind.GPU.value}
        return sorted(names, key=lambda s: (len(s), s))

    def rows(self) -> list[dict[str, Any]]:
        """One row per node and a Total row: Node, Pkg(J), one column per GPU, RAM(J), Total(J), Time(s)."""
        gpus = self.gpu_names()
        rows = []
        for n in self.nodes:
            row: dict[str, Any] = {"Node": n.host, "Pkg(J)": n.cpu_energy_j}
            for g in gpus:
                row[f"{g}(J)"] = next((d.energy_j for d in n.devices if d.name == g), None)
            row["RAM(J)"] = n.dram_energy_j
            row["Total(J)"] = n.total_energy_j
            row["Time(s)"] = n.duration_s
            rows.append(row)
        total: dict[str, Any] = {"Node": "Total"}
        for key in rows[0] if rows else []:
            if key == "Node":
                continue
            vals = [r[key] for r in rows if r[key] is not None]
            total[key] = (max(vals) if key == "Time(s)" else sum(vals)) if vals else None
        rows.append(total)
        return rows

    def columns(self) -> list[str]:
        return ["Node", "Pkg(J)", *[f"{g}(J)" for g in self.gpu_names()], "RAM(J)", "Total(J)", "Time(s)"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "ranks": self.ranks,
            "nodes": [n.to_dict() for n in self.nodes],
            "total_energy_j": self.total_energy_j,
            "duration_s": self.duration_s,
        }

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns(), lineterminator="\n")
        w.writeheader()
        for row in self.rows():
            w.writerow(
                {
                    k: ("" if v is None else (f"{v:.3f}" if isinstance(v, float) else v))
                    for k, v in row.items()
                }
            )
        return buf.getvalue()


def aggregate(results: list[ProfileResult]) -> ClusterResult:
    by_host: dict[str, list[ProfileResult]] = {}
    for r in results:
        by_host.setdefault(r.host, []).append(r)
    return ClusterResult([merge_node(rs) for rs in by_host.values()], ranks=len(results))


def node_name() -> str:
    return os.uname().nodename
