"""Users' own models as a YAML layer list, with errors that name the file, line and field."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from easlurm.errors import ModelError
from easlurm.files import read_text
from easlurm.inputs import MAX_YAML_BYTES, load_yaml
from easlurm.model.layers import WorkloadBuilder
from easlurm.model.workload import Optimizer, Precision, Workload

#: layer type -> builder method name
LAYER_TYPES = {
    "linear": "linear",
    "conv2d": "conv2d",
    "attention": "attention",
    "norm": "norm",
    "activation": "activation",
    "elementwise": "elementwise",
    "dropout": "dropout",
    "embedding": "embedding",
    "pool": "pool",
    "loss": "loss",
}

EXAMPLE = """\
name: my-encoder
family: bert          # optional: selects targeted calibration scalars
seq_len: 128          # optional, informational
layers:
  - embedding: {tokens: 128, vocab: 30522, dim: 768}
  - linear: {tokens: 128, d_in: 768, d_out: 2304, repeat: 6}
  - attention: {seq: 128, heads: 12, head_dim: 64, repeat: 6}
  - norm: {elems: 98304, channels: 768, kind: layernorm, repeat: 12}
  - loss: {tokens: 1, classes: 2}
"""


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping under the key '__line__'."""


def _mapping_with_line(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = dict(loader.construct_mapping(node, deep=True))
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def _method_fields(method: Callable[..., Any]) -> tuple[list[str], list[str]]:
    """(required, optional) keyword names of a builder method."""
    req: list[str] = []
    opt: list[str] = []
    for name, param in inspect.signature(method).parameters.items():
        if name == "self":
            continue
        (req if param.default is inspect.Parameter.empty else opt).append(name)
    return req, opt


def parse_workload_yaml(
    text: str,
    source: str = "<yaml>",
    precision: str | Precision | None = None,
    optimizer: str | Optimizer | None = None,
) -> Workload:
    """Build a Workload from a YAML layer list (see EXAMPLE); shapes are per sample."""
    load_yaml(text, source, ModelError)  # the boundary's rules first: duplicate keys, nesting, alias bombs
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ModelError(f"{source}{line}: invalid YAML ({getattr(exc, 'problem', exc)})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list) or not doc["layers"]:
        raise ModelError(f"{source}: expected a mapping with a non-empty 'layers' list")
    prec = Precision.parse(precision or doc.get("precision", "bf16"))
    b = WorkloadBuilder(prec)
    for i, entry in enumerate(doc["layers"], start=1):
        line = entry.get("__line__", "?") if isinstance(entry, dict) else "?"
        where = f"{source}:{line}: layer {i}"
        if not isinstance(entry, dict):
            raise ModelError(f"{where}: expected a mapping like 'linear: {{...}}', got {entry!r}")
        fields = {k: v for k, v in entry.items() if k != "__line__"}
        if "type" in fields:
            kind = fields.pop("type")
        elif len(fields) == 1:
            kind, inner = next(iter(fields.items()))
            if not isinstance(inner, dict):
                raise ModelError(f"{where} ({kind}): expected a mapping of fields")
            fields = {k: v for k, v in inner.items() if k != "__line__"}
        else:
            raise ModelError(f"{where}: give 'type: <kind>' or a single '<kind>: {{...}}' key")
        if kind not in LAYER_TYPES:
            raise ModelError(f"{where}: unknown layer type {kind!r} (known: {', '.join(LAYER_TYPES)})")
        method = getattr(b, LAYER_TYPES[kind])
        req, opt = _method_fields(method)
        unknown = [k for k in fields if k not in req and k not in opt]
        if unknown:
            raise ModelError(
                f"{where} ({kind}): unknown field {unknown[0]!r} (fields: {', '.join(req + opt)})"
            )
        missing = [k for k in req if k not in fields]
        if missing:
            raise ModelError(f"{where} ({kind}): missing field {missing[0]!r}")
        for k, v in fields.items():
            if k not in ("kind", "bias", "shared", "tied", "flash", "causal", "dropout", "fp32_logits") and (
                not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v)
            ):
                raise ModelError(f"{where} ({kind}): {k} must be a number (finite), got {v!r}")
        try:
            method(**fields)
        except ModelError as exc:
            raise ModelError(f"{where} ({kind}): {exc}") from exc
    name = str(doc.get("name") or Path(source).stem)
    return b.build(
        name,
        family=str(doc.get("family") or "custom"),
        optimizer=optimizer or doc.get("optimizer", "adamw"),
        seq_len=doc.get("seq_len"),
        image_size=doc.get("image_size"),
    )


def load_workload_yaml(
    path: str | Path, precision: str | Precision | None = None, optimizer: str | Optimizer | None = None
) -> Workload:
    """Read a YAML layer list from a file."""
    p = Path(path)
    text = read_text(p, "workload", ModelError, MAX_YAML_BYTES)
    return parse_workload_yaml(text, str(p), precision, optimizer)
