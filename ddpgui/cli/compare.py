"""``ddpgui compare RUN...|--sweep ID`` (statistics, figures, tables, bundle) and ``ddpgui import BUNDLE.json``."""
from __future__ import annotations

import argparse
import sys

from ..core import analysis
from ..core.hosts import HostStore
from ..core.outputs import export, figures
from ..core.store import RunRecord, RunStore
from .common import EXIT_OK, CLIError, find_run, find_sweep, terminal_text
from .options import out_folder

ALL_FORMATS = export.FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``compare`` and ``import`` on the CLI's subparsers."""
    p = sub.add_parser("compare", help="compare runs: statistics, figures (PDF/SVG/PNG), CSV, LaTeX, JSON bundle",
                       description="Group runs with the same settings as repeats, compare them with a baseline "
                                   "(speedup, memory, scaling, each with a 95%% CI and its n) and write figures "
                                   "and tables for a paper. Rules: docs/ANALYSIS.md.")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run id, id prefix or name")
    p.add_argument("--sweep", metavar="ID", help="compare the finished runs of this sweep (with or instead of RUNs)")
    p.add_argument("--baseline", metavar="RUN", help="the run whose setting is the baseline (default: the first)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--format", default=",".join(ALL_FORMATS), help=f"comma list of {','.join(ALL_FORMATS)}")
    p.add_argument("--width", choices=("single", "double"), default="single",
                   help="figure width: a single (3.5 in) or double (7 in) column")
    p.add_argument("--x", choices=("step", "time"), default="step", help="x axis of the loss curves")
    p.add_argument("--dpi", type=int, default=300,
                   help=f"PNG resolution (and the decimation grid), at least {figures.MIN_DPI}")
    p.add_argument("--caption", action=argparse.BooleanOptionalAction, default=True,
                   help="a caption line with GPU, driver, CUDA and torch under each figure")
    p.add_argument("--individual-runs", action=argparse.BooleanOptionalAction, default=True,
                   help="draw each repeat faintly under its setting's mean loss curve")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="N of 'time to N steps' (default: the fewest steps any compared run reached)")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("import", help="import runs from a JSON bundle written by ddpgui compare --format json")
    p.add_argument("bundle", metavar="BUNDLE.json")
    p.set_defaults(func=cmd_import)


def _formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in ALL_FORMATS]
    if unknown or not formats:
        raise CLIError(f"unknown format {', '.join(unknown) or repr(text)}",
                       f"give a comma list of {','.join(ALL_FORMATS)}")
    return formats


def _sweep_runs(store: RunStore, text: str) -> list[RunRecord]:
    """The finished runs of the sweep whose id starts with ``text``, or else whose name is ``text``."""
    sweep = find_sweep(store, text)
    runs = store.sweep_runs(sweep.id)
    done = [r for r in runs if r.state == "finished"]
    if len(done) < len(runs):
        print(f"sweep {sweep.id}: comparing {len(done)} finished of its {len(runs)} runs", file=sys.stderr)
    return done


def _runs(store: RunStore, args: argparse.Namespace) -> list[RunRecord]:
    runs = [find_run(store, text) for text in args.runs]
    if args.sweep:
        runs += _sweep_runs(store, args.sweep)
    unique = list({r.id: r for r in runs}.values())
    if not unique:
        raise CLIError("no runs to compare", "name runs (ddpgui runs lists them) or a sweep with --sweep ID")
    return unique


def cmd_compare(args: argparse.Namespace) -> int:
    formats = _formats(args.format)
    out = out_folder(args.out)
    if args.dpi < figures.MIN_DPI:
        raise CLIError(f"--dpi {args.dpi} is too low", f"give at least {figures.MIN_DPI} (300 is print quality)")
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps {args.steps} must be at least 1")
    hosts = HostStore()
    with RunStore() as store:
        runs = _runs(store, args)
        baseline = find_run(store, args.baseline).id if args.baseline else runs[0].id
        if baseline not in {r.id for r in runs}:
            runs.insert(0, store.get_run(baseline))
        comparison = analysis.compute_comparison(store, hosts, [r.id for r in runs], baseline, n_steps=args.steps,
                                                 with_curves=False).comparison
        written = export.export_comparison(comparison, store, out, formats, args.width, args.x, args.dpi,
                                           args.caption, args.individual_runs)
    _print_table(comparison)
    for name, why in written.skipped.items():
        print(f"no {name} figure: {why}", file=sys.stderr)
    for path in written.paths:
        print(path)
    return EXIT_OK


def _print_table(comparison: analysis.Comparison) -> None:
    unit = comparison.runs[0].throughput_unit
    print(f"{'setting':<36} {'n':>3} {'throughput (' + unit + ')':>26} {'speedup':>18} {'peak mem GiB':>13}",
          file=sys.stderr)
    for g in comparison.groups:
        est, speed, mem = g.metrics["throughput"], comparison.speedup[g.key], g.metrics["mem_peak_gib"]
        # a 95% interval as [low, high] (asymmetric for positive quantities), or (min–max) of fewer than 3 repeats
        rate = "-" if est.mean is None else f"{est.mean:.4g}" + (
            f" [{est.low:.3g}, {est.high:.3g}]" if est.has_interval else
            f" ({est.range[0]:.3g}–{est.range[1]:.3g})" if est.range else "")
        ratio = "-" if speed.value is None else f"{speed.value:.3f}" + (
            f" [{speed.low:.3f}, {speed.high:.3f}]" if speed.has_interval and speed.low != speed.high else
            f" ({speed.range[0]:.2f}–{speed.range[1]:.2f})" if speed.range else "")
        memory = "-" if mem.mean is None else f"{mem.mean:.3g}"
        base = " (baseline)" if g.key == comparison.baseline else ""
        print(f"{terminal_text(g.label + base)[:36]:<36} {g.n:>3} {rate:>26} {ratio:>18} {memory:>13}",
              file=sys.stderr)
        if est.mean is None:
            print(f"    throughput: {terminal_text(est.reason)}", file=sys.stderr)


def cmd_import(args: argparse.Namespace) -> int:
    from ..core.outputs.bundle import BundleError, import_bundle

    with RunStore() as store:
        try:
            records = import_bundle(store, args.bundle)
        except BundleError as exc:
            raise CLIError(str(exc), exc.hint) from exc
    for r in records:
        print(f"imported {r.id} {r.name!r} ({r.state}, {r.last_step or 0} steps)")
    return EXIT_OK
