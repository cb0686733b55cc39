"""The direction of dependency (GUIDE §2) and the runner's Python 3.9 grammar."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QT = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _py_files(*parts: str) -> list[Path]:
    files = sorted((ROOT.joinpath(*parts)).rglob("*.py"))
    assert files, f"no Python files under {'/'.join(parts)}"
    return files


@pytest.mark.parametrize("package", [("ddpgui", "core"), ("remote_runner",)], ids=["ddpgui.core", "remote_runner"])
def test_no_qt_below_the_ui(package):
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _py_files(*package) for name in _imports(path)
                 if name.split(".")[0] in QT]
    assert offenders == []


def test_runner_never_imports_ddpgui():
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _py_files("remote_runner") for name in _imports(path)
                 if name.split(".")[0] == "ddpgui"]
    assert offenders == []


def test_core_never_imports_ui():
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _py_files("ddpgui", "core")
                 for name in _imports(path) if name.startswith("ddpgui.ui")]
    assert offenders == []


@pytest.mark.parametrize("path", _py_files("remote_runner"), ids=lambda p: p.name)
def test_runner_parses_with_python39_grammar(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))


def test_the_checks_catch_a_violation(tmp_path):
    """The AST walk does see a Qt import and 3.10-only syntax (so the tests above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from PySide6 import QtCore\nmatch x:\n    case 1:\n        pass\n")
    assert "PySide6" in _imports(bad)
    with pytest.raises(SyntaxError):
        ast.parse(bad.read_text(), feature_version=(3, 9))
