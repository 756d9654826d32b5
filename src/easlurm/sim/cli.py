"""`easlurm sim ...`: the simulator's subcommands, each imported only when run."""

from __future__ import annotations

import click

from easlurm.cli import LazyGroup

#: name -> ("module:attribute", one-line help); a command is listed only once it works.
SIM_COMMANDS: dict[str, tuple[str, str]] = {
    "campaign": (
        "easlurm.sim.campaign_cli:campaign_cmd",
        "Run a YAML campaign plan (in parallel or as a Slurm array).",
    ),
    "run": (
        "easlurm.sim.run_cli:run_cmd",
        "Simulate one policy on one scenario and seed; print its metrics.",
    ),
    "report": (
        "easlurm.sim.campaign_cli:report_cmd",
        "Statistics, plots and report.md of a campaign's results.",
    ),
    "doc-figures": (
        "easlurm.docfigs.cli:doc_figures_cmd",
        "Rerun the campaigns behind docs/ and rewrite (or --check) their figures.",
    ),
    "replay": (
        "easlurm.sim.replay_cli:replay_cmd",
        "Replay a sacct/SWF/CSV trace through policies vs. its record.",
    ),
}


@click.group("sim", cls=LazyGroup, lazy_commands=SIM_COMMANDS)
def sim_group() -> None:
    """Simulate scheduling policies on a virtual GPU cluster (SimPy)."""
