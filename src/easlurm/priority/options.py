"""Every placement option of a job, predicted once by the oracle and kept as flat arrays for vector scoring."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.errors import ModelError
from easlurm.model.oracle import Placements
from easlurm.model.zoo import get_workload
from easlurm.priority.snapshot import PendingJob

log = logging.getLogger(__name__)

#: Spread node counts predicted beyond the fewest nodes that hold a GPU count on empty nodes.
MAX_EXTRA_NODES = 3

OptionKey = tuple[Any, ...]


@dataclass(frozen=True)
class TypeFacts:
    """Power facts of one GPU type, as the snapshot gives them (W per GPU), and its nodes' GPU counts
    (largest first; empty: unknown, options are predicted on one node)."""

    tdp_w: float
    min_power_limit_w: float | None
    node_gpus: tuple[int, ...] = ()


class PredictionCache:
    """Predictions of (n_gpus, batch, gpu type, power limit, nodes spanned) options per job template, in one
    flat store. Node counts run from the fewest nodes of the type that hold the GPUs (packed) up to
    MAX_EXTRA_NODES more: the spreads a fragmented cluster may offer.

    A job's options depend only on its template (model, precision, option lists), never on time, so
    each template is predicted once per oracle; a scheduling cycle then indexes the flat arrays.
    """

    def __init__(self, oracle: Any) -> None:
        self.oracle = oracle
        self.type_names: list[str] = []
        self._type_code: dict[str, int] = {}
        self._slots: dict[OptionKey, tuple[int, int]] = {}
        self._type_layouts: dict[tuple[tuple[str, TypeFacts], ...], int] = {}
        self._workloads: dict[tuple[Any, ...], Any] = {}
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._size = 0
        self._flat: tuple[np.ndarray, ...] | None = None
        #: node layout (type, TDP, min limit, GPUs, idle power per node) -> (facts per type, type code per
        #: node, idle power per node)
        self.layouts: dict[tuple[Any, ...], tuple[dict[str, TypeFacts], np.ndarray, np.ndarray]] = {}

    # -- flat arrays -------------------------------------------------------------------------
    @property
    def arrays(
        self,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(n_gpus, batch, type_code, power_limit_w, samples_per_s, power_w, default_samples_per_s),
        concatenated; the last is the speed of the same GPUs and batch at the default limit (NaN when
        the oracle cannot place that), against which a limit's slowdown is bounded."""
        if self._flat is None:
            if self._chunks:
                self._flat = tuple(np.concatenate(parts) for parts in zip(*self._chunks))
            else:
                ints = np.zeros(0, dtype=np.int64)
                flts = np.zeros(0, dtype=np.float64)
                self._flat = (ints, ints, ints, flts, flts, flts, flts, ints, np.zeros(0, dtype=bool))
        n, b, code, pl, sps, pw, base = self._flat[:7]
        return n, b, code, pl, sps, pw, base

    @property
    def node_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(nodes spanned, spread: more nodes than the fewest that hold the GPUs), aligned on `arrays`."""
        self.arrays  # noqa: B018 - builds the flat store
        assert self._flat is not None
        return self._flat[7], self._flat[8]

    def code(self, gpu_type: str) -> int:
        if gpu_type not in self._type_code:
            self._type_code[gpu_type] = len(self.type_names)
            self.type_names.append(gpu_type)
        return self._type_code[gpu_type]

    # -- per job -----------------------------------------------------------------------------
    def slots(
        self,
        jobs: Sequence[PendingJob],
        types: dict[str, TypeFacts],
        *,
        rigid: bool = False,
        limit_fractions: tuple[float, ...] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """(offset, length) into the flat arrays of each job's options on the given GPU types."""
        offs = np.empty(len(jobs), dtype=np.int64)
        lens = np.empty(len(jobs), dtype=np.int64)
        # one number per type layout: hashing its TypeFacts for each of 10,000 jobs cost ~0.05 s a cycle
        layout = tuple(sorted(types.items()))
        type_key = self._type_layouts.setdefault(layout, len(self._type_layouts))
        for i, job in enumerate(jobs):
            fixed = rigid or not job.malleable
            key = (
                job.model,
                job.precision,
                job.seq_len,
                job.image_size,
                job.gpu_options[:1] if fixed else job.gpu_options,
                job.batch_options[:1] if fixed else job.batch_options,
                job.gpu_types,
                job.power_limit_options_w,
                type_key,
                limit_fractions,
                job.sharding,
                job.act_ckpt,
            )
            slot = self._slots.get(key)
            if slot is None:
                slot = self._predict(job, key, types, limit_fractions)
                self._slots[key] = slot
            offs[i], lens[i] = slot
        return offs, lens

    def _predict(
        self, job: PendingJob, key: OptionKey, types: dict[str, TypeFacts], fractions: tuple[float, ...]
    ) -> tuple[int, int]:
        gpu_opts, batch_opts, allowed = key[4], key[5], job.gpu_types
        rows: list[tuple[int, int, str, float, int, bool]] = []
        base_row: list[int] = []  # the row of the same GPUs, nodes and batch at the default limit
        for gpu_type in sorted(types):
            if allowed is not None and not type_allowed(gpu_type, allowed):
                continue
            limits = _limits_for(types[gpu_type], job.power_limit_options_w, fractions)
            for k in gpu_opts:
                spans = node_spans(k, types[gpu_type].node_gpus)
                for m_k in spans:
                    for b in batch_opts:
                        base_row.extend([len(rows)] * len(limits))
                        rows.extend((k, b, gpu_type, pl, m_k, m_k > spans[0]) for pl in limits)
        if not rows:
            return self._append_empty()
        n = np.array([r[0] for r in rows], dtype=np.int64)
        b = np.array([r[1] for r in rows], dtype=np.int64)
        g = np.array([r[2] for r in rows], dtype=object)
        pl = np.array([r[3] for r in rows], dtype=np.float64)
        m = np.array([r[4] for r in rows], dtype=np.int64)
        spread = np.array([r[5] for r in rows], dtype=bool)
        try:
            sizes = {t: self.oracle.catalogue.get(t).gpus_per_node for t in set(g)}
            per_node = np.array([sizes[t] for t in g], dtype=np.int64)
            pred = self.oracle.predict(
                self._workload(job), Placements.of(n, b, g, pl, oracle_nodes(n, m, per_node))
            )
        except ModelError as exc:
            log.warning("job %s (%s) cannot be placed: %s", job.job_id, job.model, exc)
            return self._append_empty()
        sps = np.asarray(pred.samples_per_s, dtype=np.float64)
        pw = np.asarray(pred.power_w, dtype=np.float64)
        ok = np.isfinite(sps) & (sps > 0) & np.isfinite(pw)
        base = np.where(ok, sps, np.nan)[np.asarray(base_row, dtype=np.int64)]
        codes = np.array([self.code(t) for t in g], dtype=np.int64)
        chunk = (n[ok], b[ok], codes[ok], pl[ok], sps[ok], pw[ok], base[ok], m[ok], spread[ok])
        start = self._size
        self._chunks.append(chunk)
        self._size += int(ok.sum())
        self._flat = None
        return start, int(ok.sum())

    def _append_empty(self) -> tuple[int, int]:
        return self._size, 0

    def _workload(self, job: PendingJob) -> Any:
        wkey = (job.model, job.precision, job.seq_len, job.image_size, job.sharding, job.act_ckpt)
        wl = self._workloads.get(wkey)
        if wl is None:
            wl = get_workload(
                job.model, precision=job.precision, seq_len=job.seq_len, image_size=job.image_size
            )
            if job.sharding != "none" or job.act_ckpt:  # the oracle resolves auto per option
                wl = wl.trained_with(job.sharding, job.act_ckpt)
            self._workloads[wkey] = wl
        return wl


def type_allowed(gpu_type: str, allowed: tuple[str, ...]) -> bool:
    """Allowed types may be short names ("a100") of catalogue keys ("a100-40gb")."""
    return any(gpu_type == a or gpu_type.split("-")[0] == a for a in allowed)


def _limits_for(facts: TypeFacts, explicit_w: tuple[float, ...], fractions: tuple[float, ...]) -> list[float]:
    """The default limit (NaN) plus explicit and fractional limits inside [min limit, TDP)."""
    floor = facts.min_power_limit_w if facts.min_power_limit_w is not None else 0.0
    limits = {round(w, 1) for w in explicit_w} | {round(f * facts.tdp_w, 1) for f in fractions}
    kept = sorted(w for w in limits if floor <= w < facts.tdp_w)
    return [math.nan, *kept]


def node_spans(k: int, node_gpus: tuple[int, ...]) -> list[int]:
    """Node counts an option of k GPUs is predicted on: the fewest of the type's nodes that hold k when
    empty, then up to MAX_EXTRA_NODES more (never more nodes than GPUs or than the type has); [1] when
    the nodes are unknown, [] when all of them together hold fewer than k."""
    if not node_gpus:
        return [1]
    fewest = int(fewest_free_nodes(np.asarray(node_gpus), np.asarray([k]))[0])
    if fewest == 0:
        return []
    return list(range(fewest, min(k, len(node_gpus), fewest + MAX_EXTRA_NODES) + 1))


def oracle_nodes(n_gpus: np.ndarray, n_nodes: np.ndarray, gpus_per_node: Any) -> np.ndarray:
    """The node count to give the oracle for GPUs placed on `n_nodes` cluster nodes: 0 (the fewest at the
    catalogue's gpus_per_node, what a one-node placement on a node as large as the catalogue's is) for one
    node, else the spread but never fewer than the catalogue's fewest (a cluster node larger than the
    catalogue's holds what the oracle's would not)."""
    n = np.asarray(n_gpus, dtype=np.int64)
    m = np.asarray(n_nodes, dtype=np.int64)
    fewest = -(-n // np.asarray(gpus_per_node, dtype=np.int64))
    return np.where(m > 1, np.maximum(m, fewest), 0).astype(np.int64)


def fewest_free_nodes(free: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The fewest nodes whose free GPUs (`free`, of one GPU type) hold `k` GPUs, per k (0 when they cannot)."""
    held = np.cumsum(np.sort(np.asarray(free, dtype=np.int64))[::-1])
    need = np.searchsorted(held, np.asarray(k, dtype=np.int64), side="left") + 1
    return np.where(need <= len(held), need, 0).astype(np.int64)


def expand(offs: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat option indices of all jobs and, for each, the index of its job (jobs in order). One job (a
    decision per arrival on a short queue): its range, in two array calls instead of seven."""
    if len(lens) == 1:
        off, n = int(offs[0]), int(lens[0])
        return np.arange(off, off + n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    total = int(lens.sum())
    job_of = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    group_start = np.cumsum(lens) - lens
    idx = np.repeat(offs - group_start, lens) + np.arange(total, dtype=np.int64)
    return idx, job_of
