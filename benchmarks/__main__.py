"""Run every benchmark module (or those named on the command line) and print the table."""
from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path

import benchmarks
from benchmarks.common import Row


def main(argv: list[str]) -> int:
    names = argv or sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    rows: list[Row] = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        start = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows += module.run()
        print(f"  {name} took {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return report(rows)


def report(rows: list[Row]) -> int:
    """Print the table, write .bench/results.json; 1 when a row missed its target (a module alone uses it too,
    e.g. ``python -m benchmarks.bench_slurm --quick``)."""
    width = max(len(r.name) for r in rows)
    print(f"\n{'measure':<{width}}  {'value':>12}  {'unit':<10}  {'target':<14}  ok")
    for r in rows:
        ok = "" if r.ok is None else ("yes" if r.ok else "NO")
        print(f"{r.name:<{width}}  {r.value:>12.4g}  {r.unit:<10}  {r.target:<14}  {ok}  {r.note}")
    out = Path(".bench")
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
