"""`easlurm.model` has three rooms with imports one way: the pure oracle, fitting (imports the oracle) and
measuring (imports the oracle and the measurement format of fitting). Command modules (`cli.py`,
`*_cli.py`) may import any room; nothing imports a command module's room upwards, and no module imports
itself back through a circle. Every import counts, also the ones inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import easlurm.model

MODEL_DIR = Path(easlurm.model.__file__).parent
ROOMS = ("oracle", "fit", "measure")
#: room -> rooms it may import
ALLOWED = {"oracle": {"oracle"}, "fit": {"oracle", "fit"}, "measure": {"oracle", "fit", "measure"}}


def module_name(path: Path) -> str:
    rel = path.relative_to(MODEL_DIR.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_command(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cli")


def room_of(module: str) -> str | None:
    """The room of an `easlurm.model` module; None for command modules and for modules outside."""
    if not module.startswith("easlurm.model") or is_command(module):
        return None
    rest = module.removeprefix("easlurm.model").lstrip(".").split(".")
    return rest[0] if rest[0] in ("fit", "measure") else "oracle"


def imports_of(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("easlurm.")}


def modules() -> dict[str, set[str]]:
    known = {module_name(p) for p in MODEL_DIR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for p in MODEL_DIR.rglob("*.py"):
        # "from easlurm.model.measure import steps" names the module easlurm.model.measure.steps
        graph[module_name(p)] = {m for m in imports_of(p) if m in known or m.rsplit(".", 1)[0] in known}
        graph[module_name(p)] = {m if m in known else m.rsplit(".", 1)[0] for m in graph[module_name(p)]}
    return graph


def test_every_room_imports_only_the_rooms_below_it() -> None:
    wrong = []
    for module, targets in modules().items():
        room = room_of(module)
        for target in targets:
            if is_command(target) and room is not None:
                wrong.append(f"{module} -> {target} (a command module)")
            elif room is not None and room_of(target) is not None and room_of(target) not in ALLOWED[room]:
                wrong.append(f"{module} ({room}) -> {target} ({room_of(target)})")
    assert not wrong, wrong


def test_no_import_circle_in_model() -> None:
    graph = {
        m: {t for t in ts if t != m and not t.endswith(("model.fit", "model.measure"))}
        for m, ts in modules().items()
    }
    state: dict[str, int] = {}
    circles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]) if nxt in path else nxt)
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, circles


def test_the_check_sees_a_function_level_import(tmp_path: Path) -> None:
    """The walker must see imports inside functions, where the old circle hid."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from easlurm.model.measure.steps import prepare\n")
    assert "easlurm.model.measure.steps" in imports_of(src)
    assert room_of("easlurm.model.oracle") == "oracle"
    assert room_of("easlurm.model.fit.calibrate") == "fit"
    assert room_of("easlurm.model.measure.cli") is None
