"""Energy measurement: sensors, sampler threads, integration, run directories (the node agent is in easlurm.accounting)."""

from easlurm.energy.profiler import EnergyProfiler, profile
from easlurm.energy.result import DeviceEnergy, DeviceKind, ProfileResult, RegionEnergy

__all__ = ["DeviceEnergy", "DeviceKind", "EnergyProfiler", "ProfileResult", "RegionEnergy", "profile"]
