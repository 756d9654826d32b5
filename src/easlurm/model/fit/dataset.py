"""Measurement CSVs for calibration: one training configuration per row with its step time and mean power."""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from easlurm.errors import EaslurmError, ModelError, TraceError
from easlurm.files import atomic_writer, reading
from easlurm.inputs import MIB, csv_header, regular_file
from easlurm.model.oracle import Placements
from easlurm.model.params import HOST_NAME
from easlurm.model.workload import Precision, Sharding, Workload, parse_ckpt
from easlurm.model.zoo import ATTENTION, get_workload, model_family
from easlurm.units import MAX_INT

#: the largest measurement CSV read, and the largest value of a measured quantity (s, W, GiB)
MAX_CSV_BYTES = 256 * MIB
MAX_MEASURED = 1e12

REQUIRED = ("model", "batch", "precision", "n_gpus", "gpu", "step_time_s")
COLUMNS = (
    "model",
    "batch",
    "seq_len",
    "image_size",
    "precision",
    "optimizer",
    "n_gpus",
    "n_nodes",
    "gpu",
    "power_limit_w",
    "step_time_s",
    "avg_power_w",
    "peak_mem_gib",
    "comm_exposed_s",
    "source",
)
#: activation layouts a row may name: `channels_last` (NHWC, as NVIDIA's scripts run mixed-precision CNNs)
#: needs no layout transforms around tensor-core convolutions; empty or `nchw` is PyTorch's default
MEMORY_FORMATS = ("", "nchw", "channels_last")
#: where the samples come from: `synthetic` (tensors made on the GPU, the default) or `real` (a data loader
#: decoding and augmenting on host workers, which may hold the GPU waiting)
INPUTS = ("synthetic", "real")
#: optional columns and their defaults, written only when a row leaves the default: `sharding` (none, zero1,
#: zero2, zero3; fsdp is zero3) and `activation_checkpointing` (full, selective; 1 is full) say how an LLM job
#: was trained; `attention` how the model's attention ran (sdpa, the default, or eager: `zoo.ATTENTION`);
#: `host` the machine whose data loader fed a real-input row (its loader floor is the host's, not the GPU's)
OPTIONAL_COLUMNS: dict[str, Any] = {
    "memory_format": "",
    "input": "synthetic",
    "sharding": "",
    "activation_checkpointing": "",
    "attention": "",
    "host": "",
}


@dataclass(frozen=True)
class Measurement:
    """One measured configuration. `batch` is the global batch per optimizer step; `avg_power_w` is the mean
    power of all the job's GPUs together (None when not measured). `precision` is the canonical name of
    what ran (`Precision`): a CSV's old names (bf16, fp16) are read as the AMP names they meant."""

    model: str
    batch: int
    precision: str
    n_gpus: int
    gpu: str
    step_time_s: float
    avg_power_w: float | None = None
    power_limit_w: float | None = None
    seq_len: int | None = None
    image_size: int | None = None
    optimizer: str = "adamw"
    source: str = ""
    peak_mem_gib: float | None = (
        None  # peak GPU memory allocated on one GPU (torch max_memory_allocated), GiB
    )
    memory_format: str = ""
    #: nodes the GPUs spanned (None: the fewest that hold them at the GPU type's gpus_per_node)
    n_nodes: int | None = None
    #: data-parallel step time minus the same ranks' step time without gradient synchronisation, floored
    #: at 0: the communication the computation does not hide (None when unknown, e.g. one GPU)
    comm_exposed_s: float | None = None
    input: str = "synthetic"
    sharding: str = ""
    activation_checkpointing: str = ""
    attention: str = ""
    #: the machine the row ran on, for a real-input row: rows of one host share its loader's time per step
    host: str = ""

    def workload(self) -> Workload:
        w = get_workload(
            self.model,
            precision=self.precision,
            seq_len=self.seq_len,
            image_size=self.image_size,
            optimizer=self.optimizer,
            attention=self.attention or "sdpa",
        )
        if self.sharding or self.activation_checkpointing:
            w = w.trained_with(Sharding.parse(self.sharding or "none"), self.activation_checkpointing)
        if self.memory_format == "channels_last":
            w = dataclasses.replace(w, conv_io_bytes=0.0)
        if self.input == "real":
            w = dataclasses.replace(w, real_input=True, input_host=self.host)
        return w

    @property
    def family(self) -> str:
        return model_family(self.model)

    @property
    def precision_key(self) -> str:
        """The short precision name of parameter files and calibration scalars (fp32, tf32, bf16, fp16)."""
        return Precision.parse(self.precision).key


def _opt_number(
    raw: str | None, field: str, where: str, integer: bool = False, zero: bool = False
) -> float | int | None:
    """An optional positive number (or >= 0 with `zero`); None when the cell is empty or absent."""
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw) if len(raw) <= 64 else math.nan
    except ValueError:
        raise TraceError(f"{where}: {field} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise TraceError(f"{where}: {field} must be {'>= 0' if zero else '> 0'}, got {raw[:64]!r}")
    if integer:
        if value != int(value):
            raise TraceError(f"{where}: {field} must be an integer, got {raw!r}")
        if value > MAX_INT:
            raise TraceError(f"{where}: {field} must be at most {MAX_INT}, got {raw!r}")
        return int(value)
    if value > MAX_MEASURED:
        raise TraceError(f"{where}: {field} must be at most {MAX_MEASURED:g}, got {raw!r}")
    return value


def _precision(raw: str, where: str) -> str:
    """A row's precision as its canonical name (old names mapped: bf16 -> amp-bf16, fp16 -> amp-fp16)."""
    try:
        return Precision.parse(raw).value
    except ModelError as exc:
        raise TraceError(f"{where}: precision: {exc}") from exc


def _sharding(raw: str | None, where: str) -> str:
    if raw is None or not raw.strip():
        return ""
    try:
        return Sharding.parse(raw).value
    except ModelError as exc:
        raise TraceError(f"{where}: sharding: {exc}") from exc


def _ckpt(raw: str | None, where: str) -> str:
    try:
        return parse_ckpt(raw or "")
    except ModelError as exc:
        raise TraceError(f"{where}: activation_checkpointing: {exc}") from exc


def read_measurements(path: str | Path) -> list[Measurement]:
    """Parse and validate a measurement CSV; a bad row raises TraceError naming file, line and field."""
    p = regular_file(path, "measurement CSV", TraceError, MAX_CSV_BYTES)
    try:
        handle = p.open(newline="", encoding="utf-8-sig")  # a BOM (spreadsheets write one) is no column
    except OSError as exc:
        raise TraceError(f"{p}: cannot read ({exc.strerror})") from exc
    rows: list[Measurement] = []
    seen: dict[tuple[str, ...], int] = {}
    with handle, reading(p, "measurement CSV", TraceError):
        lines = (line for line in handle if not line.lstrip().startswith("#"))
        reader = csv.DictReader(lines)
        csv_header(reader.fieldnames or [], p, TraceError)  # a duplicated column: the last would win
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{p}: missing column(s) {', '.join(missing)} (columns: {', '.join(COLUMNS)})")
        for i, rec in enumerate(reader, start=2):
            where = f"{p}:{i}"
            key = tuple(str(v).strip() for v in rec.values())
            if key in seen:  # repeated runs differ in their times; a copied row only fakes agreement
                raise TraceError(f"{where}: the same row as line {seen[key]} (a copy; it would weigh twice)")
            seen[key] = i
            for c in REQUIRED:
                if not (rec.get(c) or "").strip():
                    raise TraceError(f"{where}: {c} is empty")
            m = Measurement(
                model=rec["model"].strip(),
                batch=int(_opt_number(rec["batch"], "batch", where, True) or 0),
                precision=_precision(rec["precision"], where),
                n_gpus=int(_opt_number(rec["n_gpus"], "n_gpus", where, True) or 0),
                gpu=rec["gpu"].strip(),
                step_time_s=float(_opt_number(rec["step_time_s"], "step_time_s", where) or 0.0),
                avg_power_w=_opt_number(rec.get("avg_power_w"), "avg_power_w", where),
                power_limit_w=_opt_number(rec.get("power_limit_w"), "power_limit_w", where),
                seq_len=_opt_number(rec.get("seq_len"), "seq_len", where, True),  # type: ignore[arg-type]
                image_size=_opt_number(rec.get("image_size"), "image_size", where, True),  # type: ignore[arg-type]
                optimizer=(rec.get("optimizer") or "").strip() or "adamw",
                source=(rec.get("source") or "").strip(),
                peak_mem_gib=_opt_number(rec.get("peak_mem_gib"), "peak_mem_gib", where),
                memory_format=(rec.get("memory_format") or "").strip().lower(),
                n_nodes=_opt_number(rec.get("n_nodes"), "n_nodes", where, True),  # type: ignore[arg-type]
                comm_exposed_s=_opt_number(rec.get("comm_exposed_s"), "comm_exposed_s", where, zero=True),
                input=(rec.get("input") or "").strip().lower() or "synthetic",
                sharding=_sharding(rec.get("sharding"), where),
                activation_checkpointing=_ckpt(rec.get("activation_checkpointing"), where),
                attention=(rec.get("attention") or "").strip().lower(),
                host=(rec.get("host") or "").strip(),
            )
            if m.host and HOST_NAME.fullmatch(m.host) is None:
                raise TraceError(
                    f"{where}: host must be letters, digits, '.', '_' and '-' (at most 64), got {m.host!r}"
                )
            if m.attention not in ("", *ATTENTION):
                raise TraceError(f"{where}: attention must be sdpa or eager, got {m.attention!r}")
            if m.input not in INPUTS:
                raise TraceError(f"{where}: input must be synthetic or real, got {m.input!r}")
            if m.memory_format not in MEMORY_FORMATS:
                raise TraceError(
                    f"{where}: memory_format must be nchw or channels_last, got {m.memory_format!r}"
                )
            if m.n_nodes is not None and m.n_nodes > m.n_gpus:
                raise TraceError(f"{where}: n_nodes must be <= n_gpus ({m.n_gpus}), got {m.n_nodes}")
            try:
                m.workload()
            except EaslurmError as exc:
                raise TraceError(f"{where}: {exc}") from exc
            rows.append(m)
    if not rows:
        raise TraceError(f"{p}: no measurements")
    return rows


def write_measurements(
    rows: Sequence[Measurement],
    path: str | Path,
    header_comment: str = "",
    extra: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Write rows in the CSV layout `read_measurements` reads (used for synthetic and measured data).

    `extra` (one mapping per row) adds columns after COLUMNS, such as `n_params` or the individual runs
    behind a mean; the reader ignores columns it does not know."""
    names = list(dict.fromkeys(k for e in extra or () for k in e))
    if extra is not None and len(extra) != len(rows):
        raise ValueError("extra needs one mapping per row")
    with atomic_writer(path, "--out", newline="") as fh:
        for line in header_comment.splitlines():
            fh.write(f"# {line}\n")
        w = csv.writer(fh)
        columns = [
            *COLUMNS,
            *(c for c, d in OPTIONAL_COLUMNS.items() if any(getattr(m, c) != d for m in rows)),
        ]
        w.writerow([*columns, *names])
        for i, m in enumerate(rows):
            more = [(extra[i] if extra else {}).get(k) for k in names]
            w.writerow(["" if v is None else v for v in [*(getattr(m, c) for c in columns), *more]])


def placements_of(rows: Sequence[Measurement]) -> Placements:
    """The rows' placements (one per measurement)."""
    if not rows:
        raise ModelError("no measurements")
    return Placements.of(
        np.array([m.n_gpus for m in rows]),
        np.array([m.batch for m in rows]),
        np.array([m.gpu for m in rows], dtype=object),
        np.array([math.nan if m.power_limit_w is None else m.power_limit_w for m in rows]),
        np.array([m.n_nodes or 0 for m in rows]),
    )
