"""The one policy call that the scheduler daemon (live) and the simulator (offline) both make."""

from __future__ import annotations

from typing import Any

from easlurm.priority.snapshot import ClusterSnapshot, Decision


def call_policy(policy: Any, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
    """`policy.decide(snapshot, oracle)`, through one function so that the daemon and the SimPy engine
    cannot drift apart: a snapshot the daemon logged (`--log-snapshots`) replays to the same Decision in
    the simulator. Pure: no I/O, no clock; everything the policy sees is in the snapshot."""
    decision: Decision = policy.decide(snapshot, oracle)
    return decision
