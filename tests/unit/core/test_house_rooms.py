"""The house's layering rule (scripts/house-figures names the rooms and their order): no room imports a later
room, no non-command module imports a command module, no package or module imports itself back through a
circle, and each easlurm import left inside a function says why. Every import counts, also those inside
functions, where the old circles hid."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def house(monkeypatch_module: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch_module.chdir(ROOT)
    loader = importlib.machinery.SourceFileLoader("house_figures", str(ROOT / "scripts" / "house-figures"))
    spec = importlib.util.spec_from_loader("house_figures", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch_module.setitem(sys.modules, "house_figures", module)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_no_room_imports_a_later_room_or_a_command(house: ModuleType) -> None:
    assert house.climbing(house.all_imports()) == []


def test_no_package_loop(house: ModuleType) -> None:
    assert house.package_loops(house.all_imports()) == []


def test_no_module_loop(house: ModuleType) -> None:
    assert house.module_loops(house.all_imports()) == []


def test_every_import_inside_a_function_says_why(house: ModuleType) -> None:
    silent = [
        f"{i.module}:{i.line} -> {i.target}"
        for i in house.all_imports()
        if i.inside_function and not i.reason
    ]
    assert silent == []


def test_the_check_sees_function_level_imports_and_their_reasons(house: ModuleType, tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import easlurm.units\n"
        "def f():\n"
        "    from easlurm.measure.steps import prepare  # here: torch loads only when measuring\n"
        "    from easlurm.sim import runner\n"
    )
    known = {"easlurm.units", "easlurm.measure.steps", "easlurm.sim", "easlurm.sim.runner"}
    found = {(i.target, i.inside_function, i.reason) for i in house.imports_in(src, "easlurm.x", known)}
    assert found == {
        ("easlurm.units", False, ""),
        ("easlurm.measure.steps", True, "torch loads only when measuring"),
        ("easlurm.sim.runner", True, ""),
    }
    assert house.room_of("easlurm.model.oracle") == "oracle"
    assert house.room_of("easlurm.model.fit.calibrate") == "fit"
    assert house.room_of("easlurm.errors") == "base"
    assert house.is_command("easlurm.measure.cli") and house.is_command("easlurm.sim.run_cli")
    climbs = house.climbing([house.Import("easlurm.model.oracle", "easlurm.sim.runner", 3, True, "")])
    assert climbs and "oracle imports sim" in climbs[0]
    assert house.cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
