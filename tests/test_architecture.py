"""The layout keeps its architecture (GUIDE §2): the direction of dependency, no import cycles, small modules.

Every import counts: absolute and relative, at module level and inside functions (an import inside a function
is how a cycle hides). The walk resolves each one to a project module, so ``from ..ui import x`` in the core
is seen as ``ddpgui.ui.x``. ``test_the_checks_catch_*`` plant violations in a copy of a tree and prove the
checks see them, so the checks above them can fail.
"""
from __future__ import annotations

import ast
import functools
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ddpgui", "remote_runner")
QT = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6")
MAX_LINES = 500
# The command modules of the CLI: each registers its own commands and imports only the shared cli modules
# (ddpgui.cli.release: the ``hosts`` command's release options and subcommands, registered by hosts.py).
CLI_SHARED = {"ddpgui.cli", "ddpgui.cli.common", "ddpgui.cli.options", "ddpgui.cli.process", "ddpgui.cli.prompts",
              "ddpgui.cli.render", "ddpgui.cli.release"}


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages under *root*, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[_module_name(root, path)] = path
    assert found, f"no Python files under {root}"
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """What module *name* (at *path*) imports, resolved: project modules by dotted name, others by their top."""
    is_package = path.name == "__init__.py"
    tree = _parsed(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(_deepest(alias.name, known))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from pkg import sub` imports the module pkg.sub
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else _deepest(module, known))
    found.discard(name)
    return found


def _parsed(text: str, filename: str) -> ast.Module:
    """The module's tree, parsed once per text for the whole file (each check walks the whole tree of ~400 modules,
    and a planted copy changes one): ~20 s of a worker's CPU in a loaded suite run."""
    try:
        return _parse(text)
    except SyntaxError:
        return ast.parse(text, filename=filename)  # raised again, naming the file


@functools.cache
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


def _deepest(dotted: str, known: dict[str, Path]) -> str:
    parts = dotted.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) if parts else dotted.split(".")[0]


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Imports against the direction of dependency, as 'importer -> imported'."""
    bad = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            top = target.split(".")[0]
            rule = None
            if name.startswith("remote_runner") and top == "ddpgui":
                rule = "the runner never imports ddpgui"
            elif (name.startswith(("ddpgui.core", "remote_runner")) or name.startswith("ddpgui.cli")) and top in QT:
                rule = "Qt only in ddpgui.ui"
            elif name.startswith("ddpgui.core") and target.startswith(("ddpgui.ui", "ddpgui.cli")):
                rule = "the core never imports the app or the CLI"
            elif name.startswith("ddpgui.cli") and target.startswith("ddpgui.ui"):
                rule = "the CLI never imports the app"
            elif (name.startswith("ddpgui.cli.") and name not in CLI_SHARED and target.startswith("ddpgui.cli")
                  and target not in CLI_SHARED):
                rule = "CLI command modules never import each other"
            if rule:
                bad.append(f"{name} -> {target} ({rule})")
    return bad


def too_long(root: Path = ROOT) -> list[str]:
    out = []
    for name, path in modules(root).items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            out.append(f"{name}: {lines} lines")
    return out


def test_the_direction_of_dependency():
    assert violations(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_module_over_500_lines():
    assert too_long() == []


@pytest.mark.parametrize("path", sorted((ROOT / "remote_runner").rglob("*.py")), ids=lambda p: p.name)
def test_runner_parses_with_python39_grammar(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of the project's packages to plant violations in."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _plant(tree: Path, module: str, line: str, *, in_function: bool = False) -> None:
    path = modules(tree)[module]
    text = f"\n\ndef _planted():\n    {line}\n" if in_function else f"\n{line}\n"
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_checks_pass_on_an_untouched_copy(tree):
    assert violations(graph(tree)) == [] and cycles(graph(tree)) == []


def test_the_checks_catch_a_relative_ui_import_in_the_core(tree):
    _plant(tree, "ddpgui.core.errors", "from ..ui import app")
    assert violations(graph(tree)) == ["ddpgui.core.errors -> ddpgui.ui.app (the core never imports the app or the CLI)"]


def test_the_checks_catch_qt_and_ddpgui_in_the_runner(tree):
    _plant(tree, "remote_runner.follow", "import PySide6.QtCore", in_function=True)
    _plant(tree, "remote_runner.probe", "from ddpgui.core import errors")
    assert violations(graph(tree)) == [
        "remote_runner.follow -> PySide6 (Qt only in ddpgui.ui)",
        "remote_runner.probe -> ddpgui.core.errors (the runner never imports ddpgui)",
    ]


def test_the_checks_catch_a_cycle_made_by_an_import_inside_a_function(tree):
    edges = graph(tree)
    importer = next(name for name, targets in sorted(edges.items())
                    if name.startswith("ddpgui.core") and "ddpgui.core.errors" in targets)
    _plant(tree, "ddpgui.core.errors", f"import {importer}", in_function=True)
    assert [c for c in cycles(graph(tree)) if {"ddpgui.core.errors", importer} <= set(c)]


def test_the_checks_catch_one_cli_command_module_importing_another(tree):
    _plant(tree, "ddpgui.cli.compare", "from . import sweeps", in_function=True)
    assert "ddpgui.cli.compare -> ddpgui.cli.sweeps (CLI command modules never import each other)" in \
        violations(graph(tree))


def test_the_checks_catch_a_long_module(tree):
    _plant(tree, "ddpgui.core.errors", "\n" * MAX_LINES)
    assert [line.split(":")[0] for line in too_long(tree)] == ["ddpgui.core.errors"]


def test_the_checks_catch_3_10_syntax():
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 9))
