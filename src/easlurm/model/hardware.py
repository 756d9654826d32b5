"""GPU hardware catalogue: dense peaks, bandwidths, power figures, each with its source (catalogue.yaml)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from easlurm.errors import ModelError
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
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    def peak_flops(self, precision: Precision) -> float:
        """Dense GEMM/convolution peak in FLOP/s for a training precision (FP32 runs on CUDA cores)."""
        tflops = {
            Precision.FP32: self.fp32_tflops,
            Precision.TF32: self.tf32_tflops,
            Precision.BF16: self.bf16_tflops,
            Precision.FP16: self.bf16_tflops,
        }[precision]
        return tflops * 1e12


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
        for name in _NUMERIC:
            raw = entry.get(name)
            if not isinstance(raw, int | float) or isinstance(raw, bool) or raw < 0:
                raise ModelError(f"{source}: gpus.{key}.{name} must be a number >= 0, got {raw!r}")
            values[name] = float(raw)
        if not values["idle_w"] < values["min_power_limit_w"] <= values["tdp_w"]:
            raise ModelError(f"{source}: gpus.{key}: need idle_w < min_power_limit_w <= tdp_w")
        specs[str(key)] = GpuSpec(
            key=str(key),
            name=str(entry.get("name", key)),
            gpus_per_node=int(entry.get("gpus_per_node", 8)),
            aliases=tuple(str(a).lower() for a in entry.get("aliases") or ()),
            sources={str(k): str(v) for k, v in (entry.get("sources") or {}).items()},
            **values,
        )
    return Catalogue(specs)


def load_catalogue() -> Catalogue:
    """The catalogue shipped with the package."""
    text = resources.files("easlurm.model").joinpath("catalogue.yaml").read_text()
    return parse_catalogue(yaml.safe_load(text), "catalogue.yaml")
