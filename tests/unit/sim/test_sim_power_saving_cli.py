"""Bad node power and power-saving values, in a cluster YAML, a flag or a campaign plan: one line
`easlurm: error: ...` naming the file and field (or the flag), exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.cli import main

NODE = "  - {name: n, gpu_type: a100-40gb, gpus: 8"

#: id -> (cluster YAML, what the line must name)
BAD_CLUSTERS: dict[str, tuple[str, str]] = {
    "negative-idle": (f"nodes:\n{NODE}, idle_w: -5}}\n", "nodes[0].idle_w"),
    "negative-off": (f"nodes:\n{NODE}, off_w: -1}}\n", "nodes[0].off_w"),
    "off-above-idle": (f"nodes:\n{NODE}, idle_w: 100, off_w: 150}}\n", "nodes[0].off_w"),
    "nan-idle": (f"nodes:\n{NODE}, idle_w: .nan}}\n", "nodes[0].idle_w"),
    "suspend-zero": (
        f"nodes:\n{NODE}}}\npower_saving: {{suspend_time_s: 0}}\n",
        "power_saving.suspend_time_s",
    ),
    "suspend-negative": (
        f"nodes:\n{NODE}}}\npower_saving: {{suspend_time_s: -60}}\n",
        "power_saving.suspend_time_s",
    ),
    "suspend-inf": (
        f"nodes:\n{NODE}}}\npower_saving: {{suspend_time_s: .inf}}\n",
        "power_saving.suspend_time_s",
    ),
    "resume-shorter-than-boot": (
        f"nodes:\n{NODE}}}\npower_saving: {{resume_timeout_s: 60, boot_s: 3min}}\n",
        "power_saving.resume_timeout_s",
    ),
    "saving-off-above-idle": (
        f"nodes:\n{NODE}, idle_w: 100}}\npower_saving: {{off_w: 150}}\n",
        "power_saving.off_w",
    ),
    "unknown-power-saving-key": (f"nodes:\n{NODE}}}\npower_saving: {{suspend_tme: 600}}\n", "suspend_tme"),
    "unknown-node-key": (f"nodes:\n{NODE}, idle_watts: 100}}\n", "idle_watts"),
    "unknown-top-key": (f"nodes:\n{NODE}}}\npowersaving: {{suspend_time_s: 600}}\n", "powersaving"),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    return rc, err


@pytest.mark.parametrize("case", sorted(BAD_CLUSTERS))
def test_a_bad_cluster_value_is_one_line_naming_file_and_field(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad idle/off power or power-saving value fails before simulating, with the file and the field."""
    text, field = BAD_CLUSTERS[case]
    f = tmp_path / "cluster.yaml"
    f.write_text(text)
    rc, err = _run(["sim", "run", "--policy", "zeus", "--hours", "0.1", "--cluster", str(f)], capsys)
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("easlurm: error: ")
    assert str(f) in err and field in err


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--suspend-time", "0"], "--suspend-time"),
        (["--suspend-time", "-5min"], "--suspend-time"),
        (["--boot-time", "soon"], "--boot-time"),
        (["--resume-timeout", "1min", "--boot-time", "5min"], "resume_timeout_s"),
    ],
)
def test_a_bad_power_saving_flag_is_one_line(
    flags: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flag that gives no SuspendTime or a resume shorter than the boot is refused."""
    rc, err = _run(["sim", "run", "--policy", "zeus", "--hours", "0.1", *flags], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and names in err


def test_a_bad_power_saving_in_a_plan_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan's power_saving is checked when the plan is read."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("scenarios: [B]\npolicies: [zeus]\nseeds: 1\npower_saving: {suspend_time_s: 0}\n")
    rc, err = _run(["sim", "campaign", str(plan), "--out", str(tmp_path / "out"), "--dry-run"], capsys)
    assert rc == 2 and len(err.splitlines()) == 1
    assert str(plan) in err and "power_saving.suspend_time_s" in err


def test_power_saving_flags_show_the_energy_split(capsys: pytest.CaptureFixture[str]) -> None:
    """`sim run --suspend-time` prints the off and power-cycle energy and the cycle count."""
    rc = main(["sim", "run", "--policy", "zeus", "--hours", "1", "--load", "2", "--suspend-time", "2min"])
    out = capsys.readouterr().out
    assert rc == 0
    for label in ("  off", "  power cycles", "Power cycles", "Node-h powered down"):
        assert label in out


def test_a_plan_sets_power_saving_for_its_runs() -> None:
    """A plan's power_saving (top level or per experiment) reaches every run's spec; `none` turns off the
    cluster's own."""
    from easlurm.sim.campaign import parse_plan

    plan = parse_plan(
        {
            "scenarios": ["B"],
            "policies": ["zeus"],
            "power_saving": {"suspend_time_s": "10min"},
            "experiments": [{"name": "on"}, {"name": "off", "power_saving": "none"}],
        }
    )
    on, off = (r.spec.power_saving for r in plan.runs())
    assert on == (("suspend_time_s", "10min"),) and off == (("suspend_time_s", "none"),)
