"""Slurm's power saving in the simulator: each node's power state, its timers and its energy in the ledger.

A node that holds no job for SuspendTime is powered down (SuspendProgram): for SuspendTimeout it still
draws its idle power, then its off power and its GPUs nothing. A job placed on it resumes it
(ResumeProgram): the node boots for `boot_s` at idle power and the job starts once every node it was
placed on is up. Policies keep seeing a powered-down node's GPUs as free (Slurm shows it idle~ and
allocates it). The time spent shutting down and booting is the nodes' "cycle" energy.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from easlurm.model.node_power import PowerSaving
from easlurm.sim.engine.ledger import PowerLedger


class PowerState(enum.Enum):
    ON = "on"
    SUSPENDING = "suspending"
    OFF = "off"
    RESUMING = "resuming"


@dataclass
class NodePower:
    """One node's power facts (W) and state; `on_w` is its whole draw when on without jobs."""

    name: str
    on_w: float
    gpu_idle_w: float  # all its GPUs, idle
    off_w: float
    state: PowerState = PowerState.ON
    generation: int = 0  # bumped whenever the node is taken: a stale suspend timer then does nothing
    ready: simpy.Event | None = None  # fires when a resume is done
    resume_asked: bool = False
    shutdown: simpy.Event | None = None  # the end of its shutdown, while it shuts down
    suspends: list[float] = field(default_factory=list)  # the instants it was powered down
    off_s: float = 0.0
    _off_since_s: float = 0.0
    emptied_s: float | None = None  # since when it holds no job (None: it holds one)

    @property
    def min_cycle_gap_s(self) -> float | None:
        """The shortest time between two consecutive power-downs (None with fewer than two)."""
        gaps = [b - a for a, b in zip(self.suspends, self.suspends[1:], strict=False)]
        return min(gaps) if gaps else None


class PowerSaver:
    """Runs the power states of every node on `env`, moving their draw between the ledger's idle, off and
    cycle parts. `passive(event)` marks a timer that must not keep a run without horizon alive."""

    def __init__(
        self,
        env: simpy.Environment,
        ledger: PowerLedger,
        nodes: Sequence[NodePower],
        saving: PowerSaving | None,
        passive: Callable[[simpy.Event], None],
        active: Callable[[simpy.Event], None],
    ) -> None:
        self.env = env
        self.ledger = ledger
        self.nodes = list(nodes)
        self.saving = saving
        self._passive, self._active = passive, active

    @property
    def enabled(self) -> bool:
        return self.saving is not None

    def start(self) -> None:
        """Every node starts on and empty: its SuspendTime counts from time 0."""
        for i in range(len(self.nodes)):
            self.emptied(i)

    def is_on(self, i: int) -> bool:
        return self.nodes[i].state is PowerState.ON

    def emptied(self, i: int) -> None:
        """Node i holds no job any more (all its GPUs free): power it down after SuspendTime."""
        if self.saving is None:
            return
        node = self.nodes[i]
        node.generation += 1
        node.emptied_s = float(self.env.now)
        gen = node.generation
        timer = self.env.timeout(self.saving.suspend_time_s)
        self._passive(timer)
        timer.callbacks.append(lambda _ev: self._suspend(i, gen))

    def taken(self, i: int) -> None:
        """Node i was given a job: any pending power-down is off."""
        self.nodes[i].generation += 1
        self.nodes[i].emptied_s = None

    def wake(self, i: int) -> simpy.Event | None:
        """None when node i is on; else the event of its resume being done (started here if needed)."""
        node = self.nodes[i]
        if node.state is PowerState.ON:
            return None
        if node.ready is None:
            node.ready = self.env.event()
        if node.state is PowerState.OFF:
            self._resume(i)
        elif node.state is PowerState.SUSPENDING:  # boots as soon as it is off; a job now waits for that
            node.resume_asked = True
            if node.shutdown is not None:
                self._active(node.shutdown)
        return node.ready

    # -- transitions -----------------------------------------------------------------------------
    def _suspend(self, i: int, gen: int) -> None:
        node = self.nodes[i]
        if node.generation != gen or node.state is not PowerState.ON or self.saving is None:
            return
        now = float(self.env.now)
        node.state = PowerState.SUSPENDING
        node.suspends.append(now)
        self.ledger.change(now, 0.0, -node.on_w, 0.0, node.on_w, gpu_delta_w=-node.gpu_idle_w)
        timer = self.env.timeout(self.saving.suspend_timeout_s)
        self._passive(timer)
        node.shutdown = timer
        timer.callbacks.append(lambda _ev: self._powered_off(i))

    def _powered_off(self, i: int) -> None:
        node = self.nodes[i]
        now = float(self.env.now)
        node.state = PowerState.OFF
        node.shutdown = None
        node._off_since_s = now
        self.ledger.change(now, 0.0, 0.0, node.off_w, -node.on_w)
        if node.resume_asked:
            self._resume(i)

    def _resume(self, i: int) -> None:
        assert self.saving is not None
        node = self.nodes[i]
        now = float(self.env.now)
        node.state = PowerState.RESUMING
        node.resume_asked = False
        node.off_s += now - node._off_since_s
        self.ledger.change(now, 0.0, 0.0, -node.off_w, node.on_w)
        timer = self.env.timeout(self.saving.boot_s)
        timer.callbacks.append(lambda _ev: self._resumed(i))

    def _resumed(self, i: int) -> None:
        node = self.nodes[i]
        now = float(self.env.now)
        node.state = PowerState.ON
        self.ledger.change(now, 0.0, node.on_w, 0.0, -node.on_w, gpu_delta_w=node.gpu_idle_w)
        ready, node.ready = node.ready, None
        if ready is not None and not ready.triggered:
            ready.succeed()

    def close(self, end_s: float) -> None:
        for node in self.nodes:
            if node.state is PowerState.OFF:
                node.off_s += end_s - node._off_since_s
                node._off_since_s = end_s

    # -- results ---------------------------------------------------------------------------------
    def summary(self) -> dict[str, float]:
        """Flat metrics: SuspendTime (NaN: power saving off), power cycles in all and on the busiest node, the shortest time between two
        power-downs of one node (NaN: no node cycled twice), node-hours powered down."""
        gaps = [g for n in self.nodes if (g := n.min_cycle_gap_s) is not None]
        cycles = [len(n.suspends) for n in self.nodes]
        return {
            "suspend_time_s": self.saving.suspend_time_s if self.saving is not None else math.nan,
            "power_cycles": float(sum(cycles)),
            "max_node_cycles": float(max(cycles, default=0)),
            "min_cycle_gap_s": min(gaps) if gaps else math.nan,
            "off_node_h": sum(n.off_s for n in self.nodes) / 3600.0,
        }

    def _next_states(self, node: NodePower) -> tuple[float | None, float | None]:
        """(when the node is or would be powered down, when it is or would be off) as the run ends; None:
        it stays on (power saving off, it holds a job or it is booting)."""
        if self.saving is None:
            return None, None
        timeout = self.saving.suspend_timeout_s
        if node.state in (PowerState.OFF, PowerState.SUSPENDING) and node.suspends:
            return node.suspends[-1], node.suspends[-1] + timeout
        if node.state is PowerState.ON and node.emptied_s is not None:
            at = node.emptied_s + self.saving.suspend_time_s
            return at, at + timeout
        return None, None

    def per_node(self) -> list[dict[str, Any]]:
        """Each node's cycles, and how it would go on drawing after the run's end (`on_w`, `off_w`,
        `suspend_at_s`, `off_at_s`): what a replay's common window charges a row that ends early."""
        rows = []
        for n in self.nodes:
            suspend_at, off_at = self._next_states(n)
            rows.append(
                {
                    "node": n.name,
                    "power_cycles": len(n.suspends),
                    "min_cycle_gap_s": n.min_cycle_gap_s,
                    "off_s": n.off_s,
                    "on_w": n.on_w,
                    "off_w": n.off_w,
                    "suspend_at_s": suspend_at,
                    "off_at_s": off_at,
                }
            )
        return rows
