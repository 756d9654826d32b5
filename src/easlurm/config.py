"""Layered configuration: defaults < /etc/easlurm < user file < -c FILE < EASLURM_* < flags (later wins)."""

from __future__ import annotations

import copy
import math
import os
import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easlurm import inputs
from easlurm.errors import ConfigError
from easlurm.inputs import read_yaml
from easlurm.units import parse_power_w

#: The efficiency-note rules a site can turn on (`notes.rules`), easlurm.accounting.notes.
NOTE_RULES = ("low_gpu_util", "power_limit", "placement", "memory_unused", "idle_gpus")

#: Every known setting with its default. A section's keys are closed: an unknown key is an error,
#: so a typo in a site file is caught instead of silently ignored. Units are in the key names.
DEFAULTS: dict[str, dict[str, Any]] = {
    "profiler": {
        "interval_s": 0.1,
        "devices": "gpu,cpu,dram",
        "out_dir": None,
        "sample_log": True,
        "powercap_root": "/sys/class/powercap",
        "nvml_module": "pynvml",
    },
    "spank": {
        "spool": "/var/spool/easlurm",
        "timeout_ms": 2000,
        "late_limit_s": 120.0,
        # where the agents put a job's records for easlurm sacct, seff and report: "admin_comment" (beside
        # what a site keeps there) or "spool" only (a site whose AdminComment belongs to another tool; the
        # spool must then be on a filesystem the readers' hosts share): docs/spank.md "AdminComment"
        "store": "admin_comment",
    },
    "box": {
        "dir": None,
        "cluster_name": "easbox",
        "base_port": 16817,
        "shards_per_gpu": 3,
        # the box's node agents read a fake NVML (8 GPUs at 250 W) and a fake RAPL tree: the local
        # cluster only (scripts/slurm-box); a real install never reads this section
        "fake_sensors": True,
        # the box's slurm.conf SuspendTime (s): power saving is on (SuspendProgram/ResumeProgram stop and
        # start a node's slurmd) but no node powers down by itself during a test session; tests power a
        # node down with `scontrol update NodeName=X State=POWER_DOWN`
        "suspend_time_s": 86400,
    },
    "oracle": {
        "params": None,
        "cache_size": 4096,
        "hardware": None,
    },
    "sched": {
        "policy": "zeus",
        "interval_s": 10.0,
        "power_budget_w": None,
        # an energy policy's power limit may add to a job's run at most this share of its JCT (its wait so far
        # and its run at the default limit): 0.05 is a JCT budget of 1.05 (docs/site-baselines.md)
        "max_slowdown": 0.05,
        # an energy policy spreads a job over nodes only when its EDP is within this fraction of the best packed
        # option (None: the policy's own, 0.05 for energy policies; time policies never wait to pack)
        "spread_slack": None,
        # energy policies keep nodes empty (or powered down) for Slurm's power saving where the EDP cost is
        # small (docs/power-saving.md, consolidation)
        "consolidate": True,
        "consolidation_slack": 0.30,
        "min_off_s": 0.0,
        "max_wake_wait_s": 600.0,
        "aging_weight": 1.0,
        "preempt_cooldown_s": 300.0,
        # no job is preempted before it has run this long since its (re)start (docs/schedd.md)
        "min_run_s": 300.0,
        "hold_ttl_s": 600.0,
        "metrics_port": None,
        "metrics_address": None,
        "decision_log": "/var/log/easlurm/schedd.jsonl",
        "env_dir": None,
        "state_save_dir": None,
    },
    "power": {
        # Slurm's SuspendProgram/ResumeProgram (`easlurm power suspend|resume HOSTLIST`, docs/power-saving.md):
        # the log of every node's power events (None: <spank.spool>/power/state.jsonl), and the site's own
        # command per node, an argv with {node} run without a shell (e.g. "ipmitool -H {node}-bmc -U admin
        # -f /etc/easlurm/ipmi.pw chassis power off"); None: the events are logged, nothing else is run
        "state_log": None,
        "suspend_command": None,
        "resume_command": None,
        "command_timeout_s": 60.0,
        # a node's whole draw idle (GPUs included) and powered down, for `easlurm power report`; None: the
        # simulator's estimates by GPUs per node (src/easlurm/model/node_power.py) plus its GPUs' idle draw
        "node_idle_w": None,
        "node_off_w": None,
    },
    "idle": {
        # the node agent marks a job's GPU idle once it has had no compute process and utilisation at or under
        # gpu_util_pct for after_s (docs/metrics.md); `action`: a command (argv, no shell) run when an idle
        # episode starts, with EASLURM_JOB_ID, EASLURM_GPU and EASLURM_IDLE_S in its environment; None: none
        "gpu_util_pct": 1.0,
        "after_s": 600.0,
        "action": None,
        "action_timeout_s": 60.0,
    },
    "metrics": {
        # the node agents' per-job metrics (Prometheus text format, docs/metrics.md): one file per step and
        # node in `dir` (a node_exporter textfile-collector directory, or what `easlurm metrics serve`
        # serves), rewritten every interval_s, which is also how often the agent watches its GPUs for idling
        "dir": None,
        "interval_s": 10.0,
    },
    "report": {
        "grid_intensity_g_per_kwh": None,
        "grid_intensity_csv": None,
    },
    # efficiency notes of `easlurm seff`, the job-end card and `easlurm report --notes` (docs/seff-report.md):
    # the rules on (a comma list of NOTE_RULES) and each rule's threshold
    "notes": {
        "rules": ",".join(NOTE_RULES),
        # mean GPU utilisation under this (%)
        "low_gpu_util_pct": 25.0,
        # every GPU's peak power under this share of its limit (%)
        "power_limit_peak_pct": 80.0,
        # fewer GPUs or another GPU type (oracle): at least this energy saved (%) for at most this much time (%)
        "placement_min_saving_pct": 10.0,
        "placement_max_slowdown_pct": 10.0,
        # the fullest GPU's peak memory under this share of its memory (%)
        "memory_used_pct": 25.0,
        # allocated GPUs idle (recorded idle episodes, or a whole run at idle power) for at least this long (s)
        "idle_gpu_min_s": 60.0,
    },
    # the job-end card (`easlurm mail`, slurm.conf MailProg; docs/seff-report.md)
    "mail": {
        # where MailProg queues each mail (None: <spank.spool>/mail) and the site's real mailer, an argv run
        # without a shell with the body on stdin, naming {subject} and {recipient}
        "spool": None,
        "mailer": "/usr/bin/mail -s {subject} {recipient}",
        # at most this many mails a minute leave the drain (one drain process at a time)
        "rate_per_min": 60.0,
        # a job's card waits until sacct shows the job ended, for at most this long (s); then it goes without
        "max_wait_s": 300.0,
    },
    "sim": {
        "cluster": None,
        "hours": 10.0,
        "noise_sigma": 0.10,
        "checkpoint_interval_s": None,
        # pending jobs each scheduling decision of the simulator and replay sees, in queue order (Slurm's
        # default_queue_depth bounds each scheduling pass the same way): docs/replay.md, "Queue depth"
        "queue_depth": 1000,
    },
}

SYSTEM_FILE = Path("/etc/easlurm/config.yaml")
ENV_PREFIX = "EASLURM_"


def user_file() -> Path:
    """The per-user file, under XDG_CONFIG_HOME when set."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "easlurm" / "config.yaml"


@dataclass
class Config:
    """The effective settings and, for each, the layer that set it (for `easlurm config`)."""

    values: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(DEFAULTS))
    origin: dict[str, str] = field(default_factory=dict)

    def get(self, dotted: str) -> Any:
        """Value of `section.key`; raises ConfigError for an unknown name."""
        section, _, key = dotted.partition(".")
        try:
            return self.values[section][key]
        except KeyError:
            raise ConfigError(f"unknown setting {dotted!r}") from None

    def section(self, name: str) -> dict[str, Any]:
        """A copy of one section's settings."""
        if name not in self.values:
            raise ConfigError(f"unknown configuration section {name!r}")
        return dict(self.values[name])

    def merge(
        self,
        layer: Mapping[str, Any],
        source: str,
        lines: Mapping[tuple[str, ...], int] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        """Apply one layer, validating section and key names, value types and ranges (check_setting).

        `lines` (from yaml_key_lines) puts the line of the offending section or key into an error;
        `names` maps `section.key` to the flag that set it, named in an error instead."""

        def at(*path: str) -> str:
            line = (lines or {}).get(path)
            return f"{source}:{line}" if line else source

        if not isinstance(layer, Mapping):
            raise ConfigError(
                f"{source}: top level must be a mapping of sections, got {type(layer).__name__}"
            )
        for section, entries in layer.items():
            if section not in DEFAULTS:
                raise ConfigError(
                    f"{at(str(section))}: unknown section {section!r} (known: {', '.join(DEFAULTS)})"
                )
            if not isinstance(entries, Mapping):
                raise ConfigError(f"{at(section)}: section {section!r} must be a mapping")
            for key, value in entries.items():
                if key not in DEFAULTS[section]:
                    known = ", ".join(DEFAULTS[section])
                    raise ConfigError(
                        f"{at(section, str(key))}: unknown key {section}.{key} (known: {known})"
                    )
                label = (names or {}).get(f"{section}.{key}") or f"{at(section, key)}: {section}.{key}"
                self.values[section][key] = check_setting(f"{section}.{key}", value, label)
                self.origin[f"{section}.{key}"] = source

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self.values)


_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


#: Slurm keeps SuspendTime in 32 bits; beyond a year it is a typo for "off" (leave power saving out instead).
MAX_SUSPEND_TIME_S = 365 * 86400


def _positive(v: float) -> bool:
    return v > 0


def _non_negative(v: float) -> bool:
    return v >= 0


def _port(v: int) -> bool:
    return 1 <= v <= 65535


#: The range of each numeric setting, as (test, what it must be); the same checks apply to a file, an
#: environment variable and the command-line flag that sets the key.
RANGES: dict[str, tuple[Any, str]] = {
    "profiler.interval_s": (lambda v: 1e-3 <= v <= 3600, "between 0.001 and 3600 s"),
    "spank.timeout_ms": (_positive, "> 0"),
    "spank.late_limit_s": (_non_negative, ">= 0"),
    "box.base_port": (lambda v: 1 <= v <= 65535 - 16, "a port between 1 and 65519"),
    "box.shards_per_gpu": (lambda v: 1 <= v <= 1024, "between 1 and 1024"),
    "box.suspend_time_s": (lambda v: 1 <= v <= MAX_SUSPEND_TIME_S, f"between 1 and {MAX_SUSPEND_TIME_S} s"),
    "power.command_timeout_s": (lambda v: 0 < v <= 3600, "> 0 and at most 3600 s"),
    "power.node_idle_w": (_non_negative, ">= 0 W"),
    "power.node_off_w": (_non_negative, ">= 0 W"),
    "oracle.cache_size": (lambda v: 0 <= v <= 2**31 - 1, "between 0 and 2147483647"),
    "sched.interval_s": (_positive, "> 0"),
    "sched.power_budget_w": (_positive, "> 0"),
    "sched.aging_weight": (_non_negative, ">= 0"),
    "sched.max_slowdown": (lambda v: 0 <= v <= 10, "between 0 and 10 (a fraction: 0.05 is 5 %)"),
    "sched.spread_slack": (lambda v: 0 <= v <= 10, "between 0 and 10 (a fraction: 0.05 is 5 %)"),
    "sched.preempt_cooldown_s": (_non_negative, ">= 0"),
    "sched.min_run_s": (_non_negative, ">= 0 s"),
    "sched.consolidation_slack": (lambda v: 0 <= v <= 10, "between 0 and 10 (a fraction: 0.3 is 30 %)"),
    "sched.min_off_s": (_non_negative, ">= 0"),
    "sched.max_wake_wait_s": (_non_negative, ">= 0"),
    "sched.hold_ttl_s": (_positive, "> 0"),
    "sched.metrics_port": (_port, "a port between 1 and 65535"),
    "notes.low_gpu_util_pct": (lambda v: 0 <= v <= 100, "between 0 and 100 %"),
    "notes.power_limit_peak_pct": (lambda v: 0 <= v <= 100, "between 0 and 100 %"),
    "notes.placement_min_saving_pct": (lambda v: 0 <= v <= 100, "between 0 and 100 %"),
    "notes.placement_max_slowdown_pct": (lambda v: 0 <= v <= 1000, "between 0 and 1000 %"),
    "notes.memory_used_pct": (lambda v: 0 <= v <= 100, "between 0 and 100 %"),
    "notes.idle_gpu_min_s": (_non_negative, ">= 0 s"),
    "mail.rate_per_min": (lambda v: 0 < v <= 100000, "> 0 and at most 100000 a minute"),
    "mail.max_wait_s": (lambda v: 0 <= v <= 86400, "between 0 and 86400 s"),
    "idle.gpu_util_pct": (lambda v: 0 <= v <= 100, "between 0 and 100 %"),
    "idle.after_s": (lambda v: 0 < v <= 30 * 86400, "> 0 and at most 2592000 s (30 days)"),
    "idle.action_timeout_s": (lambda v: 0 < v <= 3600, "> 0 and at most 3600 s"),
    "metrics.interval_s": (lambda v: 0.1 <= v <= 3600, "between 0.1 and 3600 s"),
    "sim.hours": (lambda v: 0 < v <= 87600, "> 0 and at most 87600 (ten years)"),
    "sim.noise_sigma": (lambda v: 0 <= v <= 10, "between 0 and 10"),
    "sim.checkpoint_interval_s": (_positive, "> 0"),
    "sim.queue_depth": (lambda v: 1 <= v <= 10_000_000, "between 1 and 10000000 jobs"),
}
#: settings that are a number although their default is None
_NUMBERS = (
    "sched.power_budget_w",
    "sched.metrics_port",
    "sim.checkpoint_interval_s",
    "sched.spread_slack",
    "power.node_idle_w",
    "power.node_off_w",
)
#: settings that are a path (a non-empty string) although their default is None
_PATHS = ("power.state_log", "mail.spool", "metrics.dir")
#: settings that are a command (a string split as a shell would, without running one, or a list)
COMMANDS = ("idle.action",)
#: settings that are a command run per node: an argv template (a string split as a shell would, without
#: running one, or a list) naming {node}
ARGV_TEMPLATES = ("power.suspend_command", "power.resume_command")


#: Where the agents put a job's records (spank.store).
STORES = ("admin_comment", "spool")


def check_setting(dotted: str, value: Any, where: str) -> Any:
    """A setting's value checked for type and range; `where` (a file and key, or a flag) leads the error."""
    section, _, key = dotted.partition(".")
    if dotted in ARGV_TEMPLATES:
        if value is not None:
            argv_template(value, where)
        return value
    if dotted == "notes.rules":
        return note_rules(value, where)
    if dotted == "spank.store":
        if value not in STORES:
            raise ConfigError(f"{where}: must be one of {', '.join(STORES)}, got {value!r}")
        return value
    if dotted == "mail.mailer":
        mail_template(value, where)
        return value
    if dotted in COMMANDS:
        if value is not None:
            _command_argv(value, where)
        return value
    if dotted in _PATHS:
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise ConfigError(f"{where}: expected a path, got {value!r}")
        return value
    if dotted == "sched.power_budget_w" and isinstance(value, str):
        return parse_power_w(value, where)
    if dotted in _NUMBERS and value is not None:
        default: Any = 0 if dotted == "sched.metrics_port" else 0.0
    else:
        default = DEFAULTS[section][key]
    value = _coerce(default, value, where)
    check = RANGES.get(dotted)
    if check is not None and value is not None and not (math.isfinite(value) and check[0](value)):
        raise ConfigError(f"{where}: must be {check[1]}, got {value!r}")
    return value


def argv_template(value: Any, where: str) -> list[str]:
    """A per-node command as an argv: a string split as a shell would (no shell runs it) or a list of
    strings, naming `{node}` and no other field; one line naming `where` otherwise."""
    argv = _command_argv(value, where)
    fields = {f"{{{f}}}" for f in _template_fields(argv, where)}
    if fields - {"{node}"}:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(sorted(fields - {'{node}'}))} (only {{node}})"
        )
    if "{node}" not in fields:
        raise ConfigError(f"{where}: the command must name the node as {{node}}, got {value!r}")
    return argv


def _command_argv(value: Any, where: str) -> list[str]:
    """A command setting as an argv: a string split as a shell would (no shell runs it) or a list of
    strings; one line naming `where` when it is neither, or empty."""
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: cannot split {value!r} into arguments ({exc})") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        argv = list(value)
    else:
        raise ConfigError(f"{where}: expected a command (a string or a list of strings), got {value!r}")
    if not argv or not argv[0].strip():
        raise ConfigError(f"{where}: the command is empty")
    return argv


def _template_fields(argv: list[str], where: str) -> set[str]:
    """The `{field}` names an argv template uses (a literal brace is written {{ or }})."""
    fields: set[str] = set()
    for arg in argv:
        try:
            fields.update(f for _, f, _, _ in string.Formatter().parse(arg) if f is not None)
        except ValueError as exc:
            raise ConfigError(f"{where}: {arg!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
    return fields


def note_rules(value: Any, where: str) -> str:
    """`notes.rules`: a comma list (or a list) of NOTE_RULES, "" for none; one line naming an unknown one."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a comma list of rules, got {value!r}")
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in NOTE_RULES]
    if unknown:
        raise ConfigError(f"{where}: unknown rule(s) {', '.join(unknown)} (known: {', '.join(NOTE_RULES)})")
    return ",".join(names)


def mail_template(value: Any, where: str) -> list[str]:
    """`mail.mailer`: an argv naming {recipient}, and no field but {subject} and {recipient}."""
    argv = _command_argv(value, where)
    fields = _template_fields(argv, where)
    if fields - {"subject", "recipient"}:
        unknown = ", ".join(f"{{{f}}}" for f in sorted(fields - {"subject", "recipient"}))
        raise ConfigError(f"{where}: unknown field(s) {unknown} (only {{subject}} and {{recipient}})")
    if "recipient" not in fields:
        raise ConfigError(f"{where}: the command must name the recipient as {{recipient}}, got {value!r}")
    return argv


def _coerce(default: Any, value: Any, where: str) -> Any:
    """Check a value against its default's type; ints are accepted for floats."""
    if value is None or default is None:
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT.match(value.strip()):  # YAML 1.1 reads `1e9` as a string
            return float(value)
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return ",".join(value)
    raise ConfigError(f"{where}: expected {type(default).__name__}, got {value!r}")


def read_yaml_file(path: Path, what: str = "file", mapping: bool = True) -> Any:
    """Parse a YAML file through easlurm.inputs (a regular file of at most 16 MiB; no duplicate keys, deep
    nesting or alias bombs); an empty file is {}. `mapping`: a list, string or number at the top level is
    refused in one line naming the file. Every failure is one line naming the file (and line)."""
    doc = read_yaml(path, what)
    return inputs.mapping(doc, path, f"{what}: top level") if mapping else ({} if doc is None else doc)


def yaml_key_lines(path: Path) -> dict[tuple[str, ...], int]:
    """1-based line of each section and `section.key` of a YAML settings file, for error messages."""
    import yaml

    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            lines[(str(knode.value),)] = knode.start_mark.line + 1
            if isinstance(vnode, yaml.MappingNode):
                for k2, _ in vnode.value:
                    lines[(str(knode.value), str(k2.value))] = k2.start_mark.line + 1
    return lines


def parse_env_scalar(raw: str) -> Any:
    """An environment value as a YAML scalar (`0.2`, `true`, `null`); plain text where YAML fails.

    Without PyYAML (`scripts/slurm-box install` on a bare machine) numbers, booleans and null are still
    recognised, so `EASLURM_BOX__BASE_PORT=17017` works before any package is installed.
    """
    if raw == "":
        return None
    try:
        import yaml
    except ImportError:
        return _stdlib_scalar(raw)
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _stdlib_scalar(raw: str) -> Any:
    low = raw.strip().lower()
    if low in ("null", "~"):
        return None
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def env_layer(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """`EASLURM_SECTION__KEY=value` variables as a layer; values are parsed as YAML scalars."""
    layer: dict[str, dict[str, Any]] = {}
    for _, section, key, value in env_entries(environ):
        layer.setdefault(section, {})[key] = value
    return layer


def env_entries(environ: Mapping[str, str]) -> list[tuple[str, str, str, Any]]:
    """(variable name, section, key, parsed value) of every `EASLURM_SECTION__KEY` variable."""
    out = []
    for name, raw in environ.items():
        if name.startswith(ENV_PREFIX) and "__" in name:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
            out.append((name, section, key, parse_env_scalar(raw)))
    return out


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
    system_file: Path | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Config:
    """Build the effective configuration; call at run time, never at import time."""
    cfg = Config()
    for candidate in (system_file or SYSTEM_FILE, user_file()):
        if candidate.is_file():
            cfg.merge(read_yaml_file(candidate), str(candidate), yaml_key_lines(candidate))
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"{p}: configuration file not found")
        cfg.merge(read_yaml_file(p), str(p), yaml_key_lines(p))
    for name, section, key, value in env_entries(os.environ if environ is None else environ):
        try:
            cfg.merge({section: {key: value}}, "environment")
        except ConfigError as exc:  # name the variable the user set, not the setting it maps to
            raise ConfigError(f"environment variable {name}{str(exc).removeprefix('environment')}") from None
    if overrides:
        layer = {s: {k: v for k, v in e.items() if v is not None} for s, e in overrides.items()}
        cfg.merge(layer, "flags", names=flag_names)
    return cfg
