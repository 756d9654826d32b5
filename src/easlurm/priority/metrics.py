"""Prometheus metrics of the scheduler daemon, in a registry of their own (no module-level singletons)."""

from __future__ import annotations

import logging
from typing import Any

from easlurm.config import check_setting
from easlurm.errors import ConfigError

log = logging.getLogger(__name__)


class Metrics:
    """Cycle time, the last cycle's time, jobs scored, cluster power (predicted, measured), budget headroom
    (exported only while a budget is set: a headroom of 0 without one would read as an alarm), holds,
    preemptions and decisions per policy. Without prometheus-client every update is a no-op (the daemon
    still runs)."""

    def __init__(self, enabled: bool = True) -> None:
        self.registry: Any = None
        if not enabled:
            return
        try:
            import prometheus_client as pc
        except ImportError:
            log.warning("prometheus-client not installed: no metrics (pip install 'easlurm[metrics]')")
            return
        self.registry = r = pc.CollectorRegistry()
        self.cycle_s = pc.Histogram(
            "easlurm_schedd_cycle_seconds",
            "Scheduling cycle time by phase (slurm, policy, apply)",
            ["phase"],
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
        )
        self.jobs_scored = pc.Gauge("easlurm_schedd_jobs_scored", "Declared pending jobs scored", registry=r)
        self.power_w = pc.Gauge("easlurm_schedd_cluster_power_watts", "Cluster power", ["source"], registry=r)
        self.headroom_w: Any = None  # created with the first budget, removed when the budget goes
        self.last_cycle = pc.Gauge(
            "easlurm_schedd_last_cycle_timestamp_seconds",
            "Unix time of the last completed scheduling cycle (0: none yet)",
            registry=r,
        )
        self.holds = pc.Gauge("easlurm_schedd_holds", "Jobs held by the daemon now", registry=r)
        self.preemptions = pc.Counter("easlurm_schedd_preemptions", "Jobs requeued by the daemon", registry=r)
        self.decisions = pc.Counter(
            "easlurm_schedd_decisions", "Actions decided, by policy and kind", ["policy", "kind"], registry=r
        )
        self.errors = pc.Counter("easlurm_schedd_errors", "Failed cycles or actions", ["where"], registry=r)

    @property
    def enabled(self) -> bool:
        return self.registry is not None

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose /metrics over HTTP on a daemon thread, on `addr` (all interfaces by default)."""
        if not self.enabled:
            raise ConfigError("--metrics-port needs prometheus-client (pip install 'easlurm[metrics]')")
        import prometheus_client as pc

        port = check_port(port)
        try:
            pc.start_http_server(port, addr=addr, registry=self.registry)
        except (OSError, ValueError) as exc:  # ValueError: an address getaddrinfo cannot read
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on {addr}:{port} "
                f"({getattr(exc, 'strerror', None) or exc})"
            ) from exc

    def observe_cycle(self, phases_s: dict[str, float], at_s: float | None = None) -> None:
        """A completed cycle's phase times and (unix s) when it ran."""
        if self.enabled:
            for phase, seconds in phases_s.items():
                self.cycle_s.labels(phase).observe(seconds)
            if at_s is not None:
                self.last_cycle.set(at_s)

    def observe_state(
        self,
        jobs_scored: int,
        predicted_w: float,
        measured_w: float | None,
        budget_w: float | None,
        holds: int,
    ) -> None:
        if not self.enabled:
            return
        self.jobs_scored.set(jobs_scored)
        self.power_w.labels("predicted").set(predicted_w)
        if measured_w is not None:
            self.power_w.labels("measured").set(measured_w)
        if budget_w is not None:
            if self.headroom_w is None:
                import prometheus_client as pc

                self.headroom_w = pc.Gauge(
                    "easlurm_schedd_budget_headroom_watts", "Power budget minus power", registry=self.registry
                )
            self.headroom_w.set(budget_w - predicted_w)
        elif self.headroom_w is not None:
            self.registry.unregister(self.headroom_w)
            self.headroom_w = None
        self.holds.set(holds)

    def count_actions(self, policy: str, kinds: list[str]) -> None:
        if not self.enabled:
            return
        for kind in kinds:
            self.decisions.labels(policy, kind).inc()
            if kind == "requeue":
                self.preemptions.inc()

    def count_error(self, where: str) -> None:
        if self.enabled:
            self.errors.labels(where).inc()

    def text(self) -> str:
        """The exposition text (for tests and `--once`)."""
        if not self.enabled:
            return ""
        import prometheus_client as pc

        return str(pc.generate_latest(self.registry).decode())


def check_port(port: object) -> int:
    """A TCP port number from a flag or the configuration, or a ConfigError naming the option: the
    configuration's own rule for `sched.metrics_port` (config.RANGES), so both say the same."""
    checked = check_setting("sched.metrics_port", port, "--metrics-port (sched.metrics_port)")
    if checked is None:
        raise ConfigError("--metrics-port (sched.metrics_port): no port given")
    return int(checked)
