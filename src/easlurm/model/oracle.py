"""The oracle: step time, power, energy and EDP of a workload for many placements in one vectorised call."""

from __future__ import annotations

import itertools
import logging
import math
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from easlurm.errors import ModelError
from easlurm.model.equations import HardwareArrays, StepResult, WorkloadArrays, evaluate
from easlurm.model.hardware import Catalogue, GpuSpec, load_catalogue
from easlurm.model.params import OracleParams, load_params
from easlurm.model.workload import Workload

log = logging.getLogger(__name__)

#: placements longer than this are not cached (hashing them would cost more than predicting)
_CACHE_MAX_ROWS = 4096
#: rows evaluated per chunk in predict_many (about 64 KB per float64 temporary)
_CHUNK_ROWS = 8192


@dataclass(frozen=True)
class Placements:
    """Struct of arrays of equal length N: GPU count, GLOBAL batch, GPU type key, power limit (NaN = TDP) and
    the number of nodes the GPUs span (0 = the fewest nodes that hold them, at the GPU type's gpus_per_node).

    Spreading a job's GPUs over more nodes moves its gradient all-reduce from NVLink/PCIe onto the network
    (docs/oracle-comm.md); the oracle checks that no node holds more than its GPU type's gpus_per_node.
    """

    n_gpus: np.ndarray
    batch: np.ndarray
    gpu: np.ndarray
    power_limit_w: np.ndarray
    _codes: tuple[tuple[str, ...], np.ndarray] | None = field(default=None, repr=False, compare=False)
    n_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        n_gpus = np.asarray(self.n_gpus, dtype=np.int64).reshape(-1)
        batch = np.asarray(self.batch, dtype=np.int64).reshape(-1)
        gpu = np.asarray(self.gpu, dtype=object).reshape(-1)
        limit = np.asarray(self.power_limit_w, dtype=np.float64).reshape(-1)
        nodes = np.asarray(self.n_nodes, dtype=np.int64).reshape(-1)
        if nodes.size == 0 or (nodes.size == 1 and len(n_gpus) != 1):
            nodes = np.full(len(n_gpus), nodes[0] if nodes.size else 0, np.int64)
        if not len(n_gpus) == len(batch) == len(gpu) == len(limit) == len(nodes):
            raise ModelError(
                f"placements: arrays differ in length ({len(n_gpus)}, {len(batch)}, {len(gpu)}, {len(limit)}, "
                f"{len(nodes)})"
            )
        if len(n_gpus) and (n_gpus.min() < 1 or batch.min() < 1):
            raise ModelError("placements: n_gpus and batch must be >= 1")
        if len(nodes) and (nodes.min() < 0 or np.any(nodes > n_gpus)):
            i = int(np.flatnonzero((nodes < 0) | (nodes > n_gpus))[0])
            raise ModelError(f"placements: n_nodes {nodes[i]} outside 1..n_gpus ({n_gpus[i]}) (0 = fewest)")
        object.__setattr__(self, "n_gpus", n_gpus)
        object.__setattr__(self, "batch", batch)
        object.__setattr__(self, "gpu", gpu)
        object.__setattr__(self, "power_limit_w", limit)
        object.__setattr__(self, "n_nodes", nodes)

    @classmethod
    def grid(
        cls,
        n_gpus: Sequence[int] | np.ndarray,
        batch: Sequence[int] | np.ndarray,
        gpu: Sequence[str] | str,
        power_limit_w: Sequence[float] | np.ndarray = (math.nan,),
        n_nodes: Sequence[int] | np.ndarray = (0,),
    ) -> Placements:
        """Cartesian product, GPU type outermost, then GPU count, batch, power limit, node count; a node count
        above the GPU count (more nodes than GPUs) is left out."""
        gpus = [gpu] if isinstance(gpu, str) else list(gpu)
        rows = [
            r
            for r in itertools.product(
                range(len(gpus)), list(n_gpus), list(batch), list(power_limit_w), list(n_nodes)
            )
            if r[4] <= r[1]
        ]
        if not rows:
            return cls.of(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0))
        g, n, b, pl, m = zip(*rows)
        gi = np.asarray(g, dtype=np.intp)
        return cls(
            np.asarray(n, np.int64),
            np.asarray(b, np.int64),
            np.asarray(gpus, dtype=object)[gi],
            np.asarray(pl, np.float64),
            (tuple(gpus), gi),
            np.asarray(m, np.int64),
        )

    @classmethod
    def of(
        cls,
        n_gpus: Any,
        batch: Any,
        gpu: Any,
        power_limit_w: Any = math.nan,
        n_nodes: Any = 0,
    ) -> Placements:
        """Parallel arrays; scalars broadcast to the common length (n_nodes 0 = the fewest nodes)."""
        gpu_arr = (
            np.asarray(gpu, dtype=object) if not isinstance(gpu, str) else np.asarray([gpu], dtype=object)
        )
        arrays = np.broadcast_arrays(
            np.atleast_1d(np.asarray(n_gpus)),
            np.atleast_1d(np.asarray(batch)),
            np.arange(gpu_arr.size).reshape(gpu_arr.shape) if gpu_arr.ndim else np.zeros(1, np.intp),
            np.atleast_1d(np.asarray(power_limit_w, dtype=np.float64)),
            np.atleast_1d(np.asarray(n_nodes, dtype=np.int64)),
        )
        idx = arrays[2].astype(np.intp).reshape(-1)
        flat = gpu_arr.reshape(-1)
        codes = None
        if flat.size == 1:
            codes = ((str(flat[0]),), np.zeros(idx.size, np.intp))
        return cls(arrays[0].copy(), arrays[1].copy(), flat[idx], arrays[3].copy(), codes, arrays[4].copy())

    def __len__(self) -> int:
        return len(self.n_gpus)

    def gpu_codes(self) -> tuple[tuple[str, ...], np.ndarray]:
        """Distinct GPU names and each row's index into them (computed once)."""
        if self._codes is None:
            keys, inverse = np.unique(self.gpu.astype(str), return_inverse=True)
            object.__setattr__(self, "_codes", (tuple(str(k) for k in keys), inverse.astype(np.intp)))
        assert self._codes is not None
        return self._codes

    def cache_key(self) -> tuple[Any, ...]:
        keys, idx = self.gpu_codes()
        return (
            keys,
            idx.tobytes(),
            self.n_gpus.tobytes(),
            self.batch.tobytes(),
            self.power_limit_w.tobytes(),
            self.n_nodes.tobytes(),
        )

    def take(self, index: np.ndarray) -> Placements:
        keys, idx = self.gpu_codes()
        return Placements(
            self.n_gpus[index],
            self.batch[index],
            self.gpu[index],
            self.power_limit_w[index],
            (keys, idx[index]),
            self.n_nodes[index],
        )


def fewest_nodes(n_gpus: Any, gpus_per_node: Any) -> np.ndarray:
    """The fewest nodes that hold n_gpus GPUs at gpus_per_node each (the default spread of a placement)."""
    return np.ceil(np.asarray(n_gpus, np.float64) / np.asarray(gpus_per_node, np.float64)).astype(np.int64)


def resolve_nodes(placements: Placements, specs: Sequence[GpuSpec], idx: np.ndarray) -> np.ndarray:
    """Each row's node count (0 resolved to the fewest nodes) for GPU types `specs[idx]`; a node holding more
    GPUs than its type's gpus_per_node is a ModelError naming the row's figures."""
    per_node = np.array([s.gpus_per_node for s in specs], dtype=np.int64)[idx]
    n, m = placements.n_gpus, placements.n_nodes
    nodes = np.where(m > 0, m, fewest_nodes(n, per_node))
    bad = -(-n // np.maximum(nodes, 1)) > per_node
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        s = specs[idx[i]]
        raise ModelError(
            f"{n[i]} GPUs on {nodes[i]} node(s) need more than {s.gpus_per_node} GPUs per {s.key} node"
        )
    return nodes


@dataclass(frozen=True)
class Prediction:
    """Arrays of length N aligned with the placements; infeasible placements have inf time/energy/EDP."""

    step_time_s: np.ndarray  # one optimizer step (global batch)
    power_w: np.ndarray  # mean power of ALL the job's GPUs together during a step
    energy_j: np.ndarray  # per step, all GPUs
    edp: np.ndarray  # energy_j * step_time_s (J*s) per step
    samples_per_s: np.ndarray
    feasible: np.ndarray | None = None
    grad_accum: np.ndarray | None = None
    peak_mem_gib: np.ndarray | None = None  # one GPU's peak memory at the micro-batch used (GiB)
    #: fractions of a step one GPU keeps tensor/SM compute, HBM, or any kernel busy (NaN if infeasible)
    compute_busy: np.ndarray | None = None
    hbm_busy: np.ndarray | None = None
    gpu_busy: np.ndarray | None = None
    #: True where the GPU's architecture was not among those the parameters were calibrated on: the row is
    #: predicted with the shared physics alone (no per-architecture factors)
    shared_physics: np.ndarray | None = None
    #: gradient all-reduce time per step not hidden under the backward pass (s; 0 on one GPU)
    comm_exposed_s: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.step_time_s)


class Oracle:
    """Analytical oracle (thesis 4.3) with an LRU cache keyed by workload, placements and parameters."""

    def __init__(
        self, params: OracleParams | None = None, catalogue: Catalogue | None = None, cache_size: int = 4096
    ) -> None:
        self.params = params if params is not None else load_params()
        self.catalogue = catalogue if catalogue is not None else load_catalogue()
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[Any, ...], Prediction] = OrderedDict()
        self._hw_cache: dict[tuple[str, ...], tuple[HardwareArrays, list[GpuSpec]]] = {}
        self._rows: dict[Workload, tuple[float, ...]] = {}
        self._rows_params: OracleParams | None = None
        self._last_hw: tuple[Placements, HardwareArrays, np.ndarray] | None = None
        self._single: dict[Workload, WorkloadArrays] = {}
        self._physics: tuple[OracleParams, dict[str, float]] | None = None
        self._shared_memo: tuple[OracleParams | None, dict[tuple[str, ...], np.ndarray]] = (None, {})
        self.hits = 0
        self.misses = 0

    def _hardware(self, keys: tuple[str, ...]) -> tuple[HardwareArrays, list[GpuSpec]]:
        hit = self._hw_cache.get(keys)
        if hit is None:
            specs = [self.catalogue.get(k) for k in keys]
            hit = (HardwareArrays.table(specs), specs)
            self._hw_cache[keys] = hit
        return hit

    def physics(self) -> dict[str, float]:
        """The parameters the equations read (globals and per-architecture factors), built once per set."""
        if self._physics is None or self._physics[0] is not self.params:
            self._physics = (self.params, self.params.physics)
        return self._physics[1]

    def uncalibrated_gpus(self, keys: Sequence[str]) -> list[str]:
        """GPU keys whose architecture the parameters were not calibrated on (predicted by shared physics)."""
        fitted = set(self.params.architectures)
        return [k for k in keys if self.catalogue.get(k).architecture not in fitted]

    def _shared(self, placements: Placements, repeat: int = 1) -> np.ndarray:
        keys, idx = placements.gpu_codes()
        memo = self._shared_memo
        if memo[0] is not self.params:
            memo = self._shared_memo = (self.params, {})
        flags = memo[1].get(keys)
        if flags is None:
            odd = set(self.uncalibrated_gpus(keys))
            flags = memo[1][keys] = np.array([k in odd for k in keys], dtype=bool)
        return np.tile(flags[idx], repeat) if repeat > 1 else flags[idx]

    def _check_limits(self, specs: list[GpuSpec], idx: np.ndarray, limit: np.ndarray) -> None:
        given = ~np.isnan(limit)
        if not given.any():
            return
        lo = np.array([s.min_power_limit_w for s in specs])[idx]
        hi = np.array([s.tdp_w for s in specs])[idx]
        bad = given & ((limit < lo - 1e-9) | (limit > hi + 1e-9))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            s = specs[idx[i]]
            raise ModelError(
                f"power limit {limit[i]:g} W outside {s.key}'s range {s.min_power_limit_w:g}-{s.tdp_w:g} W"
            )

    def _features(self, workloads: Sequence[Workload]) -> WorkloadArrays:
        """Workload feature rows, memoised per workload for the current parameters."""
        if self._rows_params is not self.params:
            self._rows.clear()
            self._single.clear()
            self._rows_params = self.params
        rows = self._rows
        out = []
        for w in workloads:
            r = rows.get(w)
            if r is None:
                r = rows[w] = WorkloadArrays.row(w, self.params)
            out.append(r)
        return WorkloadArrays.from_rows(out)

    def _run(self, wa: WorkloadArrays, placements: Placements, outer: bool = False) -> StepResult:
        """Evaluate rows aligned with placements, or (outer=True) every workload row on every placement."""
        last = self._last_hw
        if last is not None and last[0] is placements:
            hw, m = last[1], last[2]
        else:
            keys, idx = placements.gpu_codes()
            table, specs = self._hardware(keys)
            self._check_limits(specs, idx, placements.power_limit_w)
            m = resolve_nodes(placements, specs, idx)
            hw = table.take(idx)
            self._last_hw = (placements, hw, m)  # callers often reuse one Placements for many workloads
        n, b, pl = placements.n_gpus, placements.batch, placements.power_limit_w
        if not outer:
            return evaluate(wa, hw, n, b, pl, self.physics(), m)
        hw = hw.reshape(1, -1)
        n, b, pl, m = n.reshape(1, -1), b.reshape(1, -1), pl.reshape(1, -1), m.reshape(1, -1)
        n_w, n_p = len(wa.gemm), n.shape[1]
        step = max(1, _CHUNK_ROWS // max(n_p, 1))  # chunks of workloads keep temporaries in cache
        parts = []
        for lo in range(0, n_w, step):
            part = evaluate(wa.take(slice(lo, lo + step)).reshape(-1, 1), hw, n, b, pl, self.physics(), m)
            shape = part.step_time_s.shape
            parts.append([np.ravel(np.broadcast_to(a, shape)) for a in astuple_shallow(part)])
        if len(parts) == 1:
            return StepResult(*parts[0])
        return StepResult(*(np.concatenate(cols) for cols in zip(*parts)))

    def _post(self, res: StepResult, placements: Placements, repeat: int = 1) -> StepResult:
        """Hook for subclasses (noise) on final rows; `placements` tiled `repeat` times align with them."""
        return res

    @staticmethod
    def _prediction(res: StepResult, batch: np.ndarray, shared: np.ndarray | None = None) -> Prediction:
        energy = res.power_w * res.step_time_s
        energy = np.where(res.feasible, energy, np.inf)
        return Prediction(
            step_time_s=res.step_time_s,
            power_w=res.power_w,
            energy_j=energy,
            edp=energy * res.step_time_s,
            samples_per_s=np.where(res.feasible, batch / res.step_time_s, 0.0),
            feasible=res.feasible,
            grad_accum=res.grad_accum.astype(np.int64),
            peak_mem_gib=res.peak_mem_bytes / 2**30,
            compute_busy=res.compute_busy,
            hbm_busy=res.hbm_busy,
            gpu_busy=res.gpu_busy,
            shared_physics=shared,
            comm_exposed_s=np.where(res.feasible, res.t_comm_s, np.nan),
        )

    def predict(self, workload: Workload, placements: Placements) -> Prediction:
        """Predictions for one workload over all placements (cached for small placement sets). A job that
        leaves its sharding or activation checkpointing to the oracle (`Workload.chooses_training`) is
        predicted with the cheapest of its options that fits, per placement (`cheapest_of`)."""
        if workload.chooses_training:
            options = workload.training_options
            preds = [self.predict(workload.trained_with(s, c), placements) for s, c in options]
            return cheapest_of(preds)[0]
        cacheable = self.cache_size > 0 and len(placements) <= _CACHE_MAX_ROWS and self._cacheable()
        key: tuple[Any, ...] | None = None
        if cacheable:
            key = (workload, placements.cache_key(), id(self.params))
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
            self.misses += 1
        wa = self._single.get(workload) if self._rows_params is self.params else None
        if wa is None:
            wa = self._features([workload])
            if len(self._single) >= 4096:
                self._single.clear()
            self._single[workload] = wa
        res = self._post(self._run(wa, placements), placements)
        pred = self._prediction(res, placements.batch, self._shared(placements))
        if key is not None:
            self._cache[key] = pred
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return pred

    def predict_many(self, workloads: Sequence[Workload], placements: Placements) -> Prediction:
        """Every workload on every placement in one array pass: row j*N + i is workload j on placement i.

        Identical workloads (common in a queue) are evaluated once and their rows gathered.
        """
        if any(w.chooses_training for w in workloads):  # those pick an option per placement: one at a time
            return concat_predictions([self.predict(w, placements) for w in workloads])
        uniq: dict[Workload, int] = {}
        index = np.fromiter(
            (uniq.setdefault(w, len(uniq)) for w in workloads), dtype=np.intp, count=len(workloads)
        )
        res = self._run(self._features(list(uniq)), placements, outer=True)
        if len(uniq) < len(workloads):
            n_p = len(placements)
            rows = (index[:, None] * n_p + np.arange(n_p)[None, :]).ravel()
            res = StepResult(*(a[rows] for a in astuple_shallow(res)))
        res = self._post(res, placements, len(workloads))
        return self._prediction(
            res, np.tile(placements.batch, len(workloads)), self._shared(placements, len(workloads))
        )

    def predict_rows(self, workloads: Sequence[Workload], placements: Placements) -> Prediction:
        """Row i is workloads[i] on placement i (calibration data: one measurement per row)."""
        if len(workloads) != len(placements):
            raise ModelError(f"{len(workloads)} workloads for {len(placements)} placements")
        if any(w.chooses_training for w in workloads):
            return self._rows_choosing(workloads, placements)
        res = self._post(self._run(self._features(workloads), placements), placements)
        return self._prediction(res, placements.batch, self._shared(placements))

    def _rows_choosing(self, workloads: Sequence[Workload], placements: Placements) -> Prediction:
        """predict_rows where some jobs choose their training: each distinct workload on its own rows."""
        groups: dict[Workload, list[int]] = {}
        for i, w in enumerate(workloads):
            groups.setdefault(w, []).append(i)
        parts = [
            (np.array(idx), self.predict(w, placements.take(np.array(idx)))) for w, idx in groups.items()
        ]
        order = np.argsort(np.concatenate([idx for idx, _ in parts]), kind="stable")
        whole = concat_predictions([p for _, p in parts])
        return _take_prediction(whole, order)

    def _cacheable(self) -> bool:
        return True

    def clear_cache(self) -> None:
        self._cache.clear()


def cheapest_of(preds: Sequence[Prediction]) -> tuple[Prediction, np.ndarray]:
    """Per row, the prediction with the least energy per step among those that fit (ties: the first), and
    the index of the one taken; a row none fits keeps the first's (infeasible) figures."""
    energy = np.vstack([np.where(np.asarray(p.feasible, bool), p.energy_j, np.inf) for p in preds])
    pick = np.argmin(energy, axis=0)  # argmin keeps the first of equal energies
    rows = np.arange(energy.shape[1])
    fields_: dict[str, Any] = {}
    for f in fields(Prediction):
        cols = [getattr(p, f.name) for p in preds]
        fields_[f.name] = None if cols[0] is None else np.vstack(cols)[pick, rows]
    return Prediction(**fields_), pick


def concat_predictions(preds: Sequence[Prediction]) -> Prediction:
    """Predictions one after the other (rows of the first, then of the second...)."""
    out: dict[str, Any] = {}
    for f in fields(Prediction):
        cols = [getattr(p, f.name) for p in preds]
        out[f.name] = None if any(c is None for c in cols) else np.concatenate(cols)
    return Prediction(**out)


def _take_prediction(pred: Prediction, index: np.ndarray) -> Prediction:
    out: dict[str, Any] = {}
    for f in fields(pred):
        col = getattr(pred, f.name)
        out[f.name] = None if col is None else col[index]
    return Prediction(**out)


def astuple_shallow(res: StepResult) -> tuple[np.ndarray, ...]:
    """A StepResult's arrays in field order (dataclasses.astuple would deep-copy them)."""
    return tuple(getattr(res, f.name) for f in fields(res))


def _first_of_placement(placements: Placements, codes: np.ndarray, repeat: int) -> np.ndarray:
    """For each row (placements repeated `repeat` times), the row whose noise it takes: the first row in
    its repetition with the same GPU count, batch and GPU type, whatever its power limit and node count. A
    placement asked for twice at the same limit and node count keeps two draws (the k-th copy at one limit
    or node count goes with the k-th copy at another)."""
    codes = np.asarray(codes, dtype=np.int64)
    limit = np.nan_to_num(placements.power_limit_w, nan=-1.0)
    nodes = placements.n_nodes
    _, same_row = np.unique(
        np.stack([placements.n_gpus, placements.batch, codes, nodes, limit]), axis=1, return_inverse=True
    )
    same_row = np.asarray(same_row).reshape(-1)
    order = np.argsort(same_row, kind="stable")
    sorted_rows = same_row[order]
    starts = np.r_[0, np.flatnonzero(sorted_rows[1:] != sorted_rows[:-1]) + 1]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    key = np.stack([placements.n_gpus, placements.batch, codes, rank])
    _, first, inverse = np.unique(key, axis=1, return_index=True, return_inverse=True)
    base = first[np.asarray(inverse).reshape(-1)]
    n = len(base)
    return (np.arange(repeat)[:, None] * n + base[None, :]).reshape(-1)


class NoisyOracle(Oracle):
    """Oracle with multiplicative N(1, sigma) noise on time and power, power capped at n_gpus x limit (or TDP).

    Stands in for run-to-run variation in simulations; seeded, and never cached (each call draws anew).
    The power limits of one placement in a call share its draw: the oracle's error on a workload and its
    GPUs, not an error per limit; where the noise pushes power above an explicit limit the model says
    does not bind, the step is throttled (same energy, longer) rather than capped for free.
    """

    def __init__(self, sigma: float = 0.10, seed: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        if sigma < 0:
            raise ModelError(f"noise sigma must be >= 0, got {sigma}")
        self.sigma = sigma
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._siblings: dict[str, NoisyOracle] = {}

    def sibling(self, stream: str) -> NoisyOracle:
        """The same oracle drawing its noise from its own named stream: predictions asked for on the side
        (co-location) then leave the noise of every other prediction as it was."""
        hit = self._siblings.get(stream)
        if hit is None:
            hit = NoisyOracle(self.sigma, seed=0, params=self.params, catalogue=self.catalogue)
            hit.seed = self.seed
            hit.rng = np.random.default_rng([self.seed, zlib.crc32(stream.encode())])
            self._siblings[stream] = hit
        return hit

    def _cacheable(self) -> bool:
        return False

    def _post(self, res: StepResult, placements: Placements, repeat: int = 1) -> StepResult:
        keys, idx = placements.gpu_codes()
        _, specs = self._hardware(keys)
        tdp = np.array([s.tdp_w for s in specs])[idx]
        limit = np.where(np.isnan(placements.power_limit_w), tdp, np.minimum(placements.power_limit_w, tdp))
        cap = np.tile(placements.n_gpus * limit, repeat)
        n = len(res.step_time_s)
        ft = np.maximum(self.rng.normal(1.0, self.sigma, n), 0.05)
        fp = np.maximum(self.rng.normal(1.0, self.sigma, n), 0.05)
        nodes = placements.n_nodes
        if not np.isnan(placements.power_limit_w).all() or (len(nodes) and nodes.min() != nodes.max()):
            # an error of the model does not depend on the power limit or the spread: every limit and node
            # count of the same GPUs and batch shares the draw of the first of them (else a policy would
            # choose limits, or spread a job, on noise)
            same = _first_of_placement(placements, idx, repeat)
            ft, fp = ft[same], fp[same]
        raw = res.power_w * fp
        power = np.minimum(raw, cap)
        # a limit the model says does not bind, but that the noise pushes the power above, throttles the
        # GPU: the step keeps its energy and takes longer, instead of saving power for free (a limit that
        # binds in the model is already in its time; TDP caps stay as they were)
        free = res.power_w < cap * (1.0 - 1e-9)
        limited = np.tile(~np.isnan(placements.power_limit_w), repeat) & free & (raw > cap)
        throttle = np.where(limited, raw / np.where(cap > 0, cap, 1.0), 1.0)
        return StepResult(
            res.step_time_s * ft * throttle,
            power,
            res.feasible,
            res.grad_accum,
            res.t_pass_s,
            res.t_comm_s,
            res.clock_scale,
            res.peak_mem_bytes,
            res.compute_busy,
            res.hbm_busy,
            res.gpu_busy,
        )
