"""The layer rule of docs/architecture.md, checked on the code's own imports.

Every module of ``state_reader`` belongs to one layer; a module imports only from its
own layer and the layers below (every import counts: those inside functions and
those made for type checking only), and no modules import each other in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import PACKAGE

# bottom to top; a module's layer is its sub-package, or the entry for a top-level module
LAYERS: list[tuple[str, ...]] = [
    ("errors", "deprecation", "grouping", "progress", "units", "_version"),  # leaves every layer uses
    ("io",),
    ("formats",),
    ("model",),
    ("providers",),
    ("core",),
    ("inspect",),
    ("fronts",),
    ("__init__", "__main__", "spark"),  # the package's face
]


def _rank(module: str) -> int:
    """The layer of ``state_reader.<module...>``."""
    head = module.split(".")[1] if "." in module else "__init__"
    for rank, names in enumerate(LAYERS):
        if head in names:
            return rank
    raise AssertionError(f"state_reader.{head} belongs to no layer: add it to LAYERS (and docs/architecture.md)")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The state_reader modules ``name`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            # the longest known module the name starts with (``from pkg import module`` or ``import pkg.module``)
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("state_reader"):
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_layer():
    for name in _modules():
        _rank(name)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [
        f"{source} -> {target}"
        for source, targets in _graph().items()
        for target in sorted(targets)
        if target != "state_reader" and _rank(target) > _rank(source)
    ]
    assert not upward, "imports that reach up a layer:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = _graph()
    # a package's __init__ re-exporting its modules is not a cycle with them
    graph = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_rule_sees_an_upward_import(tmp_path):
    """The checker itself: a module of a lower layer naming a higher one is found."""
    path = tmp_path / "probe.py"
    path.write_text("from state_reader.fronts import cli\n")
    found = _imports("state_reader.formats.probe", path, set(_modules()))
    assert "state_reader.fronts.cli" in found
    assert _rank("state_reader.fronts.cli") > _rank("state_reader.formats.probe")
