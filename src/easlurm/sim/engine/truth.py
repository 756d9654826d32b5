"""What really happens in the simulator: the noiseless oracle's rate and power for a chosen placement."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from easlurm.errors import ModelError
from easlurm.model.colocation import INFEASIBLE, GpuFacts, Sharing, corun, predict_solo
from easlurm.model.oracle import Placements
from easlurm.model.zoo import get_workload
from easlurm.priority.options import oracle_nodes, type_allowed
from easlurm.sim.job import JobSpec


class Truth:
    """Memoised (samples/s, power W) of a job template on one placement, and the fastest runtime.

    The policies see the noisy oracle; execution follows the analytical oracle, so the noise is the
    gap between what a scheduler believes and what the hardware does (thesis 5.3.2.3)."""

    def __init__(self, oracle: Any) -> None:
        self.oracle = oracle
        self._rates: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._fastest: dict[tuple[Any, ...], float] = {}
        self._workloads: dict[tuple[Any, ...], Any] = {}
        self._coruns: dict[tuple[Any, ...], Any] = {}

    def workload(self, spec: JobSpec) -> Any:
        key = _template(spec)
        wl = self._workloads.get(key)
        if wl is None:
            wl = get_workload(
                spec.model, precision=spec.precision, seq_len=spec.seq_len, image_size=spec.image_size
            )
            if spec.sharding != "none" or spec.act_ckpt:  # the oracle resolves auto per placement
                wl = wl.trained_with(spec.sharding, spec.act_ckpt)
            self._workloads[key] = wl
        return wl

    def rate(
        self,
        spec: JobSpec,
        n_gpus: int,
        batch: int,
        gpu_type: str,
        limit_w: float | None,
        n_nodes: int = 1,
    ) -> tuple[float, float]:
        """(samples per second, power of all the job's GPUs in W) with the GPUs spread over `n_nodes`."""
        pl = math.nan if limit_w is None else float(limit_w)
        key = (
            *_template(spec),
            n_gpus,
            batch,
            gpu_type,
            pl,
            n_nodes,
        )
        hit = self._rates.get(key)
        if hit is None:
            per_node = self.oracle.catalogue.get(gpu_type).gpus_per_node
            m = oracle_nodes(np.array([n_gpus]), np.array([n_nodes]), per_node)
            pred = self.oracle.predict(
                self.workload(spec), Placements.of([n_gpus], [batch], [gpu_type], [pl], m)
            )
            sps, pw = float(pred.samples_per_s[0]), float(pred.power_w[0])
            if not (math.isfinite(sps) and sps > 0 and math.isfinite(pw)):
                raise ModelError(
                    f"{spec.model}: no valid prediction for {n_gpus}x{gpu_type} on {n_nodes} node(s) batch {batch}"
                )
            hit = self._rates[key] = (sps, pw)
        return hit

    def corun(
        self,
        a: JobSpec,
        batch_a: int,
        b: JobSpec,
        batch_b: int,
        gpu_type: str,
        sharing: str,
        limit_w: float | None = None,
    ) -> Any:
        """The co-location rule's CoRun of two one-GPU jobs sharing one GPU at one power limit (None: the
        default) (model/colocation.py)."""
        key = (_template(a), batch_a, _template(b), batch_b, gpu_type, sharing, limit_w)
        hit = self._coruns.get(key)
        if hit is None:
            sa = predict_solo(self.oracle, self.workload(a), batch_a, gpu_type)
            sb = predict_solo(self.oracle, self.workload(b), batch_b, gpu_type)
            if sa is None or sb is None:
                hit = INFEASIBLE
            else:
                facts = GpuFacts.of(self.oracle.catalogue.get(gpu_type), self.oracle.params)
                hit = corun(sa, sb, facts, Sharing(sharing), self.oracle.params, limit_w)
            self._coruns[key] = hit
        return hit

    def fastest_runtime_s(
        self, spec: JobSpec, types: dict[str, int], nodes_by_type: dict[str, int] | None = None
    ) -> float:
        """Minimum runtime over all the job's options on the given types (GPUs per node by type); with
        `nodes_by_type` (nodes of each type) an option larger than a node counts packed on the fewest nodes."""
        counts = nodes_by_type or {}
        allowed = [t for t in types if spec.gpu_types is None or type_allowed(t, spec.gpu_types)]
        key = (
            *_template(spec),
            spec.gpu_options,
            spec.batch_options,
            spec.malleable,
            tuple(sorted((t, types[t], counts.get(t, 1)) for t in allowed)),
        )
        best = self._fastest.get(key)
        if best is None:
            ks = spec.gpu_options if spec.malleable else spec.gpu_options[:1]
            bs = spec.batch_options if spec.malleable else spec.batch_options[:1]
            rows = [(k, b, t) for t in allowed for k in ks for b in bs if k <= types[t] * counts.get(t, 1)]
            if not rows:
                raise ModelError(f"job {spec.job_id}: no option fits this cluster")
            n = np.array([r[0] for r in rows])
            g = np.array([r[2] for r in rows], dtype=object)
            per_node = np.array([types[t] for t in g])
            gpn = np.array([self.oracle.catalogue.get(t).gpus_per_node for t in g])
            m = oracle_nodes(n, -(-n // per_node), gpn)
            pred = self.oracle.predict(
                self.workload(spec), Placements.of(n, np.array([r[1] for r in rows]), g, math.nan, m)
            )
            sps = np.asarray(pred.samples_per_s, dtype=np.float64)
            best = self._fastest[key] = float(np.nanmax(np.where(sps > 0, sps, np.nan)))
        return spec.total_samples / best


def _template(spec: JobSpec) -> tuple[Any, ...]:
    return (spec.model, spec.precision, spec.seq_len, spec.image_size, spec.sharding, spec.act_ckpt)
