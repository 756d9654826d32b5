"""The simulated cluster's nodes and GPU types, from YAML or helpers; power facts come from the catalogue."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.config import read_yaml_file
from easlurm.errors import ConfigError, ModelError
from easlurm.inputs import whole
from easlurm.model.colocation import parse_sharing
from easlurm.model.node_power import PowerSaving, default_idle_w, default_off_w, node_power

#: the most nodes a simulated cluster may have, and GPUs one node may hold: beyond them a cluster (10^11
#: nodes, a 10^9-GPU node) does not fit in memory, and no machine is that large
MAX_NODES = 100_000
MAX_NODE_GPUS = 1024
#: the most GPUs of any simulated cluster (a cluster sized like a trace of one huge MPI job included)
MAX_GPUS = 1_000_000


@dataclass(frozen=True)
class NodeSpec:
    """One node: a name, a catalogue GPU type, a GPU count and how its GPUs may be shared by two jobs
    ("none", "time-slice" or "mps"; docs/colocation.md)."""

    name: str
    gpu_type: str
    n_gpus: int
    sharing: str = "none"
    #: base power when on, GPUs excluded, and draw when powered down (W); None: the estimate for the
    #: node's GPU count (model/node_power.py)
    idle_w: float | None = None
    off_w: float | None = None

    @property
    def base_w(self) -> float:
        """Power (W) of the powered-on node beyond its GPUs."""
        return default_idle_w(self.n_gpus) if self.idle_w is None else self.idle_w

    @property
    def powered_off_w(self) -> float:
        """Power (W) of the powered-down node (its GPUs draw nothing)."""
        return default_off_w(self.n_gpus) if self.off_w is None else self.off_w


@dataclass(frozen=True)
class ClusterSpec:
    """A list of nodes. YAML: `nodes: [{name: a100n, gpu_type: a100-40gb, gpus: 8, count: 1}, ...]`
    (`count` > 1 expands to name0, name1, ...; optional `sharing: none | time-slice | mps`, `idle_w` and
    `off_w`), and optional `power_saving: {suspend_time_s: 600, ...}` (Slurm's power saving)."""

    nodes: tuple[NodeSpec, ...]
    name: str = "cluster"
    power_saving: PowerSaving | None = None

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ConfigError(f"cluster {self.name}: no nodes")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ConfigError(f"cluster {self.name}: duplicate node names")
        if any(n.n_gpus <= 0 for n in self.nodes):
            raise ConfigError(f"cluster {self.name}: every node needs at least one GPU")
        off_w = self.power_saving.off_w if self.power_saving is not None else None
        low = [n.name for n in self.nodes if off_w is not None and off_w > n.base_w]
        if low:
            raise ConfigError(
                f"{self.name}: power_saving.off_w: {off_w:g} W is more than the idle_w of node {low[0]}"
            )

    @property
    def n_gpus(self) -> int:
        return sum(n.n_gpus for n in self.nodes)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes}))

    def gpus_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.gpu_type] = out.get(n.gpu_type, 0) + n.n_gpus
        return out

    def resolved(self, catalogue: Any) -> ClusterSpec:
        """The same cluster with GPU types as catalogue keys ('h100' -> 'h100-sxm'); unknown -> ModelError."""
        nodes = []
        for n in self.nodes:
            if n.gpu_type not in catalogue:
                raise ModelError(
                    f"cluster {self.name}: unknown GPU type {n.gpu_type!r} (known: {', '.join(catalogue.keys())})"
                )
            nodes.append(dataclasses.replace(n, gpu_type=catalogue.resolve(n.gpu_type)))
        return ClusterSpec(tuple(nodes), self.name, self.power_saving)

    @property
    def base_w(self) -> float:
        """Power (W) of every node on and idle beyond its GPUs."""
        return sum(n.base_w for n in self.nodes)

    @classmethod
    def default(cls) -> ClusterSpec:
        """The thesis's cluster (5.5.1): one node of 8 A100-40GB and one of 8 H100-80GB SXM."""
        return cls((NodeSpec("a100n0", "a100-40gb", 8), NodeSpec("h100n0", "h100-sxm", 8)), "thesis-16")

    @classmethod
    def uniform(cls, n_nodes: int, gpus_per_node: int, gpu_type: str, sharing: str = "none") -> ClusterSpec:
        if not 0 < n_nodes <= MAX_NODES:
            raise ConfigError(f"cluster: n_nodes must be between 1 and {MAX_NODES:,}, got {n_nodes}")
        if not gpus_per_node > 0 or n_nodes * gpus_per_node > MAX_GPUS:
            raise ConfigError(
                f"cluster: {n_nodes} x {gpus_per_node} GPUs: need 1 to {MAX_GPUS:,} GPUs in all (the limit)"
            )
        parse_sharing(sharing, "cluster")
        short = gpu_type.split("-")[0]
        nodes = tuple(NodeSpec(f"{short}n{i}", gpu_type, gpus_per_node, sharing) for i in range(n_nodes))
        suffix = "" if sharing == "none" else f"-{sharing}"
        return cls(nodes, f"{n_nodes}x{gpus_per_node}-{gpu_type}{suffix}")

    @classmethod
    def mixed(cls, groups: list[tuple[int, int, str]]) -> ClusterSpec:
        """Several uniform groups: [(n_nodes, gpus_per_node, gpu_type), ...]."""
        nodes: list[NodeSpec] = []
        for n_nodes, per, gpu_type in groups:
            nodes.extend(cls.uniform(n_nodes, per, gpu_type).nodes)
        return cls(tuple(nodes), "+".join(f"{n}x{p}-{t}" for n, p, t in groups))

    @classmethod
    def from_dict(cls, doc: Any, source: str = "cluster") -> ClusterSpec:
        if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
            raise ConfigError(f"{source}: expected a mapping with a 'nodes' list")
        unknown_top = set(doc) - {"name", "nodes", "power_saving"}
        if unknown_top:
            raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown_top)))}")
        nodes: list[NodeSpec] = []
        total = 0
        for i, entry in enumerate(doc["nodes"]):
            where = f"{source}: nodes[{i}]"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: expected a mapping")
            unknown = set(entry) - {"name", "gpu_type", "gpus", "count", "sharing", "idle_w", "off_w"}
            if unknown:
                raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
            if "gpu_type" not in entry or "gpus" not in entry:
                raise ConfigError(f"{where}: needs gpu_type (str), gpus (int), optional count (int)")
            gpu_type = str(entry["gpu_type"])
            # 2.5 GPUs or -3 nodes are refused, never truncated or dropped
            gpus = whole(entry["gpus"], f"{where}.gpus", 1, MAX_NODE_GPUS)
            count = whole(entry.get("count", 1), f"{where}.count", 1, MAX_NODES)
            total += count
            if total > MAX_NODES:
                raise ConfigError(f"{where}.count: the cluster has over {MAX_NODES:,} nodes (the limit)")
            sharing = parse_sharing(entry.get("sharing", "none"), f"{where}.sharing").value
            idle_w, off_w = node_power(entry, gpus, where)
            name = str(entry.get("name", gpu_type.split("-")[0] + "n"))
            if count == 1 and "count" not in entry:
                nodes.append(NodeSpec(name, gpu_type, gpus, sharing, idle_w, off_w))
            else:
                nodes.extend(
                    NodeSpec(f"{name}{j}", gpu_type, gpus, sharing, idle_w, off_w) for j in range(count)
                )
        saving = PowerSaving.from_dict(doc.get("power_saving"), f"{source}: power_saving")
        return cls(tuple(nodes), str(doc.get("name", source)), saving)

    @classmethod
    def from_yaml(cls, path: str | Path) -> ClusterSpec:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"{p}: cluster file not found")
        return cls.from_dict(read_yaml_file(p, "cluster file"), str(p))
