"""Campaign plans: a YAML matrix (scenarios x policies x loads x seeds) expanded into reproducible runs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easlurm.config import check_setting, read_yaml_file
from easlurm.errors import ConfigError
from easlurm.inputs import check_work
from easlurm.model.node_power import PowerSaving
from easlurm.sim.site_baselines import DEFAULT_POWER_SAVING, STATIC_CAPS, baseline_runs
from easlurm.sim.spec import MAX_LOAD_JOBS_PER_H, SimSpec
from easlurm.units import MAX_INT, parse_duration_s, parse_power_w

SCHEMA_VERSION = 1

#: Keys a plan may set at the top level and inherit into each experiment (defaults come from `sim.*`).
_SHARED_KEYS = (
    "scenarios",
    "policies",
    "seeds",
    "loads_jobs_per_h",
    "hours",
    "power_budget_w",
    "cluster",
    "noise_sigma",
    "checkpoint_interval_s",
    "power_saving",
    "baselines",
)
_TOP_KEYS = {*_SHARED_KEYS, "name", "description", "experiments", "report"}
_EXPERIMENT_KEYS = {*_SHARED_KEYS, "name", "description"}
_POLICY_KEYS = {"policy", "label", "params", "power_saving"}
_BASELINE_KEYS = {"static_caps", "power_saving"}
_SAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class PolicyEntry:
    """A policy as the plan names it: `label` tells apart two settings of the same policy."""

    label: str
    policy: str
    params: tuple[tuple[str, Any], ...] = ()
    #: changes to the experiment's power saving for this policy only (`zeus+power-saving`)
    power_saving: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Experiment:
    """One matrix of the plan; every combination of its lists becomes a run."""

    name: str
    scenarios: tuple[str, ...]
    policies: tuple[PolicyEntry, ...]
    seeds: tuple[int, ...]
    loads_jobs_per_h: tuple[float | None, ...] = (None,)
    hours: float = 10.0
    power_budget_w: float | None = None
    cluster: str | None = None
    noise_sigma: float = 0.10
    checkpoint_interval_s: float | None = None
    #: changes to the cluster's power saving (SimSpec.power_saving)
    power_saving: tuple[tuple[str, Any], ...] = ()
    description: str = ""


@dataclass(frozen=True)
class Run:
    """A run of the expanded plan: its stable index and id (the result file's name) and its spec."""

    index: int
    run_id: str
    experiment: str
    label: str
    spec: SimSpec


@dataclass(frozen=True)
class CampaignPlan:
    """A parsed plan; `report` keeps the plan's free-form report section (titles, reference figures)."""

    name: str
    experiments: tuple[Experiment, ...]
    description: str = ""
    report: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<plan>"

    def runs(self) -> list[Run]:
        """Expand every experiment in a fixed order (experiment, scenario, load, policy, seed)."""
        runs: list[Run] = []
        seen: set[str] = set()
        for exp in self.experiments:
            for scenario in exp.scenarios:
                for load in exp.loads_jobs_per_h:
                    for pol in exp.policies:
                        for seed in exp.seeds:
                            spec = SimSpec(
                                policy=pol.policy,
                                scenario=scenario,
                                seed=seed,
                                load_jobs_per_h=load,
                                hours=exp.hours,
                                power_budget_w=exp.power_budget_w,
                                cluster=exp.cluster,
                                noise_sigma=exp.noise_sigma,
                                checkpoint_interval_s=exp.checkpoint_interval_s,
                                policy_params=pol.params,
                                power_saving=_merged(exp.power_saving, pol.power_saving),
                            )
                            run_id = make_run_id(exp.name, scenario, pol.label, load, seed)
                            if run_id in seen:
                                raise ConfigError(f"{self.source}: run {run_id!r} appears twice in the plan")
                            seen.add(run_id)
                            runs.append(Run(len(runs), run_id, exp.name, pol.label, spec))
        return runs


def _merged(
    base: tuple[tuple[str, Any], ...], over: tuple[tuple[str, Any], ...]
) -> tuple[tuple[str, Any], ...]:
    """A policy's power-saving changes over its experiment's, field by field."""
    if not over:
        return base
    return tuple(sorted({**dict(base), **dict(over)}.items()))


def make_run_id(experiment: str, scenario: str, label: str, load: float | None, seed: int) -> str:
    """A file-name-safe id that stays the same when the plan grows, so finished runs are found again."""
    load_part = "default" if load is None else f"{load:g}"
    parts = [experiment, scenario, label, f"load{load_part}", f"s{seed}"]
    return "__".join(_SAFE.sub("_", p) for p in parts)


def load_plan(path: str | Path, defaults: Mapping[str, Any] | None = None) -> CampaignPlan:
    """Read and validate a plan file; `defaults` (the `sim` config section) fills what the plan leaves out."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: campaign plan not found")
    return parse_plan(read_yaml_file(p, "campaign plan"), source=str(p), base_dir=p.parent, defaults=defaults)


def parse_plan(
    doc: Any,
    source: str = "<plan>",
    base_dir: Path | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> CampaignPlan:
    """Validate a plan document; every error names the source and the field."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{source}: a plan must be a mapping, got {type(doc).__name__}")
    _check_keys(doc, _TOP_KEYS, source, "")
    base: dict[str, Any] = {
        "hours": 10.0,
        "noise_sigma": 0.10,
        "cluster": None,
        "checkpoint_interval_s": None,
        "power_budget_w": None,
        "loads_jobs_per_h": [None],
        "seeds": 1,
    }
    for key, value in (defaults or {}).items():
        if key in base and value is not None:
            base[key] = value
    base.update({k: doc[k] for k in _SHARED_KEYS if k in doc})
    raw_exps = doc.get("experiments")
    if raw_exps is None:
        raw_exps = [{"name": str(doc.get("name", "main"))}]
    if not isinstance(raw_exps, list) or not raw_exps:
        raise ConfigError(f"{source}: experiments: must be a non-empty list")
    experiments = []
    names: set[str] = set()
    for i, raw in enumerate(raw_exps):
        where = f"experiments[{i}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{source}: {where}: must be a mapping")
        _check_keys(raw, _EXPERIMENT_KEYS, source, where + ".")
        exp = _parse_experiment({**base, **raw}, source, where, base_dir)
        if exp.name in names:
            raise ConfigError(f"{source}: {where}.name: experiment {exp.name!r} is defined twice")
        names.add(exp.name)
        experiments.append(exp)
    report = doc.get("report") or {}
    if not isinstance(report, Mapping):
        raise ConfigError(f"{source}: report: must be a mapping")
    plan = CampaignPlan(
        name=str(doc.get("name", "campaign")),
        experiments=tuple(experiments),
        description=str(doc.get("description", "")),
        report=report,
        source=source,
    )
    check_plan_size(plan)
    return plan


def _check_keys(doc: Mapping[str, Any], known: set[str], source: str, prefix: str) -> None:
    for key in doc:
        if key not in known:
            raise ConfigError(f"{source}: {prefix}{key}: unknown field (known: {', '.join(sorted(known))})")


def _parse_experiment(raw: Mapping[str, Any], source: str, where: str, base_dir: Path | None) -> Experiment:
    def err(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {where}.{key}: {msg}")

    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise err("name", "a non-empty name is required")
    scenarios = _str_list(raw.get("scenarios"), err, "scenarios")
    at = f"{source}: {where}"
    policies = tuple(
        _parse_policy(p, err, j, f"{at}.policies[{j}]") for j, p in enumerate(_as_list(raw.get("policies")))
    )
    policies += _baseline_entries(raw.get("baselines"), f"{at}.baselines", {p.label for p in policies})
    if not policies:
        raise err("policies", "at least one policy is required")
    labels = [p.label for p in policies]
    if len(set(labels)) != len(labels):
        raise err("policies", f"labels must be unique, got {labels}")
    loads = tuple(
        None if x is None else _positive(x, err, "loads_jobs_per_h")
        for x in _as_list(raw.get("loads_jobs_per_h"))
    ) or (None,)
    hours = float(check_setting("sim.hours", raw.get("hours"), f"{at}.hours"))
    budget = raw.get("power_budget_w")
    budget_w = None if budget is None else parse_power_w(budget, f"{source}: {where}.power_budget_w")
    ckpt = raw.get("checkpoint_interval_s")
    ckpt_s = check_setting(
        "sim.checkpoint_interval_s",
        None if ckpt is None else parse_duration_s(ckpt, f"{at}.checkpoint_interval_s"),
        f"{at}.checkpoint_interval_s",
    )
    sigma = check_setting("sim.noise_sigma", raw.get("noise_sigma"), f"{at}.noise_sigma")
    if sigma is None:
        raise err("noise_sigma", "must be a number")
    cluster = raw.get("cluster")
    if cluster is not None:
        if not isinstance(cluster, str):
            raise err("cluster", f"must be a YAML path, got {cluster!r}")
        if base_dir is not None and not Path(cluster).is_absolute() and (base_dir / cluster).is_file():
            cluster = str((base_dir / cluster).resolve())
    return Experiment(
        name=name,
        scenarios=scenarios,
        policies=policies,
        seeds=_parse_seeds(raw.get("seeds"), err),
        loads_jobs_per_h=loads,
        hours=hours,
        power_budget_w=budget_w,
        cluster=cluster,
        noise_sigma=float(sigma),
        checkpoint_interval_s=ckpt_s,
        power_saving=_parse_power_saving(raw.get("power_saving"), f"{at}.power_saving"),
        description=str(raw.get("description", "")),
    )


def _parse_power_saving(value: Any, where: str) -> tuple[tuple[str, Any], ...]:
    """A plan's `power_saving:` mapping, checked now (a bad value fails the plan, not run 37);
    `none` or `{suspend_time_s: none}` turns the cluster's own off."""
    if value is None:
        return ()
    if isinstance(value, str) and value.strip().lower() in ("none", "off"):
        value = {"suspend_time_s": "none"}
    if PowerSaving.from_dict(value, where) is not None and isinstance(value, Mapping):
        return tuple(sorted((str(k), v) for k, v in value.items()))
    return (("suspend_time_s", "none"),)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _str_list(value: Any, err: Any, key: str) -> tuple[str, ...]:
    items = _as_list(value)
    if not items or not all(isinstance(x, str) and x for x in items):
        raise err(key, f"must be a non-empty list of names, got {value!r}")
    return tuple(items)


def _positive(value: Any, err: Any, key: str) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 < value <= MAX_LOAD_JOBS_PER_H  # `inf` (or .inf) is no load: the run never ends
    ):
        raise err(key, f"must be a number > 0 and at most {MAX_LOAD_JOBS_PER_H:g}, got {value!r}")
    return float(value)


def check_plan_size(plan: CampaignPlan) -> None:
    """Refuse, before any run, a plan whose runs (scenarios x policies x loads x seeds) or jobs (each run's
    load x hours; the scenarios' base load where the plan gives none) are past the limits."""
    runs = 0
    jobs = 0.0
    for exp in plan.experiments:
        per_load = len(exp.scenarios) * len(exp.policies) * len(exp.seeds)
        runs += per_load * len(exp.loads_jobs_per_h)
        jobs += sum(per_load * (load or DEFAULT_LOAD_JOBS_PER_H) * exp.hours for load in exp.loads_jobs_per_h)
    check_work(runs, MAX_INDEX + 1, f"{plan.source}: the plan's runs", "fewer seeds, loads or policies")
    check_work(jobs, MAX_PLAN_JOBS, f"{plan.source}: the jobs the plan's runs submit", "fewer hours or seeds")


def _parse_seeds(value: Any, err: Any) -> tuple[int, ...]:
    """`10` -> 0..9; a list of ints as given; `{start: 100, count: 10}` -> 100..109."""
    if isinstance(value, bool):
        raise err("seeds", f"must be a count, a list of ints or {{start, count}}, got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_SEEDS:
            raise err("seeds", f"a count must be between 1 and {MAX_SEEDS}, got {value}")
        return tuple(range(value))
    if isinstance(value, Mapping) and set(value) <= {"start", "count"} and "count" in value:
        start, count = value.get("start", 0), value["count"]
        if isinstance(start, int) and isinstance(count, int) and 1 <= count <= MAX_SEEDS:
            if not 0 <= start <= MAX_INT - count:
                raise err("seeds", f"start must be between 0 and {MAX_INT - count}, got {start}")
            return tuple(range(start, start + count))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_INT for x in value)
    ):
        if len(set(value)) != len(value):
            raise err("seeds", f"seeds repeat: {value}")
        return tuple(value)
    raise err("seeds", f"must be a count, a list of ints or {{start, count}}, got {value!r}")


def _baseline_entries(value: Any, where: str, labels: set[str]) -> tuple[PolicyEntry, ...]:
    """The runs `baselines:` adds (sim/site_baselines.py): `true` gives `slurm`, `static-cap-50` ...
    `static-cap-90` and `slurm+power-saving`; a mapping may set `static_caps` (percent of TDP) and
    `power_saving` (of the last run); a label the plan already names is left as the plan gives it."""
    if value is None or value is False:
        return ()
    caps: Any = STATIC_CAPS
    saving = DEFAULT_POWER_SAVING
    if isinstance(value, Mapping):
        unknown = set(value) - _BASELINE_KEYS
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {sorted(map(str, unknown))} (known: {sorted(_BASELINE_KEYS)})"
            )
        caps = value.get("static_caps", STATIC_CAPS)
        if not isinstance(caps, list | tuple) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 100 for c in caps
        ):
            raise ConfigError(f"{where}.static_caps: must be a list of whole percents 1 to 100, got {caps!r}")
        if value.get("power_saving") is not None:
            saving = _parse_power_saving(value["power_saving"], f"{where}.power_saving") or saving
    elif value is not True:
        raise ConfigError(f"{where}: must be true, false or {{static_caps, power_saving}}, got {value!r}")
    return tuple(
        PolicyEntry(label=b.label, policy=b.policy, power_saving=b.power_saving)
        for b in baseline_runs(tuple(caps), saving)
        if b.label not in labels
    )


def _parse_policy(value: Any, err: Any, j: int, where: str = "") -> PolicyEntry:
    if isinstance(value, str) and value:
        return PolicyEntry(label=value, policy=value)
    if isinstance(value, Mapping):
        unknown = set(value) - _POLICY_KEYS
        if unknown:
            raise err(f"policies[{j}]", f"unknown field(s) {sorted(unknown)} (known: {sorted(_POLICY_KEYS)})")
        policy = value.get("policy")
        if not isinstance(policy, str) or not policy:
            raise err(f"policies[{j}].policy", "a policy name is required")
        label = value.get("label", policy)
        params = value.get("params") or {}
        if not isinstance(label, str) or not label:
            raise err(f"policies[{j}].label", f"must be a non-empty string, got {label!r}")
        if not isinstance(params, Mapping):
            raise err(f"policies[{j}].params", "must be a mapping")
        saving = _parse_power_saving(value.get("power_saving"), f"{where}.power_saving")
        return PolicyEntry(
            label=label, policy=policy, params=tuple(sorted(params.items())), power_saving=saving
        )
    raise err(f"policies[{j}]", f"must be a name or {{policy, label, params}}, got {value!r}")


def select_runs(runs: Sequence[Run], indices: Iterable[int] | None) -> list[Run]:
    """The runs with the given plan indices (all when None); an index outside the plan is an error."""
    if indices is None:
        return list(runs)
    wanted = sorted(set(indices))
    bad = [i for i in wanted if not 0 <= i < len(runs)]
    if bad:
        raise ConfigError(f"run index {bad[0]} is outside the plan (0..{len(runs) - 1})")
    return [runs[i] for i in wanted]


#: the most seeds one experiment may run
MAX_SEEDS = 10_000
#: the most jobs all of a plan's runs may submit (the thesis's plan: some 150,000), and the load a run
#: without one is estimated at (the scenarios' base load, sim/scenarios.py)
MAX_PLAN_JOBS = 100_000_000
DEFAULT_LOAD_JOBS_PER_H = 18.0
#: the largest plan index `--only-index` takes (a plan of a million runs is already beyond any campaign)
MAX_INDEX = 999_999


def parse_index_list(text: str) -> list[int]:
    """'0,3,5-9' -> [0, 3, 5, 6, 7, 8, 9] (the `--only-index` syntax, as Slurm's --array)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
            else:
                a = b = int(lo)
        except ValueError:
            raise ConfigError(f"--only-index: cannot parse {part!r} (use e.g. 0,3,5-9)") from None
        if b > MAX_INDEX:
            raise ConfigError(f"--only-index: {part!r}: a plan index is at most {MAX_INDEX}")
        out.extend(range(a, b + 1))
    return out


def _check_policy_params(pol: PolicyEntry, where: str) -> None:
    """Build the policy once with its params, as every run will: an unknown parameter or a bad value fails
    the plan now, not its first run."""
    from easlurm.priority.policies import get_policy  # here: check_names' guarded import, already loaded

    try:
        get_policy(pol.policy, **dict(pol.params))
    except TypeError as exc:
        raise ConfigError(f"{where}: {str(exc).replace('__init__() ', '')}") from None
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_names(plan: CampaignPlan) -> None:
    """Refuse unknown policy and scenario names before any run starts (skipped where the simulator is absent)."""
    try:
        from easlurm.priority.policies import POLICY_NAMES, known_policy  # here: guarded, see except
        from easlurm.sim.scenarios import SCENARIOS  # here: guarded, see except
    except ImportError:
        return
    for i, exp in enumerate(plan.experiments):
        for j, pol in enumerate(exp.policies):
            if not known_policy(pol.policy):
                raise ConfigError(
                    f"{plan.source}: experiments[{i}].policies[{j}]: unknown policy {pol.policy!r} "
                    f"(known: {', '.join(POLICY_NAMES)}, static-cap-NN)"
                )
            _check_policy_params(pol, f"{plan.source}: experiments[{i}].policies[{j}].params")
        for scenario in exp.scenarios:
            if scenario.lower() not in {k.lower() for k in SCENARIOS}:
                raise ConfigError(
                    f"{plan.source}: experiments[{i}].scenarios: unknown scenario {scenario!r} "
                    f"(known: {', '.join(SCENARIOS)})"
                )
