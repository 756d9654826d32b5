"""`easlurm sim ...`: the simulator's subcommands, each imported only when run."""

from __future__ import annotations

import click

from easlurm.cli import LazyGroup

#: name -> ("module:attribute", one-line help); a command is listed only once it works.
SIM_COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "easlurm.sim.run_cli:run_cmd",
        "Simulate one policy on one scenario and seed; print its metrics.",
    ),
}


@click.group("sim", cls=LazyGroup, lazy_commands=SIM_COMMANDS)
def sim_group() -> None:
    """Simulate scheduling policies on a virtual GPU cluster (SimPy)."""
