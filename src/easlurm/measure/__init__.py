"""Measuring steps on real GPUs (one process, co-runs, Slurm arrays) and tracing torch models. Writes the
measurement format of `easlurm.model.fit`; the oracle and fitting never import this room."""
