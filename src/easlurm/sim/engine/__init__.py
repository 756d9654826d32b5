"""The discrete-event core: SimPy processes for arrivals, the periodic scheduler and job runs."""

from easlurm.sim.engine.core import JobRecord, SimConfig, Simulator
from easlurm.sim.engine.ledger import PowerLedger
from easlurm.sim.engine.truth import Truth

__all__ = ["JobRecord", "PowerLedger", "SimConfig", "Simulator", "Truth"]
