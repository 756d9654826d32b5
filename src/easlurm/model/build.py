"""The one place an oracle and its GPU catalogue are built, so a user catalogue (`--hardware FILE`,
`oracle.hardware`) reaches every command, worker process and Slurm task that predicts."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from easlurm.config import ENV_PREFIX
from easlurm.model.hardware import Catalogue, load_catalogue, load_user_catalogue

#: Child processes (campaign workers, Slurm array tasks) inherit the user catalogue through this.
HARDWARE_ENV = f"{ENV_PREFIX}ORACLE__HARDWARE"


def hardware_setting(cfg: Any = None) -> str | None:
    """The user catalogue path: `oracle.hardware` of `cfg`, else of the effective configuration."""
    if cfg is None:
        from easlurm.config import load_config

        cfg = load_config()
    value = cfg.get("oracle.hardware")
    return str(value) if value else None


def use_hardware(path: str | None) -> Catalogue:
    """Validate a `--hardware FILE` now (errors before any work) and export it for child processes."""
    cat = catalogue(path)
    if path:
        os.environ[HARDWARE_ENV] = str(Path(path).resolve())
    return cat


def apply_hardware(cfg: Any, flag: str | None) -> Catalogue:
    """A command's catalogue: its `--hardware` flag, else `oracle.hardware`; exported for child processes."""
    return use_hardware(flag or hardware_setting(cfg))


def catalogue(hardware: str | Path | None = None) -> Catalogue:
    """The shipped catalogue, with `hardware`'s GPUs added or overridden; parsed once per file version."""
    if not hardware:
        return _shipped()
    p = Path(hardware).resolve()
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as exc:
        from easlurm.errors import ConfigError

        raise ConfigError(f"{hardware}: cannot read GPU catalogue ({exc.strerror})") from exc
    return _user(str(p), mtime)


@functools.lru_cache(maxsize=1)
def _shipped() -> Catalogue:
    return load_catalogue()


@functools.lru_cache(maxsize=8)
def _user(path: str, mtime_ns: int) -> Catalogue:
    return load_user_catalogue(path, _shipped())


def default_catalogue() -> Catalogue:
    """The catalogue the configuration names (files, EASLURM_ORACLE__HARDWARE): for code with no flags."""
    return catalogue(hardware_setting())


def build_oracle(
    params: Any = None, hardware: str | Path | None = None, *, cache_size: int = 4096, use_config: bool = True
) -> Any:
    """An analytical Oracle over `params` (an OracleParams, a YAML path or None for the shipped ones) and
    the catalogue of `hardware` (None: the configured one when `use_config`, else the shipped one)."""
    from easlurm.model.oracle import Oracle
    from easlurm.model.params import OracleParams, load_params

    p = params if isinstance(params, OracleParams) else load_params(params)
    if hardware is None and use_config:
        hardware = hardware_setting()
    return Oracle(p, catalogue=catalogue(hardware), cache_size=cache_size)
