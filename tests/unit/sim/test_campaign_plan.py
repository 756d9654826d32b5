"""Campaign plans: expansion into runs, stable run ids, and errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.errors import ConfigError
from easlurm.sim.campaign import load_plan, make_run_id, parse_index_list, parse_plan, select_runs

PLAN = {
    "name": "t",
    "hours": 2,
    "seeds": 3,
    "experiments": [
        {"name": "B", "scenarios": ["B"], "policies": ["pollux", "zeus"]},
        {
            "name": "D",
            "scenarios": ["D"],
            "policies": ["zeus"],
            "loads_jobs_per_h": [9, 18],
            "seeds": [7, 8],
        },
        {
            "name": "budget",
            "scenarios": ["charon-budget"],
            "policies": ["charon", {"policy": "charon", "label": "charon-tight", "params": {"margin": 0.9}}],
            "power_budget_w": "4.5kW",
            "seeds": {"start": 100, "count": 2},
        },
    ],
}


def test_expansion_is_the_product_of_each_experiment() -> None:
    runs = parse_plan(PLAN).runs()
    assert len(runs) == 2 * 3 + 2 * 2 + 2 * 2
    assert [r.index for r in runs] == list(range(len(runs)))
    assert len({r.run_id for r in runs}) == len(runs)
    budget = [r for r in runs if r.experiment == "budget"]
    assert {r.spec.power_budget_w for r in budget} == {4500.0}
    assert {r.spec.seed for r in budget} == {100, 101}
    tight = [r for r in budget if r.label == "charon-tight"]
    assert tight and all(
        r.spec.policy == "charon" and r.spec.policy_params == (("margin", 0.9),) for r in tight
    )
    d_loads = sorted({r.spec.load_jobs_per_h for r in runs if r.experiment == "D"})
    assert d_loads == [9.0, 18.0]
    assert all(r.spec.hours == 2.0 for r in runs)


def test_run_ids_survive_growing_the_plan() -> None:
    """Adding a policy must not rename finished runs, or resuming would redo them."""
    before = {r.run_id: r.spec for r in parse_plan(PLAN).runs()}
    grown = dict(PLAN, experiments=[dict(PLAN["experiments"][0], policies=["pollux", "hades", "zeus"])])
    after = {r.run_id: r.spec for r in parse_plan(grown).runs()}
    common = set(before) & set(after)
    assert len(common) == 6 and all(before[k] == after[k] for k in common)


def test_defaults_fill_what_the_plan_leaves_out() -> None:
    plan = parse_plan(
        {"scenarios": ["B"], "policies": ["zeus"]},
        defaults={"hours": 3.0, "noise_sigma": 0.0, "checkpoint_interval_s": 600.0},
    )
    (run,) = plan.runs()
    assert (run.spec.hours, run.spec.noise_sigma, run.spec.checkpoint_interval_s) == (3.0, 0.0, 600.0)
    assert run.spec.seed == 0


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"scenarios": ["B"], "policies": ["zeus"], "sedes": 3}, "sedes"),
        ({"scenarios": ["B"], "policies": ["zeus"], "seeds": 0}, "seeds"),
        ({"scenarios": ["B"], "policies": ["zeus"], "seeds": [1, 1]}, "seeds"),
        ({"scenarios": ["B"], "policies": []}, "policies"),
        ({"scenarios": [], "policies": ["zeus"]}, "scenarios"),
        ({"scenarios": ["B"], "policies": ["zeus"], "power_budget_w": "lots"}, "power_budget_w"),
        ({"scenarios": ["B"], "policies": ["zeus"], "hours": -1}, "hours"),
        ({"scenarios": ["B"], "policies": [{"label": "x"}]}, "policies[0].policy"),
        ({"scenarios": ["B"], "policies": ["zeus", "zeus"]}, "policies"),
        ({"experiments": [{"name": "a", "scenarios": ["B"], "policies": ["zeus"], "colour": 1}]}, "colour"),
    ],
)
def test_bad_plan_names_file_and_field(tmp_path: Path, doc: dict, field: str) -> None:
    import yaml

    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as exc:
        load_plan(path)
    assert str(path) in str(exc.value) and field in str(exc.value)


def test_duplicate_experiment_names_are_refused() -> None:
    exp = {"name": "x", "scenarios": ["B"], "policies": ["zeus"]}
    with pytest.raises(ConfigError, match="defined twice"):
        parse_plan({"experiments": [exp, exp]})


def test_index_selection() -> None:
    runs = parse_plan(PLAN).runs()
    assert parse_index_list("0,3,5-7") == [0, 3, 5, 6, 7]
    assert [r.index for r in select_runs(runs, [5, 1, 5])] == [1, 5]
    with pytest.raises(ConfigError):
        select_runs(runs, [len(runs)])
    with pytest.raises(ConfigError):
        parse_index_list("3-1")


def test_run_id_is_file_name_safe() -> None:
    rid = make_run_id("exp/1", "charon budget", "a:b", 4.5, 3)
    assert "/" not in rid and " " not in rid and ":" not in rid
    assert rid != make_run_id("exp/1", "charon budget", "a:b", None, 3)


def test_unknown_policy_or_scenario_is_refused_before_running() -> None:
    pytest.importorskip("easlurm.sim.scenarios")
    from easlurm.sim.campaign import check_names

    check_names(parse_plan({"scenarios": ["B", "charon-budget"], "policies": ["zeus", "charon-pl"]}))
    with pytest.raises(ConfigError, match=r"policies\[1\].*'zeuss'"):
        check_names(parse_plan({"scenarios": ["B"], "policies": ["zeus", "zeuss"]}, source="p.yaml"))
    with pytest.raises(ConfigError, match=r"scenarios.*'Q'"):
        check_names(parse_plan({"scenarios": ["Q"], "policies": ["zeus"]}))
