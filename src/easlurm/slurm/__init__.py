"""Everything that runs Slurm commands: the client interface and the local development cluster."""
