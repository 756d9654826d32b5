"""Scheduling policies (pure functions of a cluster snapshot) and the daemon that applies them to Slurm."""
