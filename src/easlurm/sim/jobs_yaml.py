"""A job list in YAML for the simulator (`easlurm sim run --job-list FILE`), each error one line naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from easlurm.config import read_yaml_file
from easlurm.errors import ConfigError, ModelError
from easlurm.model.workload import Precision, Sharding, parse_ckpt
from easlurm.model.zoo import canonical_name
from easlurm.sim.job import JobSpec
from easlurm.units import MAX_INT, parse_duration_s

EXAMPLE = """\
jobs:
  - id: bert-1            # optional (default job<index>)
    user: alice           # optional (default u0)
    submit: 10min         # when it is submitted (default 0)
    model: bert-base
    steps: 20000          # at the first batch
    batch: [16, 32]       # or one number; the first is the requested one
    gpus: 1               # or a list; the first is the requested count
    precision: amp-bf16   # optional (fp32-strict, fp32, tf32, amp-bf16, amp-fp16; bf16 and fp16 are AMP)
    shard: auto           # optional: none, zero1, zero2, zero3 (fsdp), auto (docs/oracle-llm.md)
    ckpt: full            # optional activation checkpointing: none, full, selective (auto with shard: auto)
    deadline: 2h          # optional, after the submit time (makes the job urgent)
    share: true           # may share a GPU with another shareable job (docs/colocation.md)
    nolimit: true         # run at the GPUs' default power limit (no policy caps it)
    time_limit: 4h        # optional, as sbatch --time: what the `slurm` policy backfills with
"""

_KEYS = {
    "id",
    "user",
    "submit",
    "model",
    "steps",
    "batch",
    "gpus",
    "gpu_types",
    "precision",
    "seq_len",
    "image_size",
    "deadline",
    "urgent",
    "malleable",
    "share",
    "power_limits",
    "nolimit",
    "time_limit",
    "shard",
    "ckpt",
}


def load_jobs(path: str | Path) -> list[JobSpec]:
    """The jobs of a YAML job list, in submit order."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: job list not found")
    return jobs_from_doc(read_yaml_file(p, "job list", mapping=False), str(p))


def jobs_from_doc(doc: Any, source: str) -> list[JobSpec]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise ConfigError(f"{source}: expected a mapping with a non-empty 'jobs' list")
    jobs = [_job(entry, f"{source}: jobs[{i}]", i) for i, entry in enumerate(doc["jobs"])]
    ids = [j.job_id for j in jobs]
    dup = next((x for x in ids if ids.count(x) > 1), None)
    if dup is not None:
        raise ConfigError(f"{source}: job id {dup!r} appears twice")
    return sorted(jobs, key=lambda j: j.submit_s)


def _job(entry: Any, where: str, index: int) -> JobSpec:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]}: unknown field (known: {', '.join(sorted(_KEYS))})")
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{where}.model: a model name is required")
    try:
        canonical_name(model)
    except ModelError as exc:
        raise ConfigError(f"{where}.model: {exc}") from None
    submit_s = parse_duration_s(entry.get("submit", 0), f"{where}.submit")
    deadline = entry.get("deadline")
    deadline_s = None if deadline is None else submit_s + parse_duration_s(deadline, f"{where}.deadline")
    share = entry.get("share", False)
    if not isinstance(share, bool):
        raise ConfigError(f"{where}.share: must be true or false, got {share!r}")
    nolimit = entry.get("nolimit", False)
    if not isinstance(nolimit, bool):
        raise ConfigError(f"{where}.nolimit: must be true or false, got {nolimit!r}")
    limit = entry.get("time_limit")
    time_limit_s = None if limit is None else parse_duration_s(limit, f"{where}.time_limit")
    if time_limit_s is not None and not time_limit_s > 0:
        raise ConfigError(f"{where}.time_limit: must be > 0, got {limit!r}")
    urgent = entry.get("urgent", deadline_s is not None)
    malleable = entry.get("malleable", True)
    for key, value in (("urgent", urgent), ("malleable", malleable)):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: must be true or false, got {value!r}")
    types = entry.get("gpu_types")
    return JobSpec(
        job_id=str(entry.get("id", f"job{index}")),
        user=str(entry.get("user", "u0")),
        submit_s=submit_s,
        model=model,
        total_steps=_int(entry.get("steps"), f"{where}.steps"),
        batch_options=_ints(entry.get("batch"), f"{where}.batch"),
        gpu_options=_ints(entry.get("gpus", 1), f"{where}.gpus"),
        gpu_types=None
        if types is None
        else tuple(str(t) for t in (types if isinstance(types, list) else [types])),
        malleable=malleable,
        urgent=urgent,
        deadline_s=deadline_s,
        precision=_precision(entry.get("precision", "bf16"), f"{where}.precision"),
        seq_len=None if entry.get("seq_len") is None else _int(entry.get("seq_len"), f"{where}.seq_len"),
        image_size=None
        if entry.get("image_size") is None
        else _int(entry.get("image_size"), f"{where}.image_size"),
        power_limit_options_w=tuple(float(w) for w in _ints(entry["power_limits"], f"{where}.power_limits"))
        if "power_limits" in entry
        else (),
        shareable=share,
        default_power_limit=nolimit,
        time_limit_s=time_limit_s,
        **_training(entry, where),
    )


def _training(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`shard` and `ckpt` as JobSpec's sharding and act_ckpt; a job with shard auto and no ckpt lets the
    oracle choose both."""
    try:
        shard = Sharding.parse(str(entry.get("shard", "none"))).value
    except ModelError as exc:
        raise ConfigError(f"{where}.shard: {exc}") from None
    ckpt = entry.get("ckpt", "auto" if shard == "auto" else "")
    try:
        return {"sharding": shard, "act_ckpt": parse_ckpt(ckpt if isinstance(ckpt, bool) else str(ckpt))}
    except ModelError as exc:
        raise ConfigError(f"{where}.ckpt: {exc}") from None


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_INT:
        raise ConfigError(f"{where}: must be an integer > 0 (at most {MAX_INT}), got {value!r}")
    return value


def _ints(value: Any, where: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ConfigError(f"{where}: must not be empty")
    return tuple(_int(v, where) for v in items)


def _precision(value: Any, where: str) -> str:
    """A precision the oracle knows (bf16, fp16, fp32, ...): an unknown one is refused, not warned about."""
    try:
        return Precision.parse(str(value)).value
    except ModelError as exc:
        raise ConfigError(f"{where}: {exc}") from None
