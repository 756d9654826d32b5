"""Offline replay of a recorded trace (sacct -P / --json, SWF, CSV) through scheduling policies.

One pass reads the trace, maps its jobs (rule in easlurm.sim.traces.mapping and docs/replay.md),
collects the recorded schedule (the baseline row) and the oracle-vs-measured energy pairs, then
each policy replays the trace again from the file (streaming: no job list is held) against an
oracle whose power is calibrated per model class on the trace's own measurements.
"""

from __future__ import annotations

import html
import json
import logging
import math
import pickle
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from easlurm.model.build import build_oracle, default_catalogue
from easlurm.model.node_power import add_node_base, apply_power_saving
from easlurm.model.oracle import NoisyOracle
from easlurm.priority.policies import REGISTRY, get_policy
from easlurm.sim.campaign_run import row_of, write_tables
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.differences import QUEUED_AFTER_S
from easlurm.sim.engine.pending import DEFAULT_QUEUE_DEPTH
from easlurm.sim.identical import DIGEST_KEY, outcome_digest
from easlurm.sim.replay_savings import JobEnergies, intervals
from easlurm.sim.replay_window import align, savings, savings_section
from easlurm.sim.report import write_report
from easlurm.sim.runner import simulate
from easlurm.sim.site_baselines import DEFAULT_POWER_SAVING, baseline_runs
from easlurm.sim.traces.baseline import RecordedBaseline
from easlurm.sim.traces.calibration import CalibratedOracle, Calibrator, ClassCheck
from easlurm.sim.traces.mapping import Mapped, MappingStats, ReplayOptions, TraceMapper, map_trace
from easlurm.sim.traces.reader import SubmitOrder, open_trace, trace_format
from easlurm.sim.traces.record import TraceStats
from easlurm.sim.traces.sizing import cluster_for, measure
from easlurm.sim.traces.swf_gpus import SwfMachine, swf_machine
from easlurm.units import format_duration, format_number

log = logging.getLogger(__name__)

BASELINE_LABEL = "recorded"
SimulateFn = Callable[..., Any]


@dataclass
class ReplayResult:
    """Everything a replay report needs; `records` have the campaign record shape (see report.py)."""

    trace: str
    trace_stats: TraceStats
    mapping: MappingStats
    calibration: list[ClassCheck]
    baseline: dict[str, Any]
    #: (policy, seed, result: {metrics, power_times_s, power_w, user_gpu_share}) per simulated run
    runs: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    power_budget_w: float | None = None
    seed: int = 0
    cluster_name: str = ""
    cluster_gpus: int = 0
    cluster_sized: bool = False  # no cluster given: sized like the trace's own record
    notices: list[str] = field(default_factory=list)  # said before any simulation (fit, sizing)
    #: the replayed jobs' arrival rate: jobs over the span of their submit times (None under two jobs)
    arrival_jobs_per_h: float | None = None
    unknown_start_jobs: int = 0  # replayed jobs whose recorded start the trace does not say
    #: every row's energy is over [0, window_s] and the whole target cluster (sim/replay_window.py)
    window_s: float | None = None
    #: what the replay assumed that the trace does not say (where the cluster came from, processors per GPU)
    assumptions: list[str] = field(default_factory=list)
    #: each job's energy in the record and under each policy (seed mean): the savings' intervals
    job_energies: JobEnergies | None = field(default=None, repr=False)

    def run(self, policy: str, seed: int | None = None) -> dict[str, Any]:
        """The result of one policy (its first seed unless `seed` is given); KeyError when absent."""
        for name, s, result in self.runs:
            if name == policy and (seed is None or s == seed):
                return result
        raise KeyError(policy)

    def records(self) -> list[dict[str, Any]]:
        """Campaign-shaped records (index, run_id, experiment, label, spec, result), baseline first."""
        hours = (self.baseline.get("metrics", {}).get("makespan_s") or 0.0) / 3600.0
        out = []
        rows = [(BASELINE_LABEL, self.seed, self.baseline), *self.runs]
        for i, (label, seed, result) in enumerate(rows):
            spec = {
                "scenario": Path(self.trace).name,
                "policy": label,
                "seed": seed,
                "load_jobs_per_h": None,
                "power_budget_w": self.power_budget_w,
                "hours": hours,
            }
            out.append(
                {
                    "index": i,
                    "run_id": f"replay-{label}-s{seed}",
                    "experiment": "replay",
                    "label": label,
                    "spec": spec,
                    "result": result,
                }
            )
        return out

    def savings_per_job(self) -> list[dict[str, Any]]:
        """Per policy, the energy per job saved against the record and its split (replay_window.savings),
        with the 95% interval over jobs and its verdict (replay_savings) where per-job energies are known."""
        rows = savings([(r["label"], r["result"].get("metrics", {})) for r in self.records()], BASELINE_LABEL)
        if self.job_energies is not None:
            for row, interval in zip(rows, intervals(self.job_energies, rows, self.seed)):
                row.update(interval.to_dict())
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "trace": self.trace,
            "trace_stats": self.trace_stats.to_dict(),
            "mapping": self.mapping.to_dict(),
            "calibration": [c.to_dict() for c in self.calibration],
            "power_budget_w": self.power_budget_w,
            "seed": self.seed,
            "cluster": {
                "name": self.cluster_name,
                "gpus": self.cluster_gpus,
                "sized_like_trace": self.cluster_sized,
            },
            "notices": list(self.notices),
            "assumptions": list(self.assumptions),
            "arrival_jobs_per_h": self.arrival_jobs_per_h,
            "window_s": self.window_s,
            "unexplained_waits": self.baseline.get("unexplained_waits", []),
            "savings_per_job": self.savings_per_job(),
            "rows": [
                {"label": r["label"], "seed": r["spec"]["seed"], "metrics": _clean(r["result"]["metrics"])}
                for r in self.records()
            ],
        }


def _clean(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def _idle_by_type(mapper: TraceMapper) -> dict[str, float]:
    return {t: float(mapper.catalogue.get(t).idle_w) for t in mapper.cluster_types}


def size_cluster(
    trace: str, fmt: str, skip_bad: bool, trace_options: dict[str, Any], machine: SwfMachine | None = None
) -> tuple[Any, str]:
    """(a cluster sized like the trace's record, the sentence that announces it); one quiet read. An SWF
    log's `machine` (its header's MaxProcs and MaxNodes) bounds the size."""
    quiet = TraceStats(quiet=True)
    source = open_trace(trace, fmt, skip_bad=skip_bad, stats=quiet, **trace_options)
    size = measure(SubmitOrder(source, stats=quiet), default_catalogue())
    bound: dict[str, int | None] = {}
    if machine is not None:
        bound = {"max_gpus": machine.max_gpus, "max_nodes": machine.max_nodes, "node_gpus": machine.node_gpus}
    sized = cluster_for(size, **bound)
    if sized is None:
        default = ClusterSpec.default()
        return default, (
            f"no --cluster given and no job of the trace ran with GPUs for a known time: the default cluster "
            f"{default.name} ({default.n_gpus} GPUs) is the target"
        )
    types = ", ".join(f"{p} {t}" for t, p in size.peak_by_type.items())
    if machine is not None and machine.max_gpus is not None:
        types += (
            f"; within the machine of the log's header, MaxProcs {machine.max_procs:,} = {machine.max_gpus:,} GPUs"
            + (f" on MaxNodes {machine.max_nodes:,}" if machine.max_nodes is not None else "")
        )
    if size.estimated:
        return sized, (
            f"no --cluster given: the target is a cluster sized like the trace's own, {sized.name} "
            f"({len(sized.nodes)} nodes, {sized.n_gpus} GPUs), holding an estimate of the most GPUs its "
            f"record ran at once ({size.peak_gpus}: {types}). It is an estimate: the trace does not say when "
            f"{size.estimated:,} of its {size.jobs:,} jobs started, so each is counted from its submission for "
            "its run time (no wait); the record's own waits could have made its peak lower or higher"
        )
    return sized, (
        f"no --cluster given: the target is a cluster sized like the trace's own, {sized.name} "
        f"({len(sized.nodes)} nodes, {sized.n_gpus} GPUs), holding the most GPUs its record ran at once "
        f"({size.peak_gpus}: {types})"
    )


def _fit_notice(
    fit: dict[str, Any], cluster_name: str, jobs: int, depth: int | None = DEFAULT_QUEUE_DEPTH
) -> str:
    """The sentence said before simulating a trace whose record does not fit the target cluster."""
    sees = "every pending job" if depth is None else f"the first {depth:,} pending jobs"
    return (
        f"the trace's record ran up to {fit['peak_gpus']:,} GPUs at once; cluster {cluster_name} has "
        f"{fit['cluster_gpus']:,}: the policies must queue what the record ran at once, so the replay of "
        f"{jobs:,} jobs compares a different load (each decision sees {sees}, "
        "as Slurm's default_queue_depth bounds each scheduling pass; --queue-depth); the "
        f"recorded row's energy is left blank. For a like-for-like comparison use a cluster of at least "
        f"{fit['suggest_gpus']:,} GPUs (--cluster, or none to size it like the trace)"
    )


@dataclass(frozen=True)
class ReplayRequest:
    """What `replay` replays, on what, and who hears about it: one frozen value instead of twenty keywords.

    `trace` is replayed on `cluster` (a ClusterSpec) under each of `policies`; the recorded schedule is the
    baseline. Each policy runs once per seed in `seeds` (default: just `seed`): the seed drives the noise of
    the oracle the policy sees (`noise_sigma`), so several seeds give confidence intervals.
    `cluster` None: a cluster sized like the trace's record (one extra read of the trace);
    `cluster_source` says where `cluster` came from (for the report's assumptions).
    `compare_retype` also runs each policy with jobs of unknown GPU type free to move (`name+retype`).
    `max_slowdown` bounds the slowdown of the power limits the energy policies choose (default: theirs);
    `compare_limits` also runs each of them without limits (`name+nolimit`), so that the report can tell
    the saving of the limits from that of the placement. Every row's energy is then put on one window and
    the same GPUs (sim/replay_window.py). `power_saving` changes the cluster's power saving
    (SimSpec.power_saving) for the simulated rows; the record keeps every node on. `baselines` adds what a
    site does today (sim/site_baselines.py): `slurm`, the static-cap sweep and `slurm+power-saving`
    (Slurm's power saving as `power_saving` sets it, else SuspendTime 600 s), each policy the list does not
    already name; a policy named `NAME+power-saving` is NAME on the cluster with that power saving. An SWF
    log needs `trace_options["procs_per_gpu"]`, its own `ProcsPerGPU` header or a `cluster`: ConfigError
    otherwise (a CPU log is not silently a GPU cluster).

    Hooks: `simulate_fn` defaults to easlurm.sim.runner.simulate (injectable for tests);
    `progress_bar(jobs, n, label)` wraps each run's job stream (n jobs) to show progress; `on_progress`
    hears a line per finished run; `on_notice(sentence)` hears, before any simulation, what the user must
    know about the target: the sized cluster, or a record that does not fit it (also kept in
    `result.notices`).
    """

    trace: str | Path
    cluster: Any | None
    policies: Sequence[str]
    fmt: str = "auto"
    skip_bad: bool = False
    trace_options: dict[str, Any] | None = None
    power_budget_w: float | None = None
    seed: int = 0
    seeds: Sequence[int] | None = None
    noise_sigma: float = 0.10
    options: ReplayOptions | None = None
    calibrate: bool = True
    compare_retype: bool = False
    max_slowdown: float | None = None
    compare_limits: bool = False
    cluster_source: str | None = None
    power_saving: tuple[tuple[str, Any], ...] = ()
    baselines: bool = False
    simulate_fn: SimulateFn | None = None
    on_progress: Callable[[str], None] | None = None
    progress_bar: Callable[[Iterator[Any], int, str], Iterator[Any]] | None = None
    on_notice: Callable[[str], None] | None = None
    #: pending jobs each decision sees, in queue order (None: all; sim/engine/pending.py)
    queue_depth: int | None = DEFAULT_QUEUE_DEPTH


class _PlannedRun(NamedTuple):
    """One simulated row to run (once per seed): its label and suffix (`+retype`, `+nolimit`), the mapping
    options, what the simulator is given as policy (a name or a maker) and the cluster it runs on."""

    label: str
    suffix: str
    options: ReplayOptions
    policy: Any
    cluster: Any


@dataclass
class _Record:
    """The first pass over the trace: its mapped jobs spilled to disk, the recorded schedule, the
    oracle-vs-measured energy pairs and the span of submit times."""

    stats: TraceStats
    mapper: TraceMapper
    baseline: RecordedBaseline
    calibrator: Calibrator
    spill: _SpecSpill
    first_submit_s: float = math.inf
    last_submit_s: float = -math.inf


def replay(request: ReplayRequest) -> ReplayResult:
    """Replay the request's trace under each policy against its recorded schedule (see ReplayRequest)."""
    return _Replay(request).run()


class _Replay:
    """One replay, in the steps its docstrings name: choose the target cluster, read the trace once, build
    the recorded row, plan the simulated runs, run each, and put every row on one window."""

    def __init__(self, request: ReplayRequest) -> None:
        self.request = request
        self.trace = str(request.trace)
        self.options = request.options or ReplayOptions()
        self.trace_options: dict[str, Any] = request.trace_options or {}
        self.notices: list[str] = []
        self.assumptions: list[str] = []
        self.cluster: Any = None  # the target, once chosen
        self.sized = False  # no cluster given: sized like the trace's own record

    def notice(self, sentence: str) -> None:
        """Say what the user must know before any simulation (kept in the result's notices too)."""
        self.notices.append(sentence)
        log.info("%s", sentence)
        if self.request.on_notice is not None:
            self.request.on_notice(sentence)

    def run(self) -> ReplayResult:
        """The steps in order; the spilled jobs of the first pass serve every run, then go."""
        cluster = self.cluster = self.target_cluster()
        truth = build_oracle()
        record = self.read_record(cluster, truth)
        checks = record.calibrator.checks() if self.request.calibrate else []
        scales = {c.model: c.power_scale for c in checks}
        truth_c = CalibratedOracle(truth, scales)
        result = self.recorded_result(cluster, record, checks, truth_c)
        seeds = self.request.seeds if self.request.seeds is not None else [self.request.seed]
        for planned in self.planned_runs(cluster):
            for run_seed in seeds:
                self.simulate_one(result, planned, run_seed, record, (truth, truth_c, scales))
        record.spill.close()
        _one_window(result, cluster, record.mapper)
        return result

    def target_cluster(self) -> Any:
        """The cluster replayed on, with the request's power saving: the given one, else one sized like the
        trace's record; an SWF log's header (or `procs_per_gpu`) says how many processors make a GPU."""
        request = self.request
        cluster = request.cluster
        sized = cluster is None
        machine = None
        if trace_format(self.trace, request.fmt, self.trace_options.get("delimiter")) == "swf":
            machine = swf_machine(
                self.trace, self.trace_options.get("procs_per_gpu"), cluster_given=not sized
            )
            self.trace_options = {**self.trace_options, "procs_per_gpu": machine.procs_per_gpu}
        if cluster is None:
            cluster, sentence = size_cluster(
                self.trace, request.fmt, request.skip_bad, self.trace_options, machine
            )
            self.notice(sentence)
            self.assumptions.append(
                f"cluster: {cluster.name}, sized like the trace's own record (no --cluster given)"
            )
        else:
            self.assumptions.append(f"cluster: {cluster.name}, from {request.cluster_source or 'the caller'}")
        if machine is not None:
            self.assumptions.append(machine.sentence())
        self.sized = sized
        return replace(
            cluster,
            power_saving=apply_power_saving(cluster.power_saving, request.power_saving, "--suspend-time"),
        )

    def read_record(self, cluster: Any, truth: Any) -> _Record:
        """The one pass over the trace: map its jobs, spill them for the policy passes, collect the recorded
        schedule and the measured energies the oracle is calibrated on."""
        stats = TraceStats()
        mapper = TraceMapper(cluster, truth, self.options)
        baseline = RecordedBaseline(
            _idle_by_type(mapper), mapper.cluster.gpus_by_type(), mapper.max_node_gpus
        )
        record = _Record(stats, mapper, baseline, Calibrator(), _SpecSpill())
        t0 = time.perf_counter()
        source = open_trace(
            self.trace, self.request.fmt, skip_bad=self.request.skip_bad, stats=stats, **self.trace_options
        )
        for m in map_trace(source, mapper, stats):
            record.spill.add(m.spec)
            record.first_submit_s = min(record.first_submit_s, m.spec.submit_s)
            record.last_submit_s = max(record.last_submit_s, m.spec.submit_s)
            baseline.add(m)
            measured = m.trace.measured_gpu_energy_j
            if measured is None:
                measured = m.trace.measured_energy_j
            record.calibrator.add(m.spec.model, m.power_w * m.runtime_s, measured)
        log.info(
            "trace %s: %d jobs mapped in %.1f s", self.trace, mapper.stats.mapped, time.perf_counter() - t0
        )
        return record

    def recorded_result(
        self, cluster: Any, record: _Record, checks: list[ClassCheck], truth_c: Any
    ) -> ReplayResult:
        """The result with its recorded row (the recorded placements' power under the calibrated,
        TDP-capped oracle the simulated runs use); says when the record does not fit the cluster."""
        request, mapper, baseline = self.request, record.mapper, record.baseline
        power_model = TraceMapper(cluster, truth_c, self.options)
        result = ReplayResult(
            trace=self.trace,
            trace_stats=record.stats,
            mapping=mapper.stats,
            calibration=checks,
            baseline=baseline.result(
                power_of=lambda key: power_model.step(*key)[1], power_budget_w=request.power_budget_w
            ),
            power_budget_w=request.power_budget_w,
            seed=request.seed,
            cluster_name=cluster.name,
            cluster_gpus=cluster.n_gpus,
            cluster_sized=self.sized,
            notices=self.notices,
            unknown_start_jobs=baseline.unknown_start,
            assumptions=self.assumptions,
            job_energies=JobEnergies(baseline.job_energy_j(lambda key: power_model.step(*key)[1])),
        )
        if mapper.stats.mapped >= 2 and record.last_submit_s > record.first_submit_s:
            span_h = (record.last_submit_s - record.first_submit_s) / 3600.0
            result.arrival_jobs_per_h = mapper.stats.mapped / span_h
        fit = result.baseline.get("fit")
        if fit and not fit["fits"]:
            self.notice(_fit_notice(fit, cluster.name, mapper.stats.mapped, request.queue_depth))
        if request.on_progress:
            request.on_progress(f"{BASELINE_LABEL}: {mapper.stats.mapped} jobs")
        return result

    def planned_runs(self, cluster: Any) -> list[_PlannedRun]:
        """Every simulated row: each policy (and its `+retype` variant), its run without limits where asked,
        then the site baselines the list does not name."""
        request, options = self.request, self.options
        variants = [("", options)]
        if request.compare_retype:
            variants.append(("+retype", replace(options, allow_retype=True)))
        planned: list[_PlannedRun] = []
        for label, (suffix, run_options) in ((n, v) for n in request.policies for v in variants):
            name, run_cluster = label, cluster
            if label.endswith(POWER_SAVING_SUFFIX):  # `zeus+power-saving`: zeus under Slurm's power saving
                name, run_cluster = label.removesuffix(POWER_SAVING_SUFFIX), _saving_cluster(cluster)
            planned.append(
                _PlannedRun(label, suffix, run_options, _policy(name, request.max_slowdown), run_cluster)
            )
            if request.compare_limits and _chooses_limits(name):
                planned.append(
                    _PlannedRun(label, suffix + "+nolimit", run_options, _unlimited(name), run_cluster)
                )
        if request.baselines:
            planned += _baseline_runs(cluster, request.policies, options)
        return planned

    def simulate_one(
        self,
        result: ReplayResult,
        planned: _PlannedRun,
        run_seed: int,
        record: _Record,
        oracles: tuple[Any, Any, dict[str, float]],
    ) -> None:
        """One simulated run of a planned row and seed, added to `result`: the oracle the policy sees is
        noisy with the run's seed, the truth is the calibrated oracle."""
        request = self.request
        truth, truth_c, scales = oracles
        name, suffix, run_options, policy, run_cluster = planned
        seen: Any = truth_c
        if request.noise_sigma > 0:
            noisy = NoisyOracle(
                sigma=request.noise_sigma, seed=run_seed, params=truth.params, catalogue=truth.catalogue
            )
            seen = CalibratedOracle(noisy, scales)
        jobs, n_jobs = self.job_stream(run_options, record, truth)
        if request.progress_bar is not None:
            jobs = request.progress_bar(jobs, n_jobs, f"{name}{suffix} (seed {run_seed})")
        sim_fn: SimulateFn = request.simulate_fn if request.simulate_fn is not None else simulate
        t1 = time.perf_counter()
        sim = sim_fn(
            run_cluster,
            jobs,
            policy() if callable(policy) else policy,
            seed=run_seed,
            oracle=seen,
            truth_oracle=truth_c,
            power_budget_w=request.power_budget_w,
            queue_depth=request.queue_depth,
        )
        wall = time.perf_counter() - t1
        run = sim.to_dict() if hasattr(sim, "to_dict") else dict(sim)
        if result.job_energies is not None:
            result.job_energies.add(name + suffix, run.get("jobs"))
        _keep_for_report(run, record.baseline.users_known, wall, n_jobs)
        result.runs.append((name + suffix, run_seed, run))
        log.info("policy %s seed %d: %d jobs in %.1f s", name, run_seed, n_jobs, wall)
        if request.on_progress:
            request.on_progress(f"{name} (seed {run_seed}): {n_jobs} jobs in {wall:.1f} s")

    def job_stream(
        self, run_options: ReplayOptions, record: _Record, truth: Any
    ) -> tuple[Iterator[Any], int]:
        """(the mapped jobs of one run, how many): read back from the spill, or, under other mapping
        options, mapped again from the trace (quietly: the first pass counted and reported malformed
        records)."""
        n_jobs = record.mapper.stats.mapped
        if run_options == self.options:
            return record.spill.specs(), n_jobs
        run_mapper = TraceMapper(self.cluster, truth, run_options)
        run_mapper._step = record.mapper._step  # same placements, same answers: share the cache
        run_stats = TraceStats(quiet=True)
        source = open_trace(
            self.trace,
            self.request.fmt,
            skip_bad=self.request.skip_bad,
            stats=run_stats,
            **self.trace_options,
        )
        return _specs(map_trace(source, run_mapper, run_stats)), n_jobs


def _keep_for_report(run: dict[str, Any], users_known: bool, wall_s: float, n_jobs: int) -> None:
    """Keep of a simulated run what the report needs: its queueing and outcome digest from the per-job
    rows, which then leave (100k jobs); no fairness figure where the trace has no user column."""
    waits = _WaitCount()
    waits.add_rows(run.get("jobs"))
    run[DIGEST_KEY] = outcome_digest(run.get("jobs"))  # identical rows are merged in the report
    run.pop("jobs", None)
    run.pop("spec", None)
    run.setdefault("metrics", {})["replay_wall_s"] = wall_s
    run["metrics"]["jobs_per_s"] = n_jobs / wall_s if wall_s > 0 else None
    run["metrics"].update(waits.metrics())
    if not users_known:
        run["metrics"]["jain_index"] = None  # no user column: unknown, not perfect


def _one_window(result: ReplayResult, cluster: Any, mapper: TraceMapper) -> None:
    """Put every row's energy on one window and the whole target cluster (sim/replay_window.py)."""
    idle_total_w = cluster.base_w + sum(
        _idle_by_type(mapper).get(t, 0.0) * n for t, n in mapper.cluster.gpus_by_type().items()
    )
    add_node_base(result.baseline, cluster.base_w)
    result.baseline["idle_total_w"] = idle_total_w
    result.window_s = align([result.baseline, *(r for _, _, r in result.runs)], idle_total_w)


def _baseline_runs(cluster: Any, policies: Sequence[str], options: ReplayOptions) -> list[_PlannedRun]:
    """The runs `--baselines` adds: (label, "", options, policy, cluster) of each baseline not named yet;
    `slurm+power-saving` runs `slurm` on the cluster with power saving on."""
    named = {p.lower() for p in policies}
    out = []
    for b in baseline_runs():
        if b.label in named:
            continue
        run_cluster = _saving_cluster(cluster) if b.power_saving else cluster
        out.append(_PlannedRun(b.label, "", options, b.policy, run_cluster))
    return out


#: a policy named `NAME+power-saving` runs NAME on the cluster with Slurm's power saving on
POWER_SAVING_SUFFIX = "+power-saving"


def _saving_cluster(cluster: Any) -> Any:
    """The cluster with its power saving (YAML, flags) where it has one, else SuspendTime 600 s."""
    if cluster.power_saving is not None:
        return cluster
    return replace(cluster, power_saving=apply_power_saving(None, DEFAULT_POWER_SAVING, "power saving"))


def _chooses_limits(name: str) -> bool:
    entry = REGISTRY.get(name.lower())
    return entry is not None and entry[0].limits == "bounded"


def _unlimited(name: str) -> Any:
    """A maker of the policy with every job at the default power limit."""
    return lambda: get_policy(name, power_limits=False)


def _policy(name: str, max_slowdown: float | None) -> Any:
    """What the simulator is given: the name, or (with a slowdown bound) a maker of a fresh policy."""
    if max_slowdown is None or not _chooses_limits(name):
        return name
    return lambda: get_policy(name, max_slowdown=max_slowdown)


#: JobSpec fields whose values repeat across jobs (read back from the spill as one shared object each)
_SHARED_FIELDS = (
    "user",
    "model",
    "precision",
    "partition",
    "gpu_types",
    "batch_options",
    "gpu_options",
    "power_limit_options_w",
)


#: jobs pickled together in the spill: one unpickler per chunk (its memo bounded by the chunk), and the
#: values a chunk repeats (user, model, options) written once (one unpickler per job, as before, cost its
#: set-up per job and wrote each job's repeated values again)
SPILL_CHUNK = 1024


class _SpecSpill:
    """Mapped jobs pickled to an anonymous temporary file in chunks of SPILL_CHUNK, in order: a policy pass
    reads them back (bounded memory, and much faster than parsing and mapping the trace again)."""

    def __init__(self) -> None:
        self._fh = tempfile.TemporaryFile()  # noqa: SIM115 - lives across passes; close() ends it
        self._pickler = pickle.Pickler(self._fh, protocol=pickle.HIGHEST_PROTOCOL)
        self._chunk: list[Any] = []

    def close(self) -> None:
        self._fh.close()

    def add(self, spec: Any) -> None:
        self._chunk.append(spec)
        if len(self._chunk) >= SPILL_CHUNK:
            self._dump()

    def _dump(self) -> None:
        if self._chunk:
            self._pickler.dump(self._chunk)
            self._pickler.clear_memo()  # each chunk alone: reading one back never needs another
            self._chunk = []

    def specs(self) -> Iterator[Any]:
        self._dump()
        self._fh.flush()
        self._fh.seek(0)
        end = self._fh.seek(0, 2)
        self._fh.seek(0)
        shared: dict[Any, Any] = {}
        while self._fh.tell() < end:
            # one unpickler per chunk, as each was pickled alone: one unpickler for the stream would keep
            # every object it ever read in its memo (and clearing that memo costs ~1 ms a job)
            for spec in pickle.load(self._fh):
                # share each job's repeated values (user, model, options) with the chunks before it, so
                # that a million jobs held by the simulator do not hold a thousand copies of each
                for name in _SHARED_FIELDS:
                    value = getattr(spec, name)
                    object.__setattr__(spec, name, shared.setdefault(value, value))
                yield spec


def _specs(mapped: Iterator[Mapped]) -> Iterator[Any]:
    for m in mapped:
        yield m.spec


class _WaitCount:
    """Queueing of one simulated run, from its per-job rows: did the cluster ever make a job wait?"""

    def __init__(self) -> None:
        self.queued: int | None = None
        self.max_wait_s: float | None = None

    def add_rows(self, rows: Any) -> None:
        if not isinstance(rows, list):
            return
        waits = [
            r["start_s"] - r["submit_s"]
            for r in rows
            if isinstance(r, dict) and r.get("start_s") is not None and r.get("submit_s") is not None
        ]
        if waits:
            self.queued = sum(1 for w in waits if w > QUEUED_AFTER_S)
            self.max_wait_s = max(waits)

    def metrics(self) -> dict[str, float]:
        if self.queued is None or self.max_wait_s is None:
            return {}
        return {"queued_jobs": float(self.queued), "max_wait_s": float(self.max_wait_s)}


def _trace_section(result: ReplayResult) -> str:
    """Markdown: what the trace held, what was replayed, and the oracle check; nothing dropped silently."""
    st, mp = result.trace_stats, result.mapping
    lines = [
        "",
        "## Trace",
        "",
        f"Trace `{result.trace}`: {st.rows} records read, {st.jobs} jobs, {st.steps_folded} step rows "
        f"folded into their jobs, {st.skipped_bad} malformed records skipped (--skip-bad), "
        f"{st.reordered} jobs moved to keep submit order."
        + (
            f" {st.repeated_headers} repeated header lines (concatenated dumps) skipped: they are not "
            "records, and are counted neither as jobs nor as malformed."
            if st.repeated_headers
            else ""
        ),
        "",
        f"Replayed: {mp.mapped} jobs ({mp.named} name their model; the others get a workload class "
        "from runtime and GPU count, see docs/replay.md). Baseline row `recorded`: the trace's own "
        "starts and ends, energy from the oracle at the recorded placements.",
        "",
    ]
    reasons = {
        **{f"reader: {k}": v for k, v in st.excluded.items() if v},
        **{k: v for k, v in mp.excluded.items() if v},
    }
    if st.skipped_bad:
        reasons["malformed (skipped)"] = st.skipped_bad
    if reasons:
        lines += ["| Not replayed | Jobs |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(reasons.items())]
    else:
        lines.append("Every job read was replayed.")
    if mp.cancelled_pending:
        lines += [
            "",
            f"`never_started` includes {mp.cancelled_pending} jobs cancelled while pending (Start = End or "
            "unknown, no node assigned): their wait is not a run and is not replayed.",
        ]
    if mp.gpu_type_relaxed or mp.gpu_type_guessed:
        lines += [
            "",
            f"GPU type relaxed (requested type not in the cluster): {mp.gpu_type_relaxed}; "
            f"recorded type unknown, cluster default assumed: {mp.gpu_type_guessed} (kept on that type "
            "for the comparison unless --allow-retype; --compare-retype shows both).",
        ]
    lines += _fit_lines(result)
    if st.missing_fields:
        lines += ["", f"Fields absent from the trace (left unknown): {', '.join(sorted(st.missing_fields))}."]
    if st.bad_examples:
        lines += ["", "First malformed records:", ""] + [f"- `{b}`" for b in st.bad_examples]
    classes = {k: v for k, v in mp.by_model.items() if v}
    if classes:
        lines += ["", "| Workload class | Jobs |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(classes.items())]
    else:
        lines += ["", "No job was given a workload class: none was replayed."]
    if result.calibration:
        lines += [
            "",
            "### Oracle check against measured energy",
            "",
            "| Model | Jobs | Power scale | Error before (%) | Error after (%) |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {c.model} | {c.jobs} | {c.power_scale:.3f} | {c.mape_before:.1f} | {c.mape_after:.1f} |"
            for c in result.calibration
        ]
    else:
        lines += ["", "No job of the trace carries easlurm energy records: the oracle is used uncalibrated."]
    return "\n".join(lines) + "\n"


def _fit_lines(result: ReplayResult) -> list[str]:
    """Markdown: does the recorded schedule fit the target cluster, and did any policy ever queue a job."""
    fit = result.baseline.get("fit")
    if not fit:
        return []
    peak, have = fit["peak_gpus"], fit["cluster_gpus"]
    span_s = result.baseline.get("metrics", {}).get("makespan_s") or 0.0
    lines = ["", "### Recorded schedule against the target cluster", ""]
    if not fit["fits"]:
        by_type = "; ".join(f"{t}: {p} of {c}" for t, (p, c) in fit["over_by_type"].items())
        share = 100.0 * fit["time_over_s"] / span_s if span_s > 0 else 0.0
        lines.append(
            f"**The recorded schedule does not fit the target cluster**: it ran up to {peak} GPUs at once, "
            f"the cluster has {have} ({max(peak - have, 0)} more"
            + (f"; by type {by_type}" if by_type else "")
            + f"), above capacity for {format_duration(fit['time_over_s'])} ({share:.0f}% of the recorded span). "
            "The recorded row's energy, idle energy, peak power and time over budget are left blank (the "
            "cluster could not have run that schedule; its busy energy stands), and the policies must queue "
            f"what the record ran at once. Replay on a cluster of at least {fit['suggest_gpus']} GPUs "
            "(--cluster) to compare energy with the record."
        )
    else:
        lines.append(
            f"The recorded schedule fits the target cluster: at most {peak} of its {have} GPUs busy at once "
            f"(mean {fit['mean_busy_gpus']:.3g})."
        )
    runs = [r for _, _, r in result.runs]
    queued = [r.get("metrics", {}).get("queued_jobs") for r in runs]
    if runs and all(q == 0 for q in queued):
        headroom = 100.0 * (1.0 - peak / have) if have else 0.0
        peak_w = max((r.get("metrics", {}).get("max_power_w") or 0.0) for r in runs)
        smaller = max(8, -(-peak // 2 // 8) * 8)
        lines += [
            "",
            f"No policy ever made a job wait more than {QUEUED_AFTER_S:.0f} s: the cluster never queued a job "
            f"(the record used at most {peak} of {have} GPUs, {headroom:.0f}% headroom at its peak), so the "
            "policies can differ only in where they place jobs. To see them differ: `--deadline-slack 1.5` "
            "(jobs get deadlines), "
            + (
                f"`--power-budget {0.6 * peak_w:.0f}W` (60% of the highest peak), "
                if peak_w
                else "`--power-budget`, "
            )
            + f"or a smaller cluster (`--cluster` with about {smaller} GPUs).",
        ]
    return lines


def write_replay_report(result: ReplayResult, out_dir: str | Path, *, html_too: bool = True) -> Path:
    """report.md (+ html, plots, summary.csv) through the campaign report, plus replay.json and
    results.csv; returns the Markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = result.records()
    (out / "replay.json").write_text(json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n")
    write_tables(out, [row_of(r) for r in records])
    if result.mapping.mapped == 0:
        # nothing replayed: no plots, no tests between identical empty rows, just what was read and why
        md = out / "report.md"
        md.write_text(
            f"# Replay of {Path(result.trace).name}\n\nNo job of the trace was replayed: there is nothing "
            "to compare (no table, plots or tests). The section below says what was read and why nothing "
            "was replayable."
            + (" Assumed: " + "; ".join(result.assumptions) + "." if result.assumptions else "")
            + "\n"
            + _trace_section(result)
        )
        if html_too:
            (out / "report.html").write_text(
                f"<!doctype html><html><body><pre>{html.escape(md.read_text())}</pre></body></html>\n"
            )
        return md
    arrival = (
        f"The trace's {result.mapping.mapped:,} replayed jobs arrived at "
        f"{format_number(result.arrival_jobs_per_h)} jobs/h (their submit times span "
        f"{format_duration(result.mapping.mapped / result.arrival_jobs_per_h * 3600.0)}): the load is the "
        "trace's own, so the table has no load column."
        if result.arrival_jobs_per_h
        else "The load is the trace's own (too few jobs to give an arrival rate), so the table has no load column."
    )
    unknown = result.unknown_start_jobs
    if unknown and unknown >= result.mapping.mapped:
        arrival += (
            f" The `{BASELINE_LABEL}` row is blank: the trace does not say when any of its jobs started (SWF "
            "wait -1), so the record's schedule is unknown."
        )
    elif unknown:
        arrival += (
            f" The `{BASELINE_LABEL}` row covers only the {result.mapping.mapped - unknown:,} jobs whose start "
            f"the trace says; {unknown:,} started at unknown times (SWF wait -1)."
        )
    if result.assumptions:
        arrival += " Assumed: " + "; ".join(result.assumptions) + "."
    files = write_report(
        records,
        out,
        title=f"Replay of {Path(result.trace).name}",
        report_cfg={
            "description": arrival,
            "plots": {"replay": ["pareto", "tradeoff", "power", "fairness"]},
            "baseline_labels": [BASELINE_LABEL],
            "merge_identical": True,
        },
        html_too=html_too,
    )
    idle_total_w = result.baseline.get("idle_total_w") or 0.0
    section = savings_section(
        [(r["label"], r["result"].get("metrics", {})) for r in records],
        BASELINE_LABEL,
        result.window_s,
        idle_total_w,
        result.cluster_gpus,
        result.baseline.get("unexplained_waits", []),
        int(result.baseline.get("metrics", {}).get("unexplained_wait_jobs") or 0),
        float(result.baseline.get("metrics", {}).get("unexplained_wait_s") or 0.0),
        saved=result.savings_per_job(),
    )
    with open(files.markdown, "a") as fh:
        fh.write(section)
        fh.write(_trace_section(result))
    return files.markdown
