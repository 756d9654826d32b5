"""The analytical oracle: workloads, hardware catalogue, time/power equations, calibration."""

from easlurm.model.hardware import Catalogue, GpuSpec, load_catalogue
from easlurm.model.oracle import NoisyOracle, Oracle, Placements, Prediction
from easlurm.model.params import OracleParams, load_params, save_params
from easlurm.model.workload import Optimizer, Precision, Workload
from easlurm.model.zoo import MODEL_NAMES, get_workload

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
