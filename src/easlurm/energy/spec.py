"""The --energy-profile SPEC: what to measure on a step, how often, and the scheduler's workload hints.

The same strict grammar as the SPANK plugin's spank/spec.c (spank/spec_cases.tsv keeps the two equal):
a comma list of device words (all, gpu, cpu, dram), flags (urgent, share, nolimit) and keys
(interval, deadline, model, steps, batch, gpus, precision, shard, ckpt). With the oracle's model names (ModelNames, the text
`easlurm model list --names` writes and the plugin's `models=` file holds), `model=` must be one of them,
as spank/spec.c checks it at submission. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from easlurm.errors import ConfigError
from easlurm.units import parse_duration_s

#: The device kinds a SPEC can ask for, in the order records list them.
DEVICE_KINDS = ("gpu", "cpu", "dram")

_SPEC_CHARS = re.compile(r"^[A-Za-z0-9._\-,=:]*$")
_NAME = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")
_INT = re.compile(r"^[1-9][0-9]{0,9}$")
_DURATION = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,6})?(ms|s|m|min|h|d)?$")
SPEC_MAX_CHARS = 1024
INTERVAL_RANGE_S = (0.010, 60.0)
DEADLINE_RANGE_S = (0.001, 366 * 86400.0)
_WORDS = ("all", "gpu", "cpu", "dram", "urgent", "share", "nolimit")
_KEYS = ("interval", "deadline", "model", "steps", "batch", "gpus", "precision", "shard", "ckpt")
#: What an unknown item or key error lists: every word and key (spank/spec.c's EVERY_ITEM).
EVERY_ITEM = (
    "(devices: all,gpu,cpu,dram; flags: urgent,share,nolimit; "
    "keys: interval,deadline,model,steps,batch,gpus,precision,shard,ckpt)"
)
#: How the job trains, for the oracle (docs/oracle-llm.md): the values each key takes (spank/spec.c's
#: PRECISIONS, SHARDS, CKPTS). precision: what PyTorch runs (bf16 and fp16 are the AMP names); shard: the
#: ZeRO stage over the job's GPUs (fsdp = zero3; auto: the oracle picks the cheapest that fits, with or
#: without activation checkpointing unless ckpt= says); ckpt: activation checkpointing (1 = full).
CHOICES = {
    "precision": ("fp32-strict", "fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16"),
    "shard": ("none", "zero1", "zero2", "zero3", "fsdp", "auto"),
    "ckpt": ("0", "1", "full", "selective"),
}
#: How many of the nearest known names an unknown model= names (EAS_MODEL_NEAREST).
MODEL_NEAREST = 3
_NAME_MAX = 64


@dataclass(frozen=True)
class ProfileSpec:
    """A parsed --energy-profile SPEC: what to measure, how often, and the scheduler's workload hints."""

    devices: tuple[str, ...] = DEVICE_KINDS
    interval_s: float | None = None
    model: str | None = None
    steps: int | None = None
    batch: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    deadline_s: float | None = None
    urgent: bool = False
    #: the job may share its one GPU with another declared job (docs/colocation-live.md)
    share: bool = False
    #: run at the GPUs' default power limit: the scheduler chooses no limit for this job
    nolimit: bool = False
    #: how the job trains (CHOICES): precision, sharding and activation checkpointing, as written
    precision: str | None = None
    shard: str | None = None
    ckpt: str | None = None

    def hints(self) -> dict[str, Any]:
        """The workload hints only (JSON-safe), for the scheduler."""
        out: dict[str, Any] = {}
        for key in ("model", "steps", "deadline_s", "precision", "shard", "ckpt"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.batch:
            out["batch"] = list(self.batch)
        if self.gpus:
            out["gpus"] = list(self.gpus)
        if self.urgent:
            out["urgent"] = True
        if self.share:
            out["share"] = True
        if self.nolimit:
            out["nolimit"] = True
        return out


def _int(value: str, item: str) -> int:
    if not _INT.match(value) or int(value) > 1_000_000_000:
        raise ConfigError(f"--energy-profile: bad integer in {item!r} (1..1000000000)")
    return int(value)


def _int_list(value: str, item: str) -> tuple[int, ...]:
    parts = value.split(":")
    if len(parts) > 16:
        raise ConfigError(f"--energy-profile: bad list in {item!r} (at most 16 integers)")
    return tuple(_int(p, item) for p in parts)


def _duration(value: str, item: str, lo: float, hi: float) -> float:
    if not _DURATION.match(value):
        raise ConfigError(f"--energy-profile: bad duration in {item!r} (use e.g. 200ms, 2s, 30m, 2h)")
    seconds = parse_duration_s(value, field=item)
    if not lo <= seconds <= hi:
        raise ConfigError(f"--energy-profile: {item!r} out of range ({lo:g}..{hi:g} s)")
    return seconds


def parse_spec(text: str | None, names: ModelNames | None = None) -> ProfileSpec:
    """Parse SPEC with the same strict grammar as spank/spec.c (spank/spec_cases.tsv keeps them equal);
    with `names`, `model=` must also be a known model name (ModelNames.check).

    None or "" (a bare --energy-profile) means every device at the configured interval.
    """
    spec = _parse(text)
    if names is not None and spec.model is not None:
        names.check(spec.model)
    return spec


def _parse(text: str | None) -> ProfileSpec:
    if not text:
        return ProfileSpec()
    if len(text) > SPEC_MAX_CHARS:
        raise ConfigError("--energy-profile: SPEC longer than 1024 characters")
    if not _SPEC_CHARS.match(text):
        raise ConfigError(f"--energy-profile: invalid character in {text[:40]!r}")
    words: list[str] = []
    values: dict[str, str] = {}
    for item in text.split(","):
        if not item:
            raise ConfigError("--energy-profile: empty item in SPEC")
        key, eq, value = item.partition("=")
        if not eq:
            if item not in _WORDS:
                raise ConfigError(f"--energy-profile: unknown item {item[:40]!r} {EVERY_ITEM}")
            if item in words:
                raise ConfigError(f"--energy-profile: {item!r} given twice")
            words.append(item)
            continue
        if key not in _KEYS:
            raise ConfigError(f"--energy-profile: unknown key {key[:40]!r} {EVERY_ITEM}")
        if key in values:
            raise ConfigError(f"--energy-profile: key {key!r} given twice")
        values[key] = value
    devices = tuple(w for w in words if w in DEVICE_KINDS)
    if "all" in words and devices:
        raise ConfigError("--energy-profile: 'all' cannot be combined with a device list")
    model = values.get("model")
    if model is not None and not _NAME.match(model):
        raise ConfigError(f"--energy-profile: bad name in 'model={model[:40]}' (1..64 of A-Za-z0-9._-)")
    for key, allowed in CHOICES.items():
        if key in values and values[key] not in allowed:
            raise ConfigError(
                f"--energy-profile: bad value in '{key}={values[key][:40]}' (one of {','.join(allowed)})"
            )
    gpus = _int_list(values["gpus"], "gpus") if "gpus" in values else ()
    if "share" in words and gpus not in ((), (1,)):
        raise ConfigError(
            f"--energy-profile: 'share' is for one-GPU jobs, got 'gpus={values['gpus'][:40]}' (use gpus=1)"
        )
    return ProfileSpec(
        devices=tuple(k for k in DEVICE_KINDS if k in devices) if devices else DEVICE_KINDS,
        interval_s=_duration(values["interval"], "interval", *INTERVAL_RANGE_S)
        if "interval" in values
        else None,
        model=model,
        steps=_int(values["steps"], "steps") if "steps" in values else None,
        batch=_int_list(values["batch"], "batch") if "batch" in values else (),
        gpus=gpus,
        deadline_s=_duration(values["deadline"], "deadline", *DEADLINE_RANGE_S)
        if "deadline" in values
        else None,
        urgent="urgent" in words,
        share="share" in words,
        nolimit="nolimit" in words,
        precision=values.get("precision"),
        shard=values.get("shard"),
        ckpt=values.get("ckpt"),
    )


def _norm(name: str) -> str:
    """A model name as the oracle reads it (easlurm.model.zoo.canonical_name): case-insensitive, '_' as '-'."""
    return name.lower().replace("_", "-")


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance of two normalised names (spank/spec.c's `distance`)."""
    a, b = _norm(a), _norm(b)
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            up = row[j]
            row[j] = min(diag + (a[i - 1] != b[j - 1]), up + 1, row[j - 1] + 1)
            diag = up
    return row[-1]


@dataclass(frozen=True)
class ModelNames:
    """The oracle's model names as `easlurm model list --names` writes them: one spelling per line,
    `NAME` (the zoo's own) or `ALIAS NAME`; `#` starts a comment. The SPANK plugin reads the same file
    (its `models=` argument) and refuses an unknown `model=` at submission (spank/spec.c)."""

    #: (spelling, the zoo's name) in file order
    spellings: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> ModelNames:
        out = []
        for line in text.splitlines():
            fields = line.partition("#")[0].split()[:2]
            if fields and all(len(f) <= _NAME_MAX for f in fields):
                out.append((fields[0], fields[-1]))
        return cls(tuple(out))

    @classmethod
    def from_names(cls, names: Iterable[str], aliases: Mapping[str, str]) -> ModelNames:
        """The zoo's names, then each alias a SPEC can carry (`[A-Za-z0-9._-]{1,64}`)."""
        spellings = [(n, n) for n in names]
        spellings += [(a, n) for a, n in aliases.items() if _NAME.match(a)]
        return cls(tuple(spellings))

    def text(self) -> str:
        """The file's text (parse reads it back)."""
        head = "# easlurm model names (easlurm model list --names): NAME, or ALIAS NAME\n"
        return head + "".join(f"{s}\n" if s == n else f"{s} {n}\n" for s, n in self.spellings)

    def known(self, model: str) -> bool:
        return any(_norm(s) == _norm(model) for s, _ in self.spellings)

    def nearest(self, model: str, count: int = MODEL_NEAREST) -> list[str]:
        """The `count` names nearest `model` by edit distance over every spelling, ties by file order."""
        best: dict[str, tuple[int, int]] = {}
        for line, (spelling, name) in enumerate(self.spellings):
            key = (edit_distance(model, spelling), line)
            if _norm(name) not in best or key < best[_norm(name)]:
                best[_norm(name)] = key
        first = {_norm(n): n for _, n in reversed(self.spellings)}
        return [first[n] for n in sorted(best, key=best.__getitem__)[:count]]

    def check(self, model: str) -> None:
        """ConfigError naming the nearest names unless `model` is known (spank/spec.c's message)."""
        if self.known(model):
            return
        near = ", ".join(self.nearest(model)) or "none"
        raise ConfigError(
            f"--energy-profile: unknown model= {model[:40]!r} (nearest: {near}; every name: easlurm model list --names)"
        )
