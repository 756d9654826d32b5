"""Scheduling policies by name: each is a pure `decide(snapshot, oracle) -> Decision`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from easlurm.errors import ConfigError
from easlurm.priority.packing import BatchPacker
from easlurm.priority.policies.aurachronos import AuraChronos
from easlurm.priority.policies.charon import Charon
from easlurm.priority.policies.charon_pl import CharonPL
from easlurm.priority.policies.chronos import Chronos
from easlurm.priority.policies.hades import Hades
from easlurm.priority.policies.pollux import Pollux
from easlurm.priority.policies.slurm_baseline import SlurmBaseline, StaticCap
from easlurm.priority.policies.themis import Themis
from easlurm.priority.policies.zeus import Zeus
from easlurm.priority.policies.zeus_share import ZeusShare
from easlurm.priority.snapshot import ClusterSnapshot, Decision


class Policy(Protocol):
    """What the simulator and the daemon call; `time_sensitive` asks to be called every interval."""

    name: str
    time_sensitive: bool

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision: ...

    def wake_at_s(self, snapshot: ClusterSnapshot, oracle: Any) -> float | None: ...


#: name -> (class, fixed parameters). "-rigid" variants use only each job's requested option.
REGISTRY: dict[str, tuple[type[BatchPacker], dict[str, Any]]] = {
    "pollux": (Pollux, {"malleable": True}),
    "pollux-rigid": (Pollux, {"malleable": False}),
    "themis": (Themis, {"malleable": True}),
    "themis-rigid": (Themis, {"malleable": False}),
    "chronos": (Chronos, {"malleable": False}),
    "chronos-malleable": (Chronos, {"malleable": True}),
    "zeus": (Zeus, {}),
    "zeus-share": (ZeusShare, {}),
    "hades": (Hades, {}),
    "aurachronos": (AuraChronos, {}),
    "charon": (Charon, {}),
    "charon-thesis": (Charon, {"adaptive": False}),
    "charon-pl": (CharonPL, {}),
    "slurm": (SlurmBaseline, {}),
    "static-cap": (StaticCap, {}),
}
POLICY_NAMES: tuple[str, ...] = tuple(REGISTRY)
#: `static-cap-NN`: the site-wide limit at NN % of TDP (an integer, 1..100)
STATIC_CAP_PREFIX = "static-cap-"


def _entry(name: str) -> tuple[type[BatchPacker], dict[str, Any]]:
    """The class and fixed parameters of a policy name, `static-cap-NN` included; ConfigError otherwise."""
    key = name.lower()
    if key in REGISTRY:
        return REGISTRY[key]
    if key.startswith(STATIC_CAP_PREFIX):
        pct = key[len(STATIC_CAP_PREFIX) :]
        if not (pct.isdigit() and 1 <= int(pct) <= 100):
            raise ConfigError(
                f"policy {name!r}: the cap is a whole percentage of TDP, 1..100 (e.g. static-cap-70)"
            )
        return StaticCap, {"cap_frac": int(pct) / 100.0}
    raise ConfigError(f"unknown policy {name!r} (known: {', '.join(POLICY_NAMES)}, static-cap-NN)")


def known_policy(name: str) -> bool:
    """Whether `get_policy` knows the name (`static-cap-NN` for any NN in 1..100 included)."""
    try:
        _entry(name)
    except ConfigError:
        return False
    return True


def policy_params(policy: str, sched: Mapping[str, Any]) -> dict[str, Any]:
    """The site's `sched` settings a policy takes (for `easlurm schedd` and `easlurm sim run` alike): aging
    weight and the power limits' slowdown bound for all (only the energy policies choose limits), the spread
    slack where set, consolidation for all (only the energy policies consolidate), cooldown (at least the minimum run time) for
    AuraChronos."""
    params: dict[str, Any] = {"aging_weight": sched["aging_weight"], "max_slowdown": sched["max_slowdown"]}
    if sched.get("spread_slack") is not None:
        params["spread_slack"] = sched["spread_slack"]
    for key in ("consolidate", "consolidation_slack", "min_off_s", "max_wake_wait_s"):
        if sched.get(key) is not None:
            params[key] = sched[key]
    if policy.lower().startswith("aurachronos"):
        # it spares jobs that (re)started within its cooldown: at least the site's minimum run time, so that
        # it picks victims the daemon may preempt
        params["preempt_cooldown_s"] = max(sched["preempt_cooldown_s"], sched.get("min_run_s") or 0.0)
    return params


def get_policy(name: str, **params: Any) -> BatchPacker:
    """A fresh policy; `params` (aging_weight, preempt_cooldown_s, power_budget_w, ...) override defaults."""
    cls, fixed = _entry(name)
    clash = [k for k in fixed if k in params and params[k] != fixed[k]]
    if clash:
        raise ConfigError(f"policy {name!r}: {', '.join(clash)} is set by the name; drop the parameter")
    policy = cls(**{**fixed, **params})
    policy.name = name.lower()
    return policy


__all__ = [
    "POLICY_NAMES",
    "REGISTRY",
    "AuraChronos",
    "Charon",
    "CharonPL",
    "Chronos",
    "Hades",
    "Policy",
    "Pollux",
    "SlurmBaseline",
    "StaticCap",
    "Themis",
    "Zeus",
    "ZeusShare",
    "get_policy",
    "known_policy",
    "policy_params",
]
