"""Policies whose runs came out identical: one row in the summary ("hades = zeus"), not two ranked apart.

Two policies can be identical by construction on some inputs (charon is zeus's order under a power budget:
without a budget it is zeus; policies that differ only in the order they start jobs agree where no job ever
waits). Ranking such rows against each other, or against a third, counts one outcome twice and presents
a tie as a gap. Runs are identical when every job started, ended and used the same energy (the digest a
replay records, `outcome_digest`), or, without a digest, when every outcome metric is exactly equal, for
every seed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from easlurm.sim.differences import QUEUED_AFTER_S

#: Metrics that say how the run was computed, not what happened: left out of the comparison.
NOT_OUTCOMES = frozenset({"wall_s", "events_per_s", "runner_wall_s", "replay_wall_s", "jobs_per_s"})
#: Policies whose only difference from the others is a power budget (without one, it never binds).
BUDGET_POLICIES = ("charon",)
DIGEST_KEY = "outcome_digest"


def outcome_digest(rows: Iterable[Mapping[str, Any]] | None) -> str | None:
    """A digest of each job's start, end and energy (by job id, order-free); None without rows."""
    if rows is None:
        return None
    keyed = sorted(
        (str(r.get("job_id")), repr(r.get("start_s")), repr(r.get("end_s")), repr(r.get("energy_j")))
        for r in rows
    )
    if not keyed:
        return None
    # the digest of repr(keyed), hashed a piece at a time: a million jobs never make one giant string
    digest = hashlib.sha256(b"[")
    for i, key in enumerate(keyed):
        digest.update(((", " if i else "") + repr(key)).encode())
    digest.update(b"]")
    return digest.hexdigest()


def _outcome(result: Mapping[str, Any]) -> Any:
    digest = result.get(DIGEST_KEY)
    if digest:
        return ("jobs", digest)
    metrics = result.get("metrics") or {}
    return ("metrics", tuple(sorted((k, repr(v)) for k, v in metrics.items() if k not in NOT_OUTCOMES)))


def _cell(record: Mapping[str, Any]) -> tuple[Any, ...]:
    spec = record["spec"]
    return (record["experiment"], spec["scenario"], spec["load_jobs_per_h"])


def identical_groups(
    records: Sequence[Mapping[str, Any]], exclude: frozenset[str] = frozenset()
) -> list[tuple[tuple[Any, ...], list[str]]]:
    """(cell, labels) of each set of two or more labels of one cell whose runs are identical seed by seed
    (the same seeds, the same outcome for each); `exclude` labels (a replay's record) are never merged."""
    by_label: dict[tuple[Any, ...], dict[str, dict[Any, Any]]] = {}
    for r in records:
        if r["label"] in exclude:
            continue
        seeds = by_label.setdefault(_cell(r), {}).setdefault(str(r["label"]), {})
        seeds[r["spec"]["seed"]] = _outcome(r["result"])
    out: list[tuple[tuple[Any, ...], list[str]]] = []
    for cell, labels in by_label.items():
        groups: dict[Any, list[str]] = {}
        for label, seeds in labels.items():
            groups.setdefault(tuple(sorted(seeds.items(), key=lambda kv: repr(kv[0]))), []).append(label)
        out.extend((cell, members) for members in groups.values() if len(members) > 1)
    return out


def why_identical(labels: Sequence[str], records: Sequence[Mapping[str, Any]]) -> str:
    """Why the runs of `labels` agree, where it is known: no power budget for a budget policy, or no job
    ever queued (so the order of starts never mattered)."""
    mine = [r for r in records if r["label"] in labels]
    no_budget = all(r["spec"].get("power_budget_w") is None for r in mine)
    budgeted = [lab for lab in labels if lab.split("+")[0].startswith(BUDGET_POLICIES)]
    reasons = []
    if no_budget and budgeted:
        reasons.append(
            f"no power budget was given, and {', '.join(budgeted)} differ{'s' if len(budgeted) == 1 else ''} "
            "from the others mainly under a budget (--power-budget)"
        )
    queued = [(r["result"].get("metrics") or {}).get("queued_jobs") for r in mine]
    if queued and all(q == 0 for q in queued):
        reasons.append(
            f"no job waited more than {QUEUED_AFTER_S:.0f} s under any of them, so the order in which they "
            "start jobs never mattered"
        )
    return "; ".join(reasons) if reasons else "the reason is not known: their decisions never differed here"


def merge(
    records: Sequence[Mapping[str, Any]], exclude: frozenset[str] = frozenset()
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """(records with each identical group as one label "a = b", the sentences that say so and why)."""
    rename: dict[tuple[tuple[Any, ...], str], str] = {}
    drop: set[tuple[tuple[Any, ...], str]] = set()
    sentences = []
    for cell, labels in identical_groups(records, exclude):
        merged = " = ".join(labels)
        rename[(cell, labels[0])] = merged
        drop.update((cell, lab) for lab in labels[1:])
        where = " / ".join(str(c) for c in cell[:2]) + ("" if cell[2] is None else f" @ {cell[2]:g} jobs/h")
        sentences.append(
            f"{where}: {merged}: identical outcomes (every run gave the same "
            + ("start, end and energy for every job" if _has_digest(records, labels) else "figures")
            + f", seed by seed), shown as one row: {why_identical(labels, records)}."
        )
    out: list[Mapping[str, Any]] = []
    for r in records:
        key = (_cell(r), str(r["label"]))
        if key in drop:
            continue
        out.append({**r, "label": rename[key]} if key in rename else r)
    return out, sentences


def _has_digest(records: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> bool:
    return all(r["result"].get(DIGEST_KEY) for r in records if r["label"] in labels)
