"""Writes tests/file_costs.json (seconds per test file) from the JUnit XML report of a whole-suite run.

    python -m pytest ... --junitxml=report.xml && python tests/helpers/file_costs.py report.xml

tests/conftest.py orders the files by it, longest first, so that ``make test``'s two workers end together.
"""
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def file_costs(report: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests), from pytest's JUnit XML."""
    costs: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):
        module = case.get("classname", "")
        # pytest writes "tests.cli.test_x" (or "tests.cli.test_x.TestClass"): the file is the longest prefix
        # that exists as a .py file.
        parts = [part for part in module.split(".") if part]
        for end in range(len(parts), 0, -1):
            candidate = Path(*parts[:end]).with_suffix(".py")
            if (TESTS.parent / candidate).is_file():
                costs[candidate.as_posix()] += float(case.get("time") or 0.0)
                break
    return dict(sorted(((name, round(value, 1)) for name, value in costs.items()), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    measured = file_costs(Path(sys.argv[1]))
    (TESTS / "file_costs.json").write_text(json.dumps(measured, indent=0) + "\n")
    print(f"{len(measured)} files, {sum(measured.values()):.0f} s in all; the longest: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in list(measured.items())[:5]))
