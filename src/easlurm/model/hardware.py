"""GPU hardware catalogue: dense peaks, bandwidths, power figures, each with its source (catalogue.yaml)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from easlurm.config import read_yaml_file
from easlurm.errors import ConfigError, ModelError
from easlurm.model.params import ARCHITECTURES
from easlurm.model.workload import Precision

_NUMERIC = [
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "hbm_gbs",
    "l2_mb",
    "memory_gb",
    "tdp_w",
    "idle_w",
    "min_power_limit_w",
    "link_gbs",
    "net_gbs",
]
#: numeric fields a GPU may leave out (GpuSpec says what stands in for them)
_OPTIONAL_NUMERIC = ["p0_idle_w"]


#: share of (TDP - idle) a GPU without a P0 reading is assumed to draw at P0 with nothing running: the median
#: over the catalogue's GPUs that have readings (data/oracle/public/nvidia_smi_idle.csv)
P0_SHARE_ESTIMATE = 0.074


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. Throughputs are dense peaks; bandwidths are per GPU and direction."""

    key: str
    name: str
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    hbm_gbs: float
    l2_mb: float
    memory_gb: float
    tdp_w: float
    idle_w: float
    min_power_limit_w: float
    link_gbs: float
    net_gbs: float
    gpus_per_node: int = 8
    #: what links the GPUs of a node ("nvlink" or "pcie"), and the nodes ("infiniband" or "ethernet"): the
    #: oracle applies one achieved-bandwidth factor per kind (docs/oracle-comm.md)
    link_kind: str = "nvlink"
    net_kind: str = "infiniband"
    #: network adapters of a node; its GPUs share them (net_gbs x gpus_per_node is the node's bandwidth)
    nics_per_node: int = 8
    #: board power in performance state P0 (clocks up) while no kernel runs, as nvidia-smi reads it on a GPU
    #: a process holds: what a step draws while it waits on the host. None: not published for this GPU,
    #: estimated from idle and TDP (`p0_w`)
    p0_idle_w: float | None = None
    #: GPU architecture (one of ARCHITECTURES); "" when a user catalogue does not say (shared physics only)
    architecture: str = ""
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def p0_w(self) -> float:
        """P0 idle power: the catalogue's reading, else idle + P0_SHARE_ESTIMATE of (TDP - idle)."""
        if self.p0_idle_w is not None:
            return self.p0_idle_w
        return self.idle_w + P0_SHARE_ESTIMATE * (self.tdp_w - self.idle_w)

    @property
    def tensor_core_precisions(self) -> tuple[Precision, ...]:
        """Precisions this GPU runs on tensor cores (TENSOR_CORE_PRECISIONS of its architecture)."""
        return TENSOR_CORE_PRECISIONS[self.architecture]

    def runs_as(self, precision: Precision) -> Precision:
        """The precision a request actually runs at: TF32 and BF16 fall back to FP32 without tensor cores
        for them; FP16 stays FP16 (tensor cores, or Pascal's packed CUDA-core rate)."""
        if precision in (Precision.TF32, Precision.BF16) and precision not in self.tensor_core_precisions:
            return Precision.FP32
        return precision

    def peak_flops(self, precision: Precision) -> float:
        """Dense GEMM peak in FLOP/s for a training precision as this GPU runs it (`fp32`'s convolutions
        take the TF32 peak where the GPU has one: `peak_flops(precision.conv)`)."""
        tflops = {
            Precision.FP32_STRICT: self.fp32_tflops,
            Precision.FP32: self.fp32_tflops,
            Precision.TF32: self.tf32_tflops,
            Precision.BF16: self.bf16_tflops,
            Precision.FP16: self.bf16_tflops,
        }[self.runs_as(precision)]
        return tflops * 1e12


#: Precisions whose GEMMs and convolutions run on tensor cores, per architecture (datasheets): Pascal has
#: none (FP16 runs on the CUDA cores at its packed rate); Volta and Turing have FP16 tensor cores only, so a
#: TF32 request runs as plain FP32 (PyTorch's allow_tf32 has no effect there) and BF16 has no tensor-core
#: path (it runs at the FP32 CUDA-core rate); Ampere and later run TF32, BF16 and FP16 on tensor cores.
#: A GPU without an architecture trusts its catalogue peaks for every precision.
TENSOR_CORE_PRECISIONS: dict[str, tuple[Precision, ...]] = {
    "pascal": (),
    "volta": (Precision.FP16,),
    "turing": (Precision.FP16,),
    **{a: (Precision.TF32, Precision.BF16, Precision.FP16) for a in ("ampere", "ada", "hopper", "blackwell")},
    "": (Precision.TF32, Precision.BF16, Precision.FP16),
}

#: GPU-to-GPU link kinds inside a node, and network kinds between nodes
LINK_KINDS = ("nvlink", "pcie")
NET_KINDS = ("infiniband", "ethernet")


def default_link_kind(link_gbs: float) -> str:
    """NVLink when the catalogue's per-GPU link bandwidth is above what a PCIe Gen5 x16 slot carries."""
    return "nvlink" if link_gbs > 64.0 else "pcie"


#: The GPU type a command predicts for when none is given (predict, corun, calibrate-pairs).
DEFAULT_GPU = "h100-sxm"


class Catalogue:
    """GPU specs by key, with aliases ('a100' -> 'a100-40gb', 'h100' -> 'h100-sxm')."""

    def __init__(self, specs: Mapping[str, GpuSpec]) -> None:
        self._specs = dict(specs)
        self._alias: dict[str, str] = {}
        for key, spec in self._specs.items():
            self._alias[key] = key
            for alias in spec.aliases:
                self._alias[alias.lower()] = key

    def keys(self) -> list[str]:
        return list(self._specs)

    def resolve(self, key: str) -> str:
        """Canonical key of a GPU name or alias; unknown -> ModelError naming the known GPUs."""
        k = str(key).strip().lower().replace("_", "-")
        if k not in self._alias:
            raise ModelError(f"unknown GPU {key!r} (known: {', '.join(self._specs)})")
        return self._alias[k]

    def get(self, key: str) -> GpuSpec:
        return self._specs[self.resolve(key)]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.strip().lower().replace("_", "-") in self._alias

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)


def parse_catalogue(doc: Any, source: str = "catalogue") -> Catalogue:
    """Build a Catalogue from a parsed YAML document; a bad entry is a ModelError naming GPU and field."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("gpus"), Mapping):
        raise ModelError(f"{source}: expected a mapping with a 'gpus' section")
    specs: dict[str, GpuSpec] = {}
    for key, entry in doc["gpus"].items():
        if not isinstance(entry, Mapping):
            raise ModelError(f"{source}: gpus.{key} must be a mapping")
        values: dict[str, float] = {}
        for name in (*_NUMERIC, *_OPTIONAL_NUMERIC):
            if name in _OPTIONAL_NUMERIC and name not in entry:
                continue
            raw = entry.get(name)
            if not isinstance(raw, int | float) or isinstance(raw, bool) or raw < 0:
                raise ModelError(f"{source}: gpus.{key}.{name} must be a number >= 0, got {raw!r}")
            values[name] = float(raw)
        if not values["idle_w"] < values["min_power_limit_w"] <= values["tdp_w"]:
            raise ModelError(f"{source}: gpus.{key}: need idle_w < min_power_limit_w <= tdp_w")
        if "p0_idle_w" in values and not values["idle_w"] <= values["p0_idle_w"] < values["tdp_w"]:
            raise ModelError(f"{source}: gpus.{key}: need idle_w <= p0_idle_w < tdp_w")
        arch = str(entry.get("architecture", "")).strip().lower()
        if arch and arch not in ARCHITECTURES:
            raise ModelError(
                f"{source}: gpus.{key}.architecture must be one of {', '.join(ARCHITECTURES)}, got {arch!r}"
            )
        link_kind = str(entry.get("link_kind", default_link_kind(values["link_gbs"]))).strip().lower()
        net_kind = str(entry.get("net_kind", "infiniband")).strip().lower()
        for name, kind, kinds in (("link_kind", link_kind, LINK_KINDS), ("net_kind", net_kind, NET_KINDS)):
            if kind not in kinds:
                raise ModelError(
                    f"{source}: gpus.{key}.{name} must be one of {', '.join(kinds)}, got {kind!r}"
                )
        per_node = int(entry.get("gpus_per_node", 8))
        nics = entry.get("nics_per_node", per_node)
        if not isinstance(nics, int) or isinstance(nics, bool) or nics < 1:
            raise ModelError(f"{source}: gpus.{key}.nics_per_node must be an integer >= 1, got {nics!r}")
        specs[str(key)] = GpuSpec(
            key=str(key),
            architecture=arch,
            name=str(entry.get("name", key)),
            gpus_per_node=per_node,
            link_kind=link_kind,
            net_kind=net_kind,
            nics_per_node=nics,
            aliases=tuple(str(a).lower() for a in entry.get("aliases") or ()),
            sources={str(k): str(v) for k, v in (entry.get("sources") or {}).items()},
            **values,
        )
    return Catalogue(specs)


def load_catalogue() -> Catalogue:
    """The catalogue shipped with the package."""
    text = resources.files("easlurm.model").joinpath("catalogue.yaml").read_text()
    # the packaged file is ours: libyaml's safe loader where built (7x faster: `easlurm sacct` reads it)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_catalogue(yaml.load(text, Loader=loader), "catalogue.yaml")


_TEXT_FIELDS = (
    "name",
    "architecture",
    "aliases",
    "gpus_per_node",
    "link_kind",
    "net_kind",
    "nics_per_node",
    "sources",
)
_FIELDS = (*_NUMERIC, *_OPTIONAL_NUMERIC, *_TEXT_FIELDS)


def _field_lines(root: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """1-based line of each `gpus.<key>[.<field>]` in a composed YAML document (for file:line errors)."""
    lines: dict[tuple[str, ...], int] = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for k, v in root.value:
        lines[(str(k.value),)] = k.start_mark.line + 1
        if k.value != "gpus" or not isinstance(v, yaml.MappingNode):
            continue
        for gk, gv in v.value:
            lines[("gpus", str(gk.value))] = gk.start_mark.line + 1
            if isinstance(gv, yaml.MappingNode):
                for fk, fv in gv.value:
                    lines[("gpus", str(gk.value), str(fk.value))] = fv.start_mark.line + 1
    return lines


@dataclass(frozen=True)
class _UserFile:
    """A user catalogue file with the line of each of its keys, so that an error names file:line and field."""

    path: Path
    lines: dict[tuple[str, ...], int]

    def error(self, where: tuple[str, ...], message: str) -> ConfigError:
        line = self.lines.get(where) or self.lines.get(where[:2]) or self.lines.get(where[:1])
        return ConfigError(f"{self.path}{'' if line is None else f':{line}'}: {'.'.join(where)}: {message}")


def load_user_catalogue(path: str | Path, base: Catalogue | None = None) -> Catalogue:
    """The shipped catalogue (or `base`) with a user file's GPUs added or overridden.

    An entry whose key or alias names a known GPU overrides the fields it gives (the rest are kept); any
    other key defines a new GPU and must give every numeric field. Errors name file:line and field."""
    p = Path(path)
    doc = read_yaml_file(p, "hardware catalogue", mapping=False)
    src = _UserFile(p, _field_lines(yaml.compose(p.read_text(encoding="utf-8"))))  # read_yaml_file checked it
    if not isinstance(doc, Mapping) or not isinstance(doc.get("gpus"), Mapping):
        raise ConfigError(f"{p}: expected a mapping with a 'gpus' section (GPU key -> fields)")
    for top in doc:
        if top not in ("version", "gpus"):
            raise src.error((str(top),), "unknown section (known: version, gpus)")
    base = base if base is not None else load_catalogue()
    specs = {k: base.get(k) for k in base}
    for raw_key, entry in doc["gpus"].items():
        key = str(raw_key).strip().lower()
        where = ("gpus", str(raw_key))
        values = _user_values(src, where, entry)
        sources = entry.get("sources") or {}
        if not isinstance(sources, Mapping):
            raise src.error((*where, "sources"), "must be a mapping of field -> where the figure comes from")
        known = base.resolve(key) if key in base else None
        if known is not None:
            spec = _override_gpu(specs[known], values, sources, p)
        else:
            spec = _new_gpu(src, where, key, values, sources)
        _check_user_gpu(src, where, spec, specs)
        specs[spec.key] = spec
    return Catalogue(specs)


def _user_values(src: _UserFile, where: tuple[str, ...], entry: Any) -> dict[str, Any]:
    """The fields one `gpus.<key>` entry of a user file gives, checked and normalised (kinds and names in
    lower case, figures as floats); an unknown field or a bad value is an error naming its line."""
    if not isinstance(entry, Mapping) or not entry:
        raise src.error(where, "must be a mapping of fields")
    for name in entry:
        if name not in _FIELDS:
            raise src.error((*where, str(name)), f"unknown field (known: {', '.join(_FIELDS)})")
    values: dict[str, Any] = {}
    for name in (*_NUMERIC, *_OPTIONAL_NUMERIC):
        if name in entry:
            raw = entry[name]
            # a zero throughput or bandwidth divides a step time into inf/NaN; idle draws may be 0
            zero_ok = name in ("idle_w", "p0_idle_w")
            if (
                not isinstance(raw, int | float)
                or isinstance(raw, bool)
                or not math.isfinite(raw)
                or not (raw >= 0 if zero_ok else raw > 0)
            ):
                raise src.error(
                    (*where, name), f"must be a number {'>= 0' if zero_ok else '> 0'} (finite), got {raw!r}"
                )
            values[name] = float(raw)
    for name in ("gpus_per_node", "nics_per_node"):
        if name in entry:
            raw = entry[name]
            if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
                raise src.error((*where, name), f"must be an integer >= 1, got {raw!r}")
            values[name] = raw
    for name, kinds in (("link_kind", LINK_KINDS), ("net_kind", NET_KINDS)):
        if name in entry:
            kind = str(entry[name]).strip().lower()
            if kind not in kinds:
                raise src.error((*where, name), f"must be one of {', '.join(kinds)}, got {kind!r}")
            values[name] = kind
    if "name" in entry:
        values["name"] = str(entry["name"])
    if "architecture" in entry:
        arch = str(entry["architecture"]).strip().lower()
        if arch not in ARCHITECTURES:
            raise src.error(
                (*where, "architecture"), f"must be one of {', '.join(ARCHITECTURES)}, got {arch!r}"
            )
        values["architecture"] = arch
    if "aliases" in entry:
        aliases = entry["aliases"]
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise src.error((*where, "aliases"), f"must be a list of names, got {aliases!r}")
        values["aliases"] = tuple(a.strip().lower() for a in aliases)
    return values


def _override_gpu(old: GpuSpec, values: dict[str, Any], sources: Mapping[Any, Any], path: Path) -> GpuSpec:
    """A known GPU with the fields a user file gives replaced; each figure it gives names the file as its
    source unless the entry's own `sources` says where it comes from."""
    if "gpus_per_node" in values and "nics_per_node" not in values and old.nics_per_node == old.gpus_per_node:
        values["nics_per_node"] = values["gpus_per_node"]  # one adapter per GPU, as before
    merged_sources = {
        **old.sources,
        **{n: f"{path}" for n in values if n in _NUMERIC or n in _OPTIONAL_NUMERIC},
    }
    merged_sources.update({str(k): str(v) for k, v in sources.items()})
    return dataclasses.replace(old, **values, sources=merged_sources)


def _new_gpu(
    src: _UserFile, where: tuple[str, ...], key: str, values: dict[str, Any], sources: Mapping[Any, Any]
) -> GpuSpec:
    """A GPU the catalogue lacks: every numeric figure must be given; the links default as in the shipped file."""
    missing = [n for n in _NUMERIC if n not in values]
    if missing:
        raise src.error(where, f"new GPU needs {', '.join(missing)} (or name a known GPU to override it)")
    values.setdefault("link_kind", default_link_kind(values["link_gbs"]))
    values.setdefault("nics_per_node", values.get("gpus_per_node", 8))
    return GpuSpec(
        key=key,
        name=str(values.pop("name", key)),
        sources={str(k): str(v) for k, v in sources.items()},
        **values,
    )


def _check_user_gpu(
    src: _UserFile, where: tuple[str, ...], spec: GpuSpec, specs: Mapping[str, GpuSpec]
) -> None:
    """The checks the merged GPU must pass: its power figures in order, and no alias naming another GPU."""
    if not spec.idle_w < spec.min_power_limit_w <= spec.tdp_w:
        raise src.error(
            where,
            f"need idle_w < min_power_limit_w <= tdp_w, got {spec.idle_w:g} / "
            f"{spec.min_power_limit_w:g} / {spec.tdp_w:g} W",
        )
    if spec.p0_idle_w is not None and not spec.idle_w <= spec.p0_idle_w < spec.tdp_w:
        raise src.error(
            (*where, "p0_idle_w"),
            f"need idle_w <= p0_idle_w < tdp_w, got {spec.idle_w:g} / {spec.p0_idle_w:g} / {spec.tdp_w:g} W",
        )
    for alias in spec.aliases:
        other = next(
            (k for k, s in specs.items() if k != spec.key and (alias == k or alias in s.aliases)), None
        )
        if other is not None:
            raise src.error((*where, "aliases"), f"alias {alias!r} already names {other}")


def _device_words(name: str) -> str:
    """'Tesla V100-SXM2-32GB' / 'NVIDIA H100 80GB HBM3 (SXM5)' -> 'v100-sxm2-32gb' / 'h100 80gb hbm3'."""
    text = name.split("(")[0].lower()
    return " ".join(w for w in text.split() if w not in ("nvidia", "tesla", "amd"))


def match_device_name(catalogue: Catalogue, device_name: str) -> str | None:
    """The catalogue key whose name is the driver's device name (torch.cuda.get_device_name), or None."""
    want = _device_words(device_name)
    found = [k for k in catalogue if _device_words(catalogue.get(k).name) == want]
    return found[0] if len(found) == 1 else None
