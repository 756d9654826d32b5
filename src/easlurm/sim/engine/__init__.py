"""The discrete-event core: SimPy processes for arrivals, the periodic scheduler and job runs."""

from easlurm.sim.engine.core import SimConfig, Simulator
from easlurm.sim.engine.ledger import PowerLedger
from easlurm.sim.engine.records import JobRecord, Run
from easlurm.sim.engine.truth import Truth

__all__ = ["JobRecord", "PowerLedger", "Run", "SimConfig", "Simulator", "Truth"]
