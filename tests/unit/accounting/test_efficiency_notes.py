"""Efficiency notes: each rule fires on its evidence and stays quiet without it, the site's thresholds and
rule list decide, idle episodes are listed with their energy (overlapping batch/srun copies counted once),
records without episodes fall back to the post-hoc idle check, and bad settings are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easlurm.accounting.notes import NoteRules, RunFigures, card_figures, efficiency_notes
from easlurm.accounting.report import GroupBy, aggregate, job_runs, notes_rows, render_json
from easlurm.accounting.seff import GpuLimits, build_card, card_document
from easlurm.accounting.seff_cli import render_card
from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord
from easlurm.accounting.whatif import Placement, WhatIf
from easlurm.cli import main
from easlurm.config import load_config

A100 = {"a100": GpuLimits("a100-40gb", 400.0, 50.0)}
GB = 1_000_000_000
T0 = 1.7e9


def gpu(
    name: str, watts: float, util: float | None, peak_b: int | None, peak_w: float | None = None
) -> DeviceRecord:
    return DeviceRecord(
        name,
        "gpu",
        watts * 600,
        watts,
        600,
        source="nvml-energy",
        duration_s=600.0,
        peak_power_w=peak_w if peak_w is not None else watts,
        mean_util_pct=util,
        peak_memory_bytes=peak_b,
        memory_total_bytes=None if peak_b is None else 40 * GB,
    )


def rows(n_gpus: int) -> list[dict[str, str]]:
    return [
        {
            "JobIDRaw": jid,
            "JobID": jid,
            "JobName": "train",
            "User": "alice",
            "Account": "physics",
            "State": "COMPLETED",
            "ElapsedRaw": "600",
            "NNodes": "1",
            "NodeList": "a100-1",
            "AllocTRES": f"cpu=1,gres/gpu:a100={n_gpus},gres/gpu={n_gpus}",
        }
        for jid in ("7", "7.batch", "7.0")
    ]


def two_gpu_job(episodes: list[dict[str, float | str]] | None) -> list[StepRecord]:
    """gpu0 busy (300 W, 85 %, 30 GB), gpu1 idle (55 W, 0 %); with episodes on both steps' records."""
    recs = []
    for step in ("batch", "0"):
        node = NodeRecord(
            0, "a100-1", T0, 600.0, [gpu("gpu0", 300.0, 85.0, 30 * GB), gpu("gpu1", 55.0, 0.0, 0)]
        )
        if episodes is not None:
            node.idle_episodes = list(episodes)  # type: ignore[attr-defined,unused-ignore]
        recs.append(StepRecord(7, step, 1, [node], "gpu"))
    return recs


def rules(**kw: object) -> NoteRules:
    return NoteRules(**kw)  # type: ignore[arg-type]


def test_idle_episodes_are_listed_with_their_energy_and_counted_once() -> None:
    """The batch step and step 0 watch the same GPU: their overlapping episodes are one episode."""
    eps = [
        {"gpu": 1, "start": T0 + 10, "end": T0 + 310, "energy_j": 16500.0},
        {"gpu": "gpu1", "start": T0 + 400, "end": T0 + 460, "energy_j": 3300.0},
    ]
    recs = two_gpu_job(eps)
    recs[1].nodes[0].idle_episodes = [{"gpu": 1, "start": T0 + 20, "end": T0 + 300, "energy_j": 15000.0}]  # type: ignore[attr-defined,unused-ignore]
    card = build_card(rows(2), recs, A100)
    assert card.idle_episodes is not None
    assert [(e.gpu, e.duration_s, e.energy_j) for e in card.idle_episodes] == [
        ("gpu1", 300.0, 16500.0),
        ("gpu1", 60.0, 3300.0),
    ]
    text = render_card(card, [], None)
    assert "Idle allocated GPUs: 2 episode(s), 19.80kJ burned idle" in text
    assert "gpu1@a100-1" in text and "(5 min): 16.50kJ" in text
    (note,) = efficiency_notes(card_figures(card), rules(rules=("idle_gpus",)))
    assert note.evidence["from_episodes"] is True
    assert note.evidence["idle_energy_j"] == pytest.approx(19800.0)
    assert "gpu1@a100-1 6 min in 2 episode(s)" in note.text
    doc = card_document(card)
    assert [e["energy_j"] for e in doc["idle_episodes"]] == [16500.0, 3300.0]


def test_idle_episodes_shorter_than_the_site_minimum_make_no_note() -> None:
    recs = two_gpu_job([{"gpu": 1, "start": T0, "end": T0 + 30, "energy_j": 1650.0}])
    card = build_card(rows(2), recs, A100)
    assert efficiency_notes(card_figures(card), rules(rules=("idle_gpus",))) == []
    (note,) = efficiency_notes(card_figures(card), rules(rules=("idle_gpus",), idle_gpu_min_s=20.0))
    assert "30 s in 1 episode(s)" in note.text


def test_a_record_without_episodes_falls_back_to_the_run_average() -> None:
    """Records written before agents kept idle episodes: gpu1 at 55 W (under 50 + 10 % of 350 W) is idle."""
    card = build_card(rows(2), two_gpu_job(None), A100)
    assert card.idle_episodes is None
    (note,) = efficiency_notes(card_figures(card), rules(rules=("idle_gpus",)))
    assert note.evidence["from_episodes"] is False
    assert "gpu1@a100-1 at 55.0W on average" in note.text
    assert "Idle allocated GPUs: gpu1@a100-1 (55.0W)" in render_card(card, [], None)


def test_an_empty_episode_list_falls_back_too() -> None:
    """No episode recorded (an agent that watched and found none, or a record from before): the card's
    post-hoc average speaks, as for older records."""
    card = build_card(rows(2), two_gpu_job([]), A100)
    assert card.idle_episodes is None
    (note,) = efficiency_notes(card_figures(card), rules(rules=("idle_gpus",)))
    assert note.evidence["from_episodes"] is False


def test_low_utilisation_and_unused_memory_follow_the_thresholds() -> None:
    card = build_card(rows(2), two_gpu_job([]), A100)
    fig = card_figures(card)
    by_rule = {n.rule: n for n in efficiency_notes(fig, rules(low_gpu_util_pct=50.0))}
    assert by_rule["low_gpu_util"].evidence["mean_util_pct"] == pytest.approx(42.5)
    assert "lowest gpu1@a100-1 0 %" in by_rule["low_gpu_util"].text
    assert "memory_unused" not in by_rule  # the fullest GPU used 75 % of its 40 GB
    assert not any(n.rule == "low_gpu_util" for n in efficiency_notes(fig, rules(low_gpu_util_pct=40.0)))
    (mem,) = efficiency_notes(fig, rules(rules=("memory_unused",), memory_used_pct=80.0))
    assert mem.evidence["used_pct"] == pytest.approx(75.0)


def whatif(label: str, p: Placement, energy: float, time: float, unc: float = 0.05) -> WhatIf:
    return WhatIf(label, p, 1.0, 1.0, time, energy, 600 * (1 + time), 1e5 * (1 + energy), "calibrated", unc)


def test_power_limit_note_quotes_the_oracle_or_the_peak() -> None:
    """Peak 300 W of a 400 W limit (75 %): under the default 80 %. With what-ifs, the best lower limit
    within the slowdown; without, the limit at the peak that would not have capped it."""
    card = build_card(rows(2), two_gpu_job([]), A100)
    fig = card_figures(card)
    (plain,) = efficiency_notes(fig, rules(rules=("power_limit",)))
    assert plain.evidence["peak_share_pct"] == pytest.approx(75.0)
    assert "a 300 W limit would not have capped it" in plain.text
    base = Placement("a100-40gb", 2, 256)
    wis = [
        whatif("at a 250 W limit", Placement("a100-40gb", 2, 256, power_limit_w=250.0), -0.20, 0.30),
        whatif("at a 300 W limit", Placement("a100-40gb", 2, 256, power_limit_w=300.0), -0.08, 0.02),
        whatif("on 1 GPU", Placement("a100-40gb", 1, 256), -0.04, 0.8),
    ]
    (oracle,) = efficiency_notes(fig, rules(rules=("power_limit",)), wis, oracle_asked=True)
    assert oracle.evidence["whatif"]["power_limit_w"] == 300.0  # 250 W costs 30 % time: over the 10 %
    assert "at a 300 W limit: -8 % energy" in oracle.text
    assert efficiency_notes(fig, rules(rules=("power_limit",), power_limit_peak_pct=70.0), wis, True) == []
    assert base.n_gpus == 2


def test_placement_note_needs_the_saving_within_the_slowdown() -> None:
    card = build_card(rows(2), two_gpu_job([]), A100)
    fig = card_figures(card)
    wis = [
        whatif("on 1 GPU", Placement("a100-40gb", 1, 256), -0.30, 0.08),
        whatif("on 2 x h100-sxm", Placement("h100-sxm", 2, 256), -0.15, -0.40),
        whatif("on 4 GPUs", Placement("a100-40gb", 4, 256), -0.50, -0.3),  # more GPUs: not this rule
    ]
    (note,) = efficiency_notes(fig, rules(rules=("placement",)), wis, True)
    assert note.evidence["whatif"]["n_gpus"] == 1 and note.evidence["alternatives"] == 2
    (typ,) = efficiency_notes(fig, rules(rules=("placement",), placement_max_slowdown_pct=5.0), wis, True)
    assert typ.evidence["whatif"]["gpu"] == "h100-sxm"
    assert efficiency_notes(fig, rules(rules=("placement",), placement_min_saving_pct=40.0), wis, True) == []


def test_seff_json_and_text_carry_the_notes_in_rule_order() -> None:
    card = build_card(
        rows(2), two_gpu_job([{"gpu": 1, "start": T0, "end": T0 + 600, "energy_j": 33000.0}]), A100
    )
    notes = efficiency_notes(card_figures(card), NoteRules(low_gpu_util_pct=50.0))
    assert [n.rule for n in notes] == ["low_gpu_util", "power_limit", "idle_gpus"]
    text = render_card(card, [], None, notes=notes)
    assert text.index("Efficiency notes:") < text.index("Step ")
    assert "  - idle allocated GPUs" in text


def test_rules_from_the_configuration(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("notes:\n  rules: [idle_gpus, low_gpu_util]\n  low_gpu_util_pct: 10\n")
    got = NoteRules.from_config(load_config(cfg_file, environ={}))
    assert got.rules == ("idle_gpus", "low_gpu_util") and got.low_gpu_util_pct == 10.0
    cfg_file.write_text("notes:\n  rules: ''\n")
    assert NoteRules.from_config(load_config(cfg_file, environ={})).rules == ()
    assert efficiency_notes(RunFigures([], None, []), NoteRules(rules=())) == []


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ("notes:\n  rules: low_gpu_util,gpu_idle\n", "notes.rules: unknown rule(s) gpu_idle"),
        ("notes:\n  low_gpu_util_pct: -5\n", "notes.low_gpu_util_pct"),
        ("notes:\n  idle_gpu_min_s: -1\n", "notes.idle_gpu_min_s"),
        ("notes:\n  placement_max_slowdown_pct: -0.5\n", "notes.placement_max_slowdown_pct"),
        ("mail:\n  mailer: sendmail {user}\n", "mail.mailer"),
        ("mail:\n  rate_per_min: 0\n", "mail.rate_per_min"),
    ],
)
def test_bad_note_and_mail_settings_are_one_line_exit_2(
    config: str, names: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(config)
    assert main(["-c", str(cfg_file), "seff", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err and str(cfg_file) in err and "Traceback" not in err


def report_rows(job: str, user: str, account: str, n_gpus: int) -> list[dict[str, str]]:
    out = []
    for r in rows(n_gpus):
        jid = r["JobIDRaw"].replace("7", job, 1)
        out.append({**r, "JobIDRaw": jid, "JobID": jid, "User": user, "Account": account})
    return out


def test_report_counts_notes_and_idle_energy_per_user_and_account() -> None:
    """alice's job recorded an idle episode (its energy is the run's idle-GPU energy); bob's has none
    recorded, so his GPU at idle power over the run counts (as before episodes); the notes per group name
    each run a rule found something in."""
    alice = two_gpu_job([{"gpu": "gpu1", "start": T0, "end": T0 + 300, "energy_j": 16500.0}])
    bob = [
        StepRecord(
            9, "batch", 1, [NodeRecord(0, "a100-1", T0, 600.0, [gpu("gpu0", 300.0, 90.0, 30 * GB)])], "gpu"
        ),
    ]
    sacct = report_rows("7", "alice", "physics", 2) + report_rows("9", "bob", "chemistry", 1)
    runs = job_runs(
        sacct,
        {"7": alice, "9": bob},
        A100,
        rules=NoteRules(rules=("idle_gpus", "low_gpu_util"), low_gpu_util_pct=50.0),
    )
    by_job = {r.job_id: r for r in runs}
    assert by_job["7"].idle_gpu_energy_j == pytest.approx(16500.0)  # the episode, not gpu1's whole run
    assert by_job["7"].notes == ("low_gpu_util", "idle_gpus") and by_job["9"].notes == ()
    groups, total = aggregate(runs, GroupBy.ACCOUNT)
    by = {g.key: g for g in groups}
    assert by["physics"].notes == {"low_gpu_util": ["7"], "idle_gpus": ["7"]} and by["chemistry"].notes == {}
    assert total.idle_gpu_energy_j == pytest.approx(16500.0)
    header, cells = notes_rows(groups, total)
    assert header == ["Group", "Note", "Runs", "IdleGPU_kWh", "Jobs"]
    assert ["physics", "idle_gpus", "1", format(16500 / 3.6e6, ".4g"), "7"] in cells
    doc = json.loads(render_json(GroupBy.ACCOUNT, {}, groups, total, None, notes=True))
    assert doc["total"]["efficiency_notes"]["idle_gpus"] == {"runs": 1, "jobs": ["7"]}
    assert (
        "efficiency_notes" not in json.loads(render_json(GroupBy.ACCOUNT, {}, groups, total, None))["total"]
    )


def test_a_bad_setting_in_the_environment_stops_seff_before_slurm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The environment layer is read lazily: seff reads it before asking sacct, so the line names the setting."""
    monkeypatch.setenv("EASLURM_NOTES__RULES", "low_gpu_util,gpu_idle")
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    assert main(["seff", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "EASLURM_NOTES__RULES: notes.rules: unknown rule(s) gpu_idle" in err


def test_episodes_of_a_record_reduced_to_node_detail_name_the_gpu_once() -> None:
    """A record the AdminComment cap reduced to node detail names an episode's GPU "host:gpu1"."""
    recs = two_gpu_job([{"gpu": "a100-1:gpu1", "start": T0, "end": T0 + 90, "energy_j": 4950.0}])
    card = build_card(rows(2), recs[:1], A100)
    assert card.idle_episodes is not None
    assert [(e.host, e.gpu) for e in card.idle_episodes] == [("a100-1", "gpu1")]
