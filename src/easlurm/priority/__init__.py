"""Scheduling policies (pure functions of a cluster snapshot) and the daemon that applies them to Slurm."""

from easlurm.priority.policies import POLICY_NAMES, Policy, get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob, RunningJob, StartJob

__all__ = [
    "POLICY_NAMES",
    "ClusterSnapshot",
    "Decision",
    "NodeState",
    "PendingJob",
    "Policy",
    "RunningJob",
    "StartJob",
    "get_policy",
]
