"""Energy accounting of Slurm jobs: the node agent, step records, publication into AdminComment, sacct decoding."""
