"""One key and one unit per quantity in every command's JSON and tables: EDP is `edp_j_s` and J*s,
energy keys end in `_j` and power keys in `_w` (the unit last), the same default GPU everywhere, and
-P output that splits into as many fields as its header."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from easlurm.cli import main

#: Keys that name energy or power but are not a quantity of it.
#: power_cycles counts node power-downs; power_saving holds the power-saving settings (each with its unit)
NOT_QUANTITIES = frozenset(
    {"energy_flags", "energy_record", "power_times_s", "best_edp", "power_cycles", "power_saving"}
)


def keys(doc: Any) -> Iterator[str]:
    """Every key of a JSON document, at any depth."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from keys(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from keys(v)


def bad_keys(doc: Any) -> list[str]:
    """Keys breaking the rules: EDP is edp_j_s; energy ends in _j; power ends in _w; no unit mid-key."""
    rules = (
        lambda k: "edp" in k and k != "edp_j_s",
        lambda k: "energy" in k and not k.endswith("_j"),
        lambda k: "power" in k and not k.endswith("_w"),
        lambda k: re.search(r"_(w|j|kwh|js)_(?!s$)", k) is not None,
    )
    out = [k for k in set(keys(doc)) - NOT_QUANTITIES if any(rule(k) for rule in rules)]
    return sorted(out)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def sacct_doc() -> dict[str, Any]:
    from easlurm.accounting.sacct_rows import EASLURM_COLUMNS, build_rows, render_json
    from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment

    dev = DeviceRecord("gpu0", "gpu", 1000.0, 250.0, 40, False, "nvml-energy")
    rec = StepRecord(9, "0", 1, [NodeRecord(0, "a100-1", 1.7e9, 4.0, [dev])])
    rows, _ = build_rows(
        [
            {"JobIDRaw": "9", "JobID": "9", "AdminComment": encode_admin_comment([rec]), "NNodes": "1"},
            {"JobIDRaw": "9.0", "JobID": "9.0", "AdminComment": "", "NNodes": "1"},
        ]
    )
    doc: dict[str, Any] = json.loads(
        render_json(["JobID", "NNodes", "ConsumedEnergy", *EASLURM_COLUMNS], rows)
    )
    return doc


def profile_doc() -> dict[str, Any]:
    from easlurm.energy.result import DeviceEnergy, ProfileResult

    res = ProfileResult(
        "n1", 0.0, 4.0, [DeviceEnergy("gpu0", "gpu", 1000.0, 250.0, 260.0, 40, False, "nvml")]
    )
    return res.to_dict()


def test_the_rules_catch_the_old_names() -> None:
    old = {"edp_js": 1, "power_w_alone": 1, "power_w_shared": 1, "energy_mwh": 1, "edp_j_s": 1, "energy_j": 1}
    assert bad_keys(old) == ["edp_js", "energy_mwh", "power_w_alone", "power_w_shared"]


def test_every_command_names_energy_power_and_edp_alike(capsys: pytest.CaptureFixture[str]) -> None:
    docs = {
        "sacct": sacct_doc(),
        "profile": profile_doc(),
        "predict": json.loads(run(capsys, "predict", "--model", "resnet50", "--gpus", "1,2", "--json")),
        "corun": json.loads(run(capsys, "model", "corun", "bert-base:16", "distilbert:8", "--json")),
        "sim run": json.loads(run(capsys, "sim", "run", "--policy", "zeus", "--hours", "0.1", "--json")),
    }
    from easlurm.sim.report import MAIN_COLUMNS

    docs["campaign report"] = {metric: None for metric, _, _ in MAIN_COLUMNS}
    from easlurm.accounting.report import GroupTotals

    docs["report"] = GroupTotals("alice").to_dict()  # its tables show kWh; its JSON and CSV are SI
    for command, doc in docs.items():
        assert bad_keys(doc) == [], command
    # the quantities each command has, under the same key
    assert "edp_j_s" in set(keys(docs["sacct"])) & set(keys(docs["profile"])) & set(keys(docs["predict"]))
    for command in ("sacct", "profile"):
        assert {"total_energy_j", "mean_power_w"} <= set(keys(docs[command])), command
    assert "mean_jct_s" in docs["sim run"]["metrics"] and "mean_jct_s" in docs["campaign report"]


def test_edp_is_shown_in_joule_seconds_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    from easlurm.accounting.sacct_rows import format_cell
    from easlurm.energy.cli import device_rows
    from easlurm.energy.result import DeviceEnergy, ProfileResult

    assert format_cell("EDP", 2.5e4) == "25.00kJ*s"
    gpu = DeviceEnergy("gpu0", "gpu", 1000.0, 250.0, 260.0, 40, False, "nvml", duration_s=4.0)
    assert device_rows(ProfileResult("n1", 0.0, 4.0, [gpu]))[0]["EDP"] == "4.00kJ*s"
    out = run(capsys, "predict", "--model", "resnet50", "-P", "-n", "-o", "EDP,EnergyStep,Power")
    for line in out.splitlines():
        edp, energy, power = line.split("|")
        assert edp.endswith("J*s") and energy.endswith("J") and power.endswith("W"), line


def test_durations_are_seconds_in_sim_run_and_campaign_reports() -> None:
    from easlurm.sim.report import MAIN_COLUMNS
    from easlurm.sim.run_cli import _SUMMARY

    report = {metric: (label, scale) for metric, label, scale in MAIN_COLUMNS}
    run_labels = {metric: label for label, metric, _ in _SUMMARY}
    for metric in ("mean_jct_s", "p95_jct_s", "time_over_budget_s"):
        assert report[metric][1] == 1.0 and report[metric][0].endswith("(s)"), metric
        if metric in run_labels:
            assert run_labels[metric].endswith("(s)"), metric


def test_one_default_gpu() -> None:
    from easlurm.model.cli import predict_cmd
    from easlurm.model.colocation_cli import corun_cmd
    from easlurm.model.hardware import DEFAULT_GPU

    defaults = {
        cmd.name: next(p.default for p in cmd.params if p.name in ("gpu", "gpu_types"))
        for cmd in (predict_cmd, corun_cmd)
    }
    assert defaults == {"predict": DEFAULT_GPU, "corun": DEFAULT_GPU}


def test_parsable_output_splits_like_its_header(capsys: pytest.CaptureFixture[str]) -> None:
    """predict -P: every line has as many fields as the header (the best-EDP mark is a named column)."""
    out = run(capsys, "predict", "--model", "resnet50", "--gpus", "1,2,4", "-P").splitlines()
    header = out[0].split("|")
    assert header[-1] == "Best" and all(len(line.split("|")) == len(header) for line in out)
    assert sum(line.endswith("|*") for line in out[1:]) == 1


def test_sim_run_prints_energy_in_joules(capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator's summary follows the rule too: energies in J with an SI prefix, the same figure as
    its --json's `energy_j`, and no kWh anywhere."""
    from easlurm.units import format_energy

    argv = ("sim", "run", "--policy", "zeus", "--hours", "0.1")
    text = run(capsys, *argv)
    doc = json.loads(run(capsys, *argv, "--json"))
    lines = {ln[:24].strip(): ln[25:].strip() for ln in text.splitlines()[1:]}
    assert lines["Energy"] == format_energy(doc["metrics"]["energy_j"]) and lines["Energy"].endswith("J")
    assert lines["busy"].endswith("J") and lines["idle"].endswith("J")
    assert "kwh" not in text.lower() and not any("kwh" in k for k in keys(doc))
