"""The analytical oracle: workloads, hardware catalogue, time/power equations, calibration."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from easlurm.model.hardware import Catalogue, GpuSpec, load_catalogue
from easlurm.model.params import OracleParams, load_params, save_params
from easlurm.model.workload import Optimizer, Precision, Workload
from easlurm.model.zoo import MODEL_NAMES, get_workload

if TYPE_CHECKING:
    from easlurm.model.oracle import NoisyOracle, Oracle, Placements, Prediction

#: The oracle's names, imported on first use (PEP 562): it pulls in numpy, which readers of the hardware
#: catalogue alone (`easlurm sacct` checking records against GPU power) do not need.
_ORACLE_NAMES = frozenset({"NoisyOracle", "Oracle", "Placements", "Prediction"})


def __getattr__(name: str) -> Any:
    if name in _ORACLE_NAMES:
        return getattr(importlib.import_module("easlurm.model.oracle"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MODEL_NAMES",
    "Catalogue",
    "GpuSpec",
    "NoisyOracle",
    "Optimizer",
    "Oracle",
    "OracleParams",
    "Placements",
    "Precision",
    "Prediction",
    "Workload",
    "get_workload",
    "load_catalogue",
    "load_params",
    "save_params",
]
