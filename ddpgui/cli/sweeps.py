"""Sweeps from the command line: ``sweep``, ``sweeps``, ``sweep-show``, ``sweep-resume``, ``sweep-stop``.

``ddpgui sweep HOST --compile off,default --precision fp32,bf16 --nproc 1,2 --repeats 3`` takes
every setting of ``launch``, each as a comma list: a setting with several values is an axis of
the matrix, one with a single value is shared by every run.

``--gpus`` gives every cell the same GPUs, unless the sweep is ``--parallel``: its cells then run side by
side, each on GPUs of its own chosen when it starts (ddpgui.core.gpus.placement), and ``--gpus 0,1,2,3``
names the GPUs they are placed on, ``--gpus free:N`` gives each cell N of the host's free GPUs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import threading
import time

from ..core.gpus.picker import GpuChoiceError
from ..core.runs.live import format_duration, format_rate, progress_bar
from ..core.store import RunNotFound, RunStore, SweepCell, SweepRecord
from ..core.sweeps import SweepProgress, SweepRunner, SweepSpec, summary_line, sweep_progress
from ..core.sweeps.gpus import sweep_gpus
from ..core.sweeps.hostqueue import on_host
from ..core.sweeps.plan import put_named_axes
from .common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STOPPED,
    CLIError,
    find_sweep,
    open_manager,
    terminal_text,
)
from .options import SCALAR_SETTINGS, add_launch_settings, comma_list, launch_settings, run_tag

#: Off a terminal (a log file), the progress line is repeated at most this often between cells.
LOG_EVERY_S = 30.0
_SWEEP_EXIT = {"done": EXIT_OK, "failed": EXIT_FAILED, "stopped": EXIT_STOPPED, "cancelled": EXIT_STOPPED}


def _spec(args: argparse.Namespace) -> SweepSpec:
    hosts = list(dict.fromkeys(([args.host] if args.host else []) + (args.hosts or [])))
    if not hosts:
        raise CLIError("a sweep needs a host", "e.g. ddpgui sweep local --precision fp32,bf16 --repeats 2")
    shared = argparse.Namespace(**{**vars(args), **dict.fromkeys(SCALAR_SETTINGS), "name": None})
    base = launch_settings(shared)
    matrix = {}
    for dest, key in SCALAR_SETTINGS.items():
        values = getattr(args, dest)
        if values is not None and len(values) == 1:
            base[key] = values[0]
        elif values is not None:
            matrix[key] = values
    put_named_axes(base, matrix, args.arg or [], args.env or [])
    return SweepSpec(hosts=hosts, base=base, matrix=matrix, repeats=args.repeats, parallel=args.parallel,
                     name=args.name or "")


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.resume:
        return _resume(args, args.resume)
    spec = _spec(args)
    with open_manager(args) as manager, SweepRunner(manager) as runner:
        if args.gpus is not None:
            try:
                spec.base, warnings = sweep_gpus(spec, manager, args.gpus)
            except GpuChoiceError as exc:
                raise CLIError(str(exc), exc.hint) from None
            for warning in warnings:
                print(f"warning: {terminal_text(warning)}; running on it anyway", file=sys.stderr)
        sweep = runner.create(spec)
        cells = manager.store.sweep_cells(sweep.id)
        among = f" among GPUs {args.gpus}" if args.gpus is not None and args.gpus.free_count is None else ""
        how = f"side by side (on a host with GPUs each on free GPUs of its own{among})" if sweep.parallel else \
            "one at a time per host"
        queued = [h for h in sweep.hosts if on_host(manager, sweep, h)]
        if queued:
            how += (f"; queued on {terminal_text(', '.join(queued))} itself: it goes on there without this "
                    f"computer (ddpgui sweep-stop {sweep.id} stops it)")
        intro = (f"sweep {terminal_text(repr(sweep.name))} ({sweep.id}): {len(cells)} runs on "
                 f"{terminal_text(', '.join(sweep.hosts))}, {how}\n"
                 f"  seeds: {sweep.seeds}")
        return _watch(runner, sweep.id, intro=intro)


def cmd_sweep_resume(args: argparse.Namespace) -> int:
    return _resume(args, args.sweep)


def _resume(args: argparse.Namespace, text: str) -> int:
    with open_manager(args) as manager, SweepRunner(manager) as runner:
        sweep = find_sweep(manager.store, text)
        if sweep.state in ("done", "failed"):
            print(f"sweep {sweep.id} has ended ({sweep.state}): nothing to resume", file=sys.stderr)
            return _report(manager.store, sweep)
        return _watch(runner, sweep.id, intro=f"resuming sweep {terminal_text(repr(sweep.name))} ({sweep.id})")


def cmd_sweep_stop(args: argparse.Namespace) -> int:
    with open_manager(args) as manager, SweepRunner(manager) as runner:
        sweep = find_sweep(manager.store, args.sweep)
        if not sweep.active:
            print(f"sweep {sweep.id} is already {sweep.state}")
            return EXIT_OK
        sweep = runner.stop(sweep.id)
        print(f"sweep {sweep.id} {sweep.state}: {sweep.message}")
        return EXIT_OK


def cmd_sweeps(args: argparse.Namespace) -> int:
    with RunStore() as store:
        rows = [(s, sweep_progress(store, s.id)) for s in store.list_sweeps()]
    if args.json:
        print(json.dumps([{**dataclasses.asdict(s), "total": p.total, "counts": p.counts} for s, p in rows], indent=1))
        return EXIT_OK
    if not rows:
        print("no sweeps yet: ddpgui sweep local --workload linear --steps 50 --precision fp32,bf16 --repeats 2")
        return EXIT_OK
    print(f"{'id':<22} {'name':<36} {'hosts':<14} {'state':<9} {'cells':>7} {'failed':>6}")
    for s, p in rows:
        print(f"{s.id:<22} {terminal_text(s.name)[:36]:<36} {terminal_text(','.join(s.hosts))[:14]:<14} {s.state:<9} "
              f"{f'{p.done}/{p.total}':>7} {p.failed:>6}")
    return EXIT_OK


def cmd_sweep_show(args: argparse.Namespace) -> int:
    with RunStore() as store:
        sweep = find_sweep(store, args.sweep)
        if args.json:
            cells = [dataclasses.asdict(c) for c in store.sweep_cells(sweep.id)]
            print(json.dumps({**dataclasses.asdict(sweep), "cells": cells}, indent=1))
            return EXIT_OK
        print(f"{terminal_text(sweep.name)}  ({sweep.id})  {sweep.state}" +
              (f": {terminal_text(sweep.message)}" if sweep.message else ""))
        print(f"  matrix  {json.dumps(sweep.matrix)} × {sweep.repeats} repeat(s) on "
              f"{terminal_text(', '.join(sweep.hosts))}")
        print(f"  seeds   {sweep.seeds}")
        _print_cells(store, sweep)
    return EXIT_OK


def _watch(runner: SweepRunner, sweep_id: str, intro: str = "", line_interval_s: float = 0.5) -> int:
    """Print ``intro``, run (or resume) the sweep, printing a bar for the whole sweep and a line per ended cell;
    returns the exit code.  Ctrl-C at any point leaves the running cells' runs going on their hosts and says
    how to resume; a launch in progress is finished first (so the resumed sweep follows its run), unless
    Ctrl-C comes again."""
    lock = threading.Lock()
    ended: list[tuple[SweepCell, int]] = []
    latest: list[SweepProgress] = []

    def on_progress(progress: SweepProgress) -> None:
        if progress.sweep_id != sweep_id:
            return
        with lock:
            latest[:] = [progress]
            cell = progress.changed
            if cell is not None and cell.state not in ("pending", "running"):
                ended.append((cell, progress.ended))

    unsubscribe = runner.subscribe(on_progress)
    tty = sys.stdout.isatty()
    shown: list = []
    shown_at = 0.0
    try:
        if intro:
            print(intro, file=sys.stderr)
        runner.resume(sweep_id)
        while True:
            try:
                sweep = runner.wait(sweep_id, timeout=line_interval_s)
                break
            except TimeoutError:
                pass
            with lock:
                cells, ended[:] = list(ended), []
                progress = latest[0] if latest else None
            for cell, count in cells:
                _print_ended(cell, count, progress.total if progress else 0, tty)
            if progress is None:
                continue
            cells_now = [(c.index, c.state, bool(c.reason)) for c in progress.cells]
            # Off a terminal (a log file): a line when a cell changes state, else every LOG_EVERY_S.
            if tty or cells_now != shown or time.monotonic() - shown_at >= LOG_EVERY_S:
                line = _progress_line(progress)
                if tty:  # one line, rewritten in place: cut to the terminal's width
                    line = "\r\033[K" + line[:shutil.get_terminal_size().columns - 1]
                print(line, end="" if tty else "\n", flush=True)
                shown, shown_at = cells_now, time.monotonic()
    except KeyboardInterrupt:
        unsubscribe()
        _detach(runner, sweep_id)
        return EXIT_INTERRUPTED
    finally:
        unsubscribe()
    with lock:
        total = len(runner.store.sweep_cells(sweep_id)) if ended else 0
        for cell, count in ended:
            _print_ended(cell, count, total, tty)
    if tty:
        print()
    return _report(runner.store, sweep)


def _detach(runner: SweepRunner, sweep_id: str) -> None:
    """After Ctrl-C: say how to resume, let a launch in progress finish (a second Ctrl-C leaves at once)."""
    try:
        print(f"\ninterrupted; the running cell's run goes on on its host (queued on its host: every cell goes on "
              f"there). Resume the sweep with: "
              f"ddpgui sweep-resume {sweep_id}", file=sys.stderr)
        if runner.launching(sweep_id):
            print("finishing the launch in progress, so that the resumed sweep follows its run "
                  "(Ctrl-C again to leave now)", file=sys.stderr)
        runner.close()
    except KeyboardInterrupt:
        pass


def _progress_line(progress: SweepProgress) -> str:
    """``[#####....] 25.0%  4/16 cells, 1 failed  now: compile=off nproc=2 step 2/3  ETA 01:23``, and why the next
    cell waits when it does (``waiting for 2 free GPUs on gpu1: ...``)."""
    parts = [f"{progress_bar(progress.fraction)}{progress.ended}/{progress.total} cells"]
    if progress.failed:
        parts[0] += f", {progress.failed} failed"
    for cell in progress.running:
        step, total = progress.steps.get(cell.index, (0, None))
        parts.append(f"now: {terminal_text(cell.label)} step {step}" + (f"/{total}" if total else ""))
    waiting = next((c for c in progress.cells if c.state == "pending" and c.reason), None)
    if waiting is not None:
        parts.append(f"next: {terminal_text(waiting.label)} {terminal_text(waiting.reason)}")
    parts.append(f"ETA {format_duration(progress.eta_s)}")
    return "  ".join(parts)


def _print_ended(cell: SweepCell, count: int, total: int, tty: bool) -> None:
    took = f" in {format_duration(cell.ended_at - cell.started_at)}" if cell.ended_at and cell.started_at else ""
    text = f"[{count}/{total}] {terminal_text(cell.label)}: {cell.state}{took}" + \
        (f" — {terminal_text(cell.reason)}" if cell.reason else "")
    print(("\r\033[K" if tty else "") + text, flush=True)


def _report(store: RunStore, sweep: SweepRecord) -> int:
    """The table of cells and the verdict; the exit code says whether every cell is done."""
    _print_cells(store, sweep)
    progress = sweep_progress(store, sweep.id)
    print(f"sweep {sweep.state}: {summary_line(progress.counts, progress.total)}")
    if progress.failed:
        print(f"{progress.failed} cell(s) failed: see the reasons above, or ddpgui sweep-show {sweep.id}")
    if sweep.active:
        print(f"the sweep is not finished: ddpgui sweep-resume {sweep.id}")
        return EXIT_FAILED
    return _SWEEP_EXIT.get(sweep.state, EXIT_FAILED)


def _print_cells(store: RunStore, sweep: SweepRecord) -> None:
    cells = store.sweep_cells(sweep.id)
    width = max([len(terminal_text(c.label)) for c in cells] + [4])
    print(f"{'#':>3}  {'cell':<{width}}  {'state':<9} {'run':<22} {'samples/s':>10}  reason")
    for cell in cells:
        rate = None
        if cell.run_id:
            try:
                rate = store.get_run(cell.run_id).summary.get("steady_samples_per_s")
            except RunNotFound:
                pass
        print(f"{cell.index:>3}  {terminal_text(cell.label):<{width}}  {cell.state:<9} {cell.run_id or '-':<22} "
              f"{format_rate(rate, '') if rate else '-':>10}  {terminal_text(cell.reason)}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run every combination of settings (each a comma list) × repeats × hosts",
                       description="Run a matrix of runs: each launch setting takes a comma list "
                                   "(--precision fp32,bf16 --nproc 1,2), and so do a script's --arg --NAME=A,B and "
                                   "--env NAME=A,B (a comma inside a value is \\,); every combination runs "
                                   "--repeats times on each host, one at a time per host unless --parallel.")
    p.add_argument("host", nargs="?", help="host profile name; 'local' is this computer")
    add_launch_settings(p)
    for action in p._actions:  # the launch options, each taking a comma list of its values
        if action.dest in SCALAR_SETTINGS:
            action.type = comma_list(action.type, action.choices)
            action.metavar = "A,B" if action.choices is None else "{" + ",".join(map(str, action.choices)) + "},..."
            action.choices = None
    p.add_argument("--hosts", type=comma_list(None, None), default=None, metavar="A,B",
                   help="run every cell on each of these hosts too (to compare machines, interpreters, torch versions)")
    p.add_argument("--repeats", type=int, default=1, help="runs per combination (default 1)")
    p.add_argument("--parallel", action="store_true",
                   help="run a host's cells side by side; timings then interfere. On a host with GPUs each cell "
                        "gets free GPUs of its own, one per process, and waits (saying why) while too few are free; "
                        "--gpus 0,1,2,3 then names the GPUs cells are placed on, --gpus free:N gives each cell N. "
                        "On a host without GPUs as many cells as its CPUs hold")
    p.add_argument("--name", default=None, help="the sweep's name (also a tag on its runs)")
    p.add_argument("--tag", type=run_tag, action="append", default=None)
    p.add_argument("--resume", metavar="ID", default=None, help="continue a sweep instead of starting one")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown SSH host key without asking")
    p.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("sweeps", help="list sweeps (newest first)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweeps)
    p = sub.add_parser("sweep-show", help="a sweep's matrix and cells")
    p.add_argument("sweep", help="sweep id, id prefix or name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep_show)
    for name, func, text in (("sweep-resume", cmd_sweep_resume, "continue a sweep after an interruption or a stop"),
                             ("sweep-stop", cmd_sweep_stop, "stop a sweep: its running runs, and cancel the rest")):
        p = sub.add_parser(name, help=text)
        p.add_argument("sweep", help="sweep id, id prefix or name")
        p.add_argument("--accept-new-host-key", action="store_true")
        p.set_defaults(func=func)
