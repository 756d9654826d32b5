"""Trace jobs -> simulator JobSpecs: the workload-class rule, the recorded placement and the work.

The rule for a job whose trace names no model (documented in docs/replay.md):

1. A model is *named* when the trace's `model` field (CSV column, or the `model=` hint of easlurm's
   AdminComment records) or a token of the job name (`train-resnet50`, `vit-b16_sweep`) is a zoo model.
2. Otherwise the job gets a **workload class** from its recorded GPU count and runtime:

   | GPUs \\ runtime | < 1 h              | 1 h to 12 h        | >= 12 h                  |
   |----------------|--------------------|--------------------|--------------------------|
   | 1              | resnet50 (64/GPU)  | bert-base (32/GPU) | gpt2 (8/GPU)             |
   | 2 to 4         | vit-b16 (64/GPU)   | bert-large (16/GPU)| gpt2 (8/GPU)             |
   | 5 or more      | albert-base (32/GPU)| vit-l16 (32/GPU)  | tinyllama-1.1b (4/GPU)   |

   Short single-GPU jobs look like vision fine-tuning, long wide jobs like language-model
   pre-training; the global batch is the per-GPU batch times the recorded GPU count.
3. The **recorded placement** is (recorded GPUs, that batch, recorded GPU type): the type comes from
   the TRES/GRES (`gres/gpu:a100=4`), else from a partition named like a catalogue GPU, else the
   cluster's most numerous type. The job's work is `total_steps = recorded runtime / step time of
   the recorded placement` (at least 1), so on its recorded placement the oracle reproduces the
   recorded runtime, and on the placement a policy picks the oracle scales runtime and power.
4. Jobs the replay cannot use are counted by reason, never dropped silently: `cpu_only`,
   `never_started` (pending or cancelled before start), `unfinished` (running at dump time),
   `requeued_attempt` (an earlier try of a requeued job), `exceeds_node` (more GPUs than the
   largest node of the target cluster), `no_feasible_placement`.
5. A requested GPU type absent from the target cluster is relaxed to the same family (`a100` ->
   `a100-80gb`), else to any type (counted as `gpu_type_relaxed`). A job whose type the trace does
   not say stays pinned to the type assumed for it unless `allow_retype`.
6. Deadline: `submit + deadline_slack * time limit` when the job has a time limit and
   `deadline_slack` is set (off by default). A job with a deadline is urgent (the simulator judges
   the deadlines of urgent jobs), and so is a job whose QOS is one of `urgent_qos`.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from easlurm.errors import ModelError
from easlurm.model.build import default_catalogue
from easlurm.model.hardware import Catalogue
from easlurm.model.oracle import Placements
from easlurm.model.zoo import MODEL_NAMES, canonical_name, get_workload
from easlurm.sim.job import JobSpec
from easlurm.sim.traces.reader import SubmitOrder
from easlurm.sim.traces.record import TraceJob, TraceStats

log = logging.getLogger(__name__)

SHORT_S = 3600.0
LONG_S = 12 * 3600.0
#: (size bucket, runtime bucket) -> (zoo model, per-GPU batch). See the module docstring.
CLASS_TABLE: dict[tuple[str, str], tuple[str, int]] = {
    ("1", "short"): ("resnet50", 64),
    ("1", "medium"): ("bert-base", 32),
    ("1", "long"): ("gpt2", 8),
    ("2-4", "short"): ("vit-b16", 64),
    ("2-4", "medium"): ("bert-large", 16),
    ("2-4", "long"): ("gpt2", 8),
    ("5+", "short"): ("albert-base", 32),
    ("5+", "medium"): ("vit-l16", 32),
    ("5+", "long"): ("tinyllama-1.1b", 4),
}
#: Per-GPU batch of a named model (the class table's, else 32).
NAMED_BATCH = {model: bpg for model, bpg in CLASS_TABLE.values()}
DEFAULT_BATCH_PER_GPU = 32


def workload_class(runtime_s: float, n_gpus: int) -> tuple[str, int]:
    """(zoo model, per-GPU batch) of a job that names no model, from its recorded runtime and GPUs."""
    size = "1" if n_gpus <= 1 else "2-4" if n_gpus <= 4 else "5+"
    length = "short" if runtime_s < SHORT_S else "medium" if runtime_s < LONG_S else "long"
    return CLASS_TABLE[(size, length)]


def named_model(job: TraceJob, names: Iterable[str]) -> str | None:
    """The zoo model a job names: its `model` field, else a token of its job name; None if neither."""
    if job.model:
        try:
            return canonical_name(job.model)
        except ModelError:
            log.info("%s: model %r not in the zoo: using the workload class", job.source, job.model)
    if job.name:
        text = job.name.lower().replace("_", "-")
        found = [m.group(1) for m in _name_pattern(tuple(names)).finditer(text)]
        if found:
            return max(found, key=len)  # the most specific name the job's name holds
    return None


@functools.lru_cache(maxsize=8)
def _name_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for every zoo name as a whole token, longest first (`gpt2-xl` before `gpt2`)."""
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9])({alts})(?![a-z0-9])")


@dataclass(frozen=True)
class ReplayOptions:
    """How trace jobs become simulator jobs (see the module docstring for the rule)."""

    honor_gpu_type: bool = True
    allow_retype: bool = False  # let policies move a job whose GPU type the trace does not say
    malleable: bool = False
    deadline_slack: float | None = None
    urgent_qos: tuple[str, ...] = ("urgent",)
    precision: str = "bf16"
    reorder_window: int = 10_000
    max_jobs: int | None = None


@dataclass
class MappingStats:
    """What the mapping did with the trace's jobs, by reason and by class."""

    mapped: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)
    named: int = 0
    gpu_type_relaxed: int = 0
    gpu_type_guessed: int = 0
    cancelled_pending: int = 0  # of the never_started: cancelled before they got nodes

    def to_dict(self) -> dict[str, Any]:
        return {
            "mapped": self.mapped,
            "excluded": dict(sorted(self.excluded.items())),
            "by_model": dict(sorted(self.by_model.items())),
            "named_model": self.named,
            "gpu_type_relaxed": self.gpu_type_relaxed,
            "gpu_type_guessed": self.gpu_type_guessed,
            "cancelled_pending": self.cancelled_pending,
        }


@dataclass(frozen=True)
class Mapped:
    """One mapped job: the simulator's JobSpec and its recorded placement (for baseline and calibration)."""

    spec: Any  # easlurm.sim.job.JobSpec
    gpu_type: str  # catalogue key of the recorded placement
    n_gpus: int
    batch: int
    step_time_s: float
    power_w: float  # oracle power of the recorded placement (uncalibrated)
    runtime_s: float
    trace: TraceJob


class TraceMapper:
    """Turns TraceJobs into JobSpecs for one target cluster; oracle calls are cached per placement."""

    def __init__(self, cluster: Any, oracle: Any, options: ReplayOptions | None = None) -> None:
        cat = getattr(oracle, "catalogue", None)
        self.catalogue = cat if isinstance(cat, Catalogue) else default_catalogue()
        self.cluster = cluster.resolved(self.catalogue)
        self.oracle = oracle
        self.options = options or ReplayOptions()
        self.stats = MappingStats()
        self.model_names = tuple(MODEL_NAMES)
        by_type = self.cluster.gpus_by_type()
        self.cluster_types = tuple(sorted(by_type))
        self.default_type = max(sorted(by_type), key=lambda t: by_type[t])
        self.max_node_gpus = max(n.n_gpus for n in self.cluster.nodes)
        self._step: dict[tuple[str, int, int, str], tuple[float, float]] = {}
        self._workloads: dict[str, Any] = {}

    # -- oracle ----------------------------------------------------------------------------------
    def workload(self, model: str) -> Any:
        wl = self._workloads.get(model)
        if wl is None:
            wl = self._workloads[model] = get_workload(model, precision=self.options.precision)
        return wl

    def step(self, model: str, n_gpus: int, batch: int, gpu_type: str) -> tuple[float, float]:
        """(step time in s, power of all the job's GPUs in W) of one placement; inf when it does not fit."""
        key = (model, n_gpus, batch, gpu_type)
        hit = self._step.get(key)
        if hit is None:
            pred = self.oracle.predict(self.workload(model), Placements.of([n_gpus], [batch], [gpu_type]))
            hit = self._step[key] = (float(pred.step_time_s[0]), float(pred.power_w[0]))
        return hit

    # -- types -----------------------------------------------------------------------------------
    def _catalogue_key(self, name: str | None) -> str | None:
        if not name:
            return None
        try:
            return self.catalogue.resolve(name) if name in self.catalogue else None
        except ModelError:
            return None

    def recorded_type(self, job: TraceJob) -> str:
        """Catalogue key of the GPUs the job ran on (TRES type, partition name, else the default)."""
        key = self._catalogue_key(job.gpu_type) or self._catalogue_key(job.partition)
        if key is None:
            self.stats.gpu_type_guessed += 1
            return self.default_type
        return key

    def allowed_types(self, job: TraceJob, recorded: str) -> tuple[str, ...] | None:
        """The cluster types a job may use: its requested type (or family) when honoured, else any.

        A job whose type the trace does not say stays on the type assumed for it (the cluster's most
        numerous, or its partition's): moving it to faster GPUs would flatter the policies against
        the record. `allow_retype` frees it.
        """
        if not self.options.honor_gpu_type:
            return None
        if not job.gpu_type and self.options.allow_retype:
            return None
        if recorded in self.cluster_types:
            return (recorded,)
        family = recorded.split("-")[0]
        same = tuple(t for t in self.cluster_types if t.split("-")[0] == family)
        if not same:
            self.stats.gpu_type_relaxed += 1
            return None
        return same

    # -- mapping ---------------------------------------------------------------------------------
    def exclusion(self, job: TraceJob) -> str | None:
        """Why a job cannot be replayed, or None."""
        if job.state == "REQUEUED":
            return "requeued_attempt"
        if job.n_gpus <= 0:
            return "cpu_only"
        if job.never_started:
            if job.state == "CANCELLED":
                self.stats.cancelled_pending += 1
            return "never_started"
        if job.recorded_runtime_s is None or (job.end_s is None and not job.start_unknown):
            return "unfinished"
        if job.n_gpus > self.max_node_gpus:
            return "exceeds_node"
        return None

    def map(self, job: TraceJob, t0: float) -> Mapped | None:
        """The simulator job for one trace job (times relative to t0), or None (counted by reason)."""
        reason = self.exclusion(job)
        if reason is not None:
            self.stats.excluded[reason] += 1
            return None
        runtime_s = float(job.recorded_runtime_s or 0.0)
        n = int(job.n_gpus)
        model = named_model(job, self.model_names)
        if model is not None:
            self.stats.named += 1
            bpg = NAMED_BATCH.get(model, DEFAULT_BATCH_PER_GPU)
        else:
            model, bpg = workload_class(runtime_s, n)
        gpu_type = self.recorded_type(job)
        batch = bpg * n
        step_s, power_w = self.step(model, n, batch, gpu_type)
        if not (math.isfinite(step_s) and step_s > 0):
            self.stats.excluded["no_feasible_placement"] += 1
            log.info("%s: %s does not fit %dx%s (batch %d): excluded", job.source, model, n, gpu_type, batch)
            return None
        steps = max(1, round(runtime_s / step_s))
        gpu_options: tuple[int, ...] = (n,)
        batch_options: tuple[int, ...] = (batch,)
        if self.options.malleable:
            others = [
                k for k in (1, 2, 4, 8, 16) if k != n and k <= self.max_node_gpus and n / 2 <= k <= 2 * n
            ]
            gpu_options = (n, *others)
            batch_options = tuple(dict.fromkeys((batch, *(bpg * k for k in others))))
        submit_s = job.submit_s - t0
        deadline = None
        if self.options.deadline_slack is not None and job.timelimit_s:
            deadline = submit_s + self.options.deadline_slack * job.timelimit_s
        spec = JobSpec(
            job_id=job.job_id,
            user=job.user or "unknown",
            submit_s=submit_s,
            model=model,
            total_steps=steps,
            batch_options=batch_options,
            gpu_options=gpu_options,
            gpu_types=self.allowed_types(job, gpu_type),
            malleable=self.options.malleable,
            urgent=deadline is not None or bool(job.qos and job.qos.lower() in self.options.urgent_qos),
            deadline_s=deadline,
            precision=self.options.precision,
            partition=job.partition,
            recorded_start_s=job.start_s - t0 if job.start_s is not None else None,
            recorded_end_s=job.end_s - t0 if job.end_s is not None else None,
            time_limit_s=job.timelimit_s if job.timelimit_s and job.timelimit_s > 0 else None,
        )
        self.stats.mapped += 1
        self.stats.by_model[model] += 1
        return Mapped(spec, gpu_type, n, batch, step_s, power_w, runtime_s, job)


def map_trace(
    jobs: Iterable[TraceJob], mapper: TraceMapper, stats: TraceStats | None = None
) -> Iterator[Mapped]:
    """Mapped jobs in submit order, times relative to the first submit; streaming (bounded buffer).

    With `max_jobs`, reading stops at the N-th replayable job: the jobs already read ahead for
    submit ordering are counted as `beyond_max_jobs` and `stats.stopped_early` is set (the rest
    of the file is not read).
    """
    t0: float | None = None
    n = 0
    limit = mapper.options.max_jobs
    ordered = SubmitOrder(jobs, window=mapper.options.reorder_window, stats=stats)
    for job in ordered:
        if t0 is None:
            t0 = job.submit_s
        mapped = mapper.map(job, t0)
        if mapped is None:
            continue
        yield mapped
        n += 1
        if limit is not None and n >= limit:
            if stats is not None:
                if ordered.held:
                    stats.exclude("beyond_max_jobs", ordered.held)
                stats.stopped_early = True
            return
