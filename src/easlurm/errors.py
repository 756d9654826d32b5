"""Project exceptions: one root so the CLI can turn any of them into one line on stderr."""

from __future__ import annotations


class EaslurmError(Exception):
    """Root of every error easlurm raises on purpose; the CLI prints it as one line and exits 2."""


class ConfigError(EaslurmError):
    """A configuration file, option string or YAML document is malformed; the message names file and field."""


class SensorError(EaslurmError):
    """A sensor could not be read (missing, unsupported, permission denied, device lost)."""


class SlurmError(EaslurmError):
    """A Slurm command failed or Slurm is unreachable; the message carries the command's stderr."""


class ModelError(EaslurmError):
    """The oracle was asked about an unknown model, GPU or an impossible placement."""


class TraceError(EaslurmError):
    """A workload trace is malformed; the message names file, line and field."""
