"""What the scheduler daemon changes in a job, as values that compose their own `scontrol update` fields.

The daemon's policies decide a placement, an order, a hold or a release; these values say it in
easlurm's terms and compose Slurm's fields (`TresPerNode=gres:gpu:h100:2`, `StartTime=...`) here, so no
scontrol field is spelled outside `easlurm.slurm`. Each reads as the mapping of its fields (what the
decision log shows); `SchedClient.place/order/hold/release` apply them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from easlurm.slurm.gres import request_prefix
from easlurm.slurm.times import format_timestamp


class _Fields(Mapping[str, str]):
    """A change read as its scontrol fields (empty: nothing to change)."""

    def fields(self) -> dict[str, str]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> str:
        return self.fields()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields())

    def __len__(self) -> int:
        return len(self.fields())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fields()})"


@dataclass(frozen=True, eq=False)
class Placement(_Fields):
    """A pending job's new placement; a None or empty part is left as the job has it.

    `gres_name` ("gpu", "shard") with `gres_count` per node and an optional `gres_type` replaces the job's
    GRES request, spelled in the prefix of `like_request` (the job's own request: `gres:` on 22.05,
    `gres/` on 24.11+, see gres.request_prefix); `nodes` are the required nodes (NodeList)."""

    num_nodes: int | None = None
    gres_name: str | None = None
    gres_count: int = 0
    gres_type: str | None = None
    like_request: str = ""
    nodes: tuple[str, ...] = ()
    partition: str | None = None

    def fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.num_nodes is not None:
            out["NumNodes"] = str(self.num_nodes)
        if self.gres_name is not None:
            typed = f"{self.gres_type}:" if self.gres_type else ""
            out["TresPerNode"] = (
                f"{request_prefix(self.like_request)}{self.gres_name}:{typed}{self.gres_count}"
            )
        if self.nodes:
            out["NodeList"] = ",".join(self.nodes)
        if self.partition is not None:
            out["Partition"] = self.partition
        return out


@dataclass(frozen=True, eq=False)
class Order(_Fields):
    """A pending job's site factor (added unweighted into its multifactor priority)."""

    site_factor: int

    def fields(self) -> dict[str, str]:
        return {"SiteFactor": str(int(self.site_factor))}


@dataclass(frozen=True, eq=False)
class Hold(_Fields):
    """Defer a pending job's eligibility until `until_s` (epoch s; Slurm itself releases it then), with
    `mark` in its AdminComment (the daemon's own record of the hold)."""

    until_s: int
    mark: str

    def fields(self) -> dict[str, str]:
        return {"StartTime": format_timestamp(self.until_s), "AdminComment": self.mark}


@dataclass(frozen=True, eq=False)
class Release(_Fields):
    """Undo a hold: eligible at `begin_s` (the user's own begin time, still ahead) or now; mark cleared."""

    begin_s: int | None = None

    def fields(self) -> dict[str, str]:
        start = "now" if self.begin_s is None else format_timestamp(self.begin_s)
        return {"StartTime": start, "AdminComment": ""}


JobChange = Placement | Order | Hold | Release

__all__ = ["Hold", "JobChange", "Order", "Placement", "Release"]
