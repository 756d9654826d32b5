"""The one place an oracle and its GPU catalogue are built, so a user catalogue (`--hardware FILE`,
`oracle.hardware`) and calibrated parameters (`oracle.params`) reach every command, worker process and
Slurm task that predicts."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

from easlurm.config import ENV_PREFIX, load_config
from easlurm.errors import ConfigError, ModelError
from easlurm.model.dense_check import sparse_figure
from easlurm.model.hardware import Catalogue, load_catalogue, load_user_catalogue
from easlurm.model.limit_check import limit_responses
from easlurm.model.oracle import Oracle
from easlurm.model.params import OracleParams, load_params

#: Child processes (campaign workers, Slurm array tasks) inherit the user catalogue through this.
HARDWARE_ENV = f"{ENV_PREFIX}ORACLE__HARDWARE"
#: ... and the oracle parameter file through this.
PARAMS_ENV = f"{ENV_PREFIX}ORACLE__PARAMS"


def hardware_setting(cfg: Any = None) -> str | None:
    """The user catalogue path: `oracle.hardware` of `cfg`, else of the effective configuration."""
    if cfg is None:
        cfg = load_config()
    value = cfg.get("oracle.hardware")
    return str(value) if value else None


def params_setting(cfg: Any = None) -> str | None:
    """The oracle parameter file: `oracle.params` of `cfg`, else of the effective configuration."""
    if cfg is None:
        cfg = load_config()
    value = cfg.get("oracle.params")
    return str(value) if value else None


def use_params(path: str | None) -> OracleParams:
    """Validate a parameter file now (errors before any work) and export it for child processes."""
    params = oracle_params(path)
    if path:
        os.environ[PARAMS_ENV] = str(Path(path).resolve())
    return params


def oracle_params(path: str | Path | None = None) -> OracleParams:
    """The shipped parameters, or `path`'s; parsed once per file version (campaigns build hundreds of
    oracles: parsing the YAML each time took a quarter of a 10-hour run)."""
    if not path:
        return _shipped_params()
    return _user_params(*_file_version(path, "oracle parameters", ModelError))


@functools.lru_cache(maxsize=1)
def _shipped_params() -> OracleParams:
    return load_params()


@functools.lru_cache(maxsize=8)
def _user_params(path: str, mtime_ns: int) -> OracleParams:
    return load_params(path)


def default_params() -> OracleParams:
    """The parameters the configuration names (files, EASLURM_ORACLE__PARAMS): for code with no flags."""
    return oracle_params(params_setting())


def apply_oracle_config(cfg: Any, hardware_flag: str | None = None) -> Catalogue:
    """A command's oracle settings: its `--hardware` flag, else `oracle.hardware`, and `oracle.params`,
    validated and exported for child processes; returns the catalogue."""
    use_params(params_setting(cfg))
    return use_hardware(hardware_flag or hardware_setting(cfg))


def use_hardware(path: str | None) -> Catalogue:
    """Validate a `--hardware FILE` now (errors before any work) and export it for child processes."""
    cat = catalogue(path)
    if path:
        os.environ[HARDWARE_ENV] = str(Path(path).resolve())
    return cat


def catalogue(hardware: str | Path | None = None) -> Catalogue:
    """The shipped catalogue, with `hardware`'s GPUs added or overridden; parsed once per file version."""
    if not hardware:
        return _shipped()
    return _user(*_file_version(hardware, "GPU catalogue", ConfigError))


def _file_version(path: str | Path, what: str, error: type[Exception]) -> tuple[str, int]:
    """(absolute path, mtime): the key under which a file is parsed once per version."""
    p = Path(path).resolve()
    try:
        return str(p), p.stat().st_mtime_ns
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from exc


@functools.lru_cache(maxsize=1)
def _shipped() -> Catalogue:
    return load_catalogue()


@functools.lru_cache(maxsize=8)
def _user(path: str, mtime_ns: int) -> Catalogue:
    cat = load_user_catalogue(path, _shipped())
    shipped = _shipped()
    changed = [k for k in cat if k not in shipped or cat.get(k) != shipped.get(k)]
    _warn_limit_response(path, cat, changed)
    _warn_sparse_figures(path, cat, changed)
    return cat


def _warn_sparse_figures(path: str, cat: Catalogue, changed: list[str]) -> None:
    """Warn about each GPU the file adds or changes whose tensor figures are not dense peaks of its
    architecture (model/dense_check.py: NVIDIA's figures with sparsity are twice them), once per file version."""
    for key in changed:
        problem = sparse_figure(cat.get(key))
        if problem:
            logging.getLogger(__name__).warning("%s: gpus.%s: %s", path, key, problem)


def _warn_limit_response(path: str, cat: Catalogue, changed: list[str]) -> None:
    """Warn about each GPU the file adds or changes whose figures imply an implausible response to its
    minimum power limit (model/limit_check.py), once per file version."""
    for r in limit_responses(Oracle(_shipped_params(), cat), changed):
        problem = r.problem()
        if problem:
            logging.getLogger(__name__).warning(
                "%s: gpus.%s: FP32 ResNet-50 is predicted %s; check tdp_w, min_power_limit_w, p0_idle_w",
                path,
                r.gpu,
                problem,
            )


def default_catalogue() -> Catalogue:
    """The catalogue the configuration names (files, EASLURM_ORACLE__HARDWARE): for code with no flags."""
    return catalogue(hardware_setting())


def build_oracle(
    params: Any = None, hardware: str | Path | None = None, *, cache_size: int = 4096, use_config: bool = True
) -> Any:
    """An analytical Oracle over `params` (an OracleParams or a YAML path) and the catalogue of `hardware`;
    None for either: the configured one when `use_config`, else the shipped one."""
    if params is None and use_config:
        params = params_setting()
    p = params if isinstance(params, OracleParams) else oracle_params(params)
    if hardware is None and use_config:
        hardware = hardware_setting()
    return Oracle(p, catalogue=catalogue(hardware), cache_size=cache_size)
