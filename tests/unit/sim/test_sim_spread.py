"""Jobs spread over several nodes in the simulator: GPUs taken per node, run at the spread's speed."""

from __future__ import annotations

from typing import Any

import pytest

from easlurm.model import Oracle
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine import Truth
from easlurm.sim.job import JobSpec
from easlurm.sim.runner import simulate

TWO_NODES = ClusterSpec.uniform(2, 8, "a100-40gb")


def _job(job_id: str, **kw: Any) -> JobSpec:
    base: dict[str, Any] = dict(
        job_id=job_id,
        user="u0",
        submit_s=0.0,
        model="bert-large",
        total_steps=400,
        batch_options=(64,),
        gpu_options=(4,),
        malleable=False,
    )
    base.update(kw)
    return JobSpec(**base)


class Scripted:
    """Starts each pending job (its requested GPU count) on the allocation given for it, and records the
    free GPUs it saw."""

    name = "scripted"
    time_sensitive = False

    def __init__(self, alloc: dict[str, tuple[tuple[str, int], ...]]) -> None:
        self.alloc = alloc
        self.seen: list[dict[str, int]] = []

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        self.seen.append({n.name: n.free_gpus for n in snapshot.nodes})
        starts = []
        for p in snapshot.pending:
            nodes = self.alloc[p.job_id]
            spread = len(nodes) > 1
            starts.append(
                StartJob(
                    p.job_id,
                    nodes[0][0],
                    p.gpu_options[0],
                    p.batch_options[0],
                    "a100-40gb",
                    nodes=tuple(n for n, _ in nodes) if spread else (),
                    node_gpus=tuple(g for _, g in nodes) if spread else (),
                )
            )
        return Decision(starts=tuple(starts))


def test_a_job_spread_over_two_nodes_finishes_later_than_packed() -> None:
    """Same 4 GPUs, same work: 2+2 over two nodes all-reduces over the network, so the run is longer, by
    exactly the truth's rate at two nodes; while it runs each node has 2 GPUs taken, and all come back."""
    oracle = Oracle()
    packed = simulate(TWO_NODES, [_job("j")], Scripted({"j": (("a100n0", 4),)}), noise_sigma=0.0)
    policy = Scripted({"j": (("a100n0", 2), ("a100n1", 2))})
    spread = simulate(TWO_NODES, [_job("j")], policy, noise_sigma=0.0)
    t_packed, t_spread = packed.jobs[0]["end_s"], spread.jobs[0]["end_s"]
    assert t_spread > t_packed * 1.02
    sps, _ = Truth(oracle).rate(_job("j"), 4, 64, "a100-40gb", None, n_nodes=2)
    assert t_spread == pytest.approx(400 * 64 / sps, rel=1e-9)
    assert (packed.jobs[0]["n_nodes"], spread.jobs[0]["n_nodes"]) == (1, 2)
    assert policy.seen[0] == {"a100n0": 8, "a100n1": 8}
    assert spread.metrics["completed_jobs"] == 1 and spread.metrics["rejected_starts"] == 0


def test_a_spread_start_must_fit_every_node_and_sum_to_its_gpus() -> None:
    """Starts the simulator refuses: a node without the GPUs, and node shares that are not the job's count."""
    too_many = Scripted({"j": (("a100n0", 6), ("a100n1", 10))})
    res = simulate(TWO_NODES, [_job("j", gpu_options=(16,))], too_many, noise_sigma=0.0, horizon_s=5.0)
    assert res.metrics["rejected_starts"] >= 1 and res.jobs[0]["start_s"] is None
    wrong_sum = Scripted({"j": (("a100n0", 2), ("a100n1", 1))})
    res = simulate(TWO_NODES, [_job("j")], wrong_sum, noise_sigma=0.0, horizon_s=5.0)
    assert res.metrics["rejected_starts"] >= 1 and res.jobs[0]["start_s"] is None


@pytest.mark.parametrize("policy", ["pollux", "zeus", "chronos"])
def test_a_job_larger_than_a_node_spans_the_fewest_nodes(policy: str) -> None:
    """16 GPUs on nodes of 8: every policy starts it on both nodes, 8 each, and it completes."""
    res = simulate(TWO_NODES, [_job("big", gpu_options=(16,), batch_options=(256,))], policy, noise_sigma=0.0)
    row = res.jobs[0]
    assert (row["n_gpus"], row["n_nodes"]) == (16, 2)
    assert res.metrics["completed_jobs"] == 1


def _fragmenting_jobs() -> list[JobSpec]:
    """Two rigid 6-GPU jobs take one node each (2 + 2 GPUs left), then a rigid 4-GPU BERT-large arrives."""
    hogs = [
        _job(
            f"hog{i}",
            model="resnet50",
            precision="fp32-strict",
            gpu_options=(6,),
            batch_options=(192,),
            total_steps=3000,
        )
        for i in range(2)
    ]
    return [*hogs, _job("four", submit_s=10.0)]


def test_a_fragmented_cluster_spreads_for_time_and_waits_for_energy() -> None:
    """On 2 + 2 free GPUs a time policy starts the 4-GPU job spread at once; an energy policy, for which
    spreading BERT-large costs, waits until a node frees and starts it packed."""
    fast = {r["job_id"]: r for r in simulate(TWO_NODES, _fragmenting_jobs(), "pollux", noise_sigma=0.0).jobs}
    lean = {r["job_id"]: r for r in simulate(TWO_NODES, _fragmenting_jobs(), "zeus", noise_sigma=0.0).jobs}
    assert {fast["hog0"]["node"], fast["hog1"]["node"]} == {"a100n0", "a100n1"}
    assert fast["four"]["start_s"] == pytest.approx(10.0, abs=1.0) and fast["four"]["n_nodes"] == 2
    first_free = min(lean["hog0"]["end_s"], lean["hog1"]["end_s"])
    assert lean["four"]["start_s"] >= first_free - 1e-6 and lean["four"]["n_nodes"] == 1
    run_fast = fast["four"]["end_s"] - fast["four"]["start_s"]
    run_lean = lean["four"]["end_s"] - lean["four"]["start_s"]
    assert run_fast > run_lean * 1.05  # spread runs slower
    assert fast["four"]["energy_j"] > lean["four"]["energy_j"]


def test_the_fastest_runtime_counts_options_larger_than_a_node() -> None:
    """An urgent job's deadline reference: 16 GPUs on two nodes of 8 is an option, at the rate of two nodes;
    without the node count only options that fit one node are."""
    from easlurm.errors import ModelError

    truth = Truth(Oracle())
    big = _job("big", gpu_options=(16,), batch_options=(256,))
    sps, _ = truth.rate(big, 16, 256, "a100-40gb", None, n_nodes=2)
    fastest = truth.fastest_runtime_s(big, {"a100-40gb": 8}, {"a100-40gb": 2})
    assert fastest == pytest.approx(big.total_samples / sps)
    with pytest.raises(ModelError, match="no option fits"):
        truth.fastest_runtime_s(big, {"a100-40gb": 8})
