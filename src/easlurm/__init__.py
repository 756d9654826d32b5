"""easlurm: energy-aware Slurm (per-step energy accounting, an energy oracle, energy-aware scheduling)."""

from __future__ import annotations

from easlurm.config import Config, load_config
from easlurm.errors import ConfigError, EaslurmError, ModelError, SensorError, SlurmError, TraceError

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "EaslurmError",
    "ModelError",
    "SensorError",
    "SlurmError",
    "TraceError",
    "__version__",
    "load_config",
]
