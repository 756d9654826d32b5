"""Co-location on Slurm 22.05 gres/shard: which GPU a shard request lands on, and how to aim it.

Verified on the local cluster (docs/colocation-live.md): a job's shards all come from one GPU; Slurm
gives a `shard:N` request the lowest-index GPU of the node with N shards free (first fit), never a GPU
held by a `gpu` job, and a `gpu` job never a GPU holding shards. A pending job cannot be switched
between `gpu` and `shard` by `scontrol update` ("Invalid generic resource"), so a shareable job is
submitted with `--gres=shard:1` and stays on shards.

The daemon starts a shareable job alone with all but one shard of a GPU (S-1 of S, S >= 3): first fit
then puts it on a GPU with at least S-1 shards free, never beside another lone job (which leaves 1
free). A partner joins with the last shard, which first fit gives to the lowest-index GPU with a free
shard: the join is issued only when that is the partner's GPU. Pairs are read back from where Slurm
actually put the jobs (`colocations`), never from the decision.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from easlurm.priority.snapshot import StartJob
from easlurm.slurm.hostlist import first_node
from easlurm.slurm.job_updates import Placement
from easlurm.slurm.sched_client import SlurmJob, SlurmNode

log = logging.getLogger(__name__)

#: Below this many shards per GPU a lone start cannot be told apart from a join (see the docstring).
MIN_SHARDS_PER_GPU = 3


def sharing_mode(node: SlurmNode) -> str:
    """NodeState.sharing of a node: "time-slice" when its GPUs are also offered as enough shards."""
    return "time-slice" if node.shards_per_gpu >= MIN_SHARDS_PER_GPU else "none"


def gpu_use(jobs: Iterable[SlurmJob], node: str) -> tuple[set[int], dict[int, int]]:
    """(GPUs held whole by `gpu` jobs, shards allocated per GPU index) on `node` from running jobs."""
    whole: set[int] = set()
    shards: dict[int, int] = {}
    for job in jobs:
        if not job.running or not job.gpu_indices or first_node(job.nodes) != node or job.node_count != 1:
            continue
        if job.shards:
            for idx in job.gpu_indices:
                shards[idx] = shards.get(idx, 0) + job.shards
        else:
            whole.update(job.gpu_indices)
    return whole, shards


def first_fit(
    total_gpus: int, per_gpu: int, whole: set[int], shards: Mapping[int, int], want: int
) -> int | None:
    """The GPU index Slurm 22.05 gives a `shard:want` request on the node (None: it must wait)."""
    for idx in range(total_gpus):
        if idx not in whole and per_gpu - shards.get(idx, 0) >= want:
            return idx
    return None


def share_placement(
    job: SlurmJob, start: StartJob, node: SlurmNode | None, jobs: Mapping[str, SlurmJob]
) -> Placement | None:
    """The placement that starts a shareable job as `start` says (alone, or beside `colocate_with`)
    on start.node; empty when the job already asks for that; None when Slurm would not put it there."""
    if node is None or node.shards_per_gpu < MIN_SHARDS_PER_GPU:
        log.info("job %s: node %s offers no shards to share a GPU", start.job_id, start.node)
        return None
    per_gpu = node.shards_per_gpu
    whole, shards = gpu_use(jobs.values(), node.name)
    if start.colocate_with is None:
        want = per_gpu - 1
        target = first_fit(node.total_gpus, per_gpu, whole, shards, want)
        if target is None:
            log.info("job %s: no GPU of %s has %d shards free", start.job_id, node.name, want)
            return None
    else:
        partner = jobs.get(start.colocate_with)
        if partner is None or not partner.running or first_node(partner.nodes) != node.name:
            log.info("job %s: partner %s is not running on %s", start.job_id, start.colocate_with, node.name)
            return None
        if not partner.shards or len(partner.gpu_indices) != 1:
            log.info("job %s: partner %s does not hold shards of one GPU", start.job_id, start.colocate_with)
            return None
        gpu = partner.gpu_indices[0]
        want = per_gpu - shards.get(gpu, 0)
        target = first_fit(node.total_gpus, per_gpu, whole, shards, want) if want > 0 else None
        if target != gpu:
            log.info(
                "job %s: not joining %s: Slurm would put %d shard(s) on GPU %s of %s, not on GPU %d",
                start.job_id,
                start.colocate_with,
                want,
                target,
                node.name,
                gpu,
            )
            return None
    regres = job.shards != want or job.n_gpus > 0
    return Placement(
        num_nodes=1 if job.node_count != 1 else None,
        gres_name="shard" if regres else None,
        gres_count=want,  # 22.05's form (`gres:shard:N`): sharing is verified there
        nodes=(node.name,) if job.required_nodes != node.name else (),
    )


def colocations(jobs: Iterable[SlurmJob]) -> dict[str, str]:
    """Running job -> the running job it shares a GPU with (both on shards of the same GPU of the same
    node, as Slurm allocated them). A GPU holding three or more jobs pairs none of them."""
    by_gpu: dict[tuple[str, int], list[str]] = {}
    for job in jobs:
        if job.running and job.shards and len(job.gpu_indices) == 1 and job.node_count == 1:
            by_gpu.setdefault((first_node(job.nodes), job.gpu_indices[0]), []).append(job.job_id)
    out: dict[str, str] = {}
    for ids in by_gpu.values():
        if len(ids) == 2:
            out[ids[0]], out[ids[1]] = ids[1], ids[0]
    return out
