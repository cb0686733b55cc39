"""How the CLI shows runs: a run followed live to its end (progress line, events, summary) and the table of runs."""
from __future__ import annotations

import json
import sys
import threading
import time

from remote_runner.spools import EVENTS

from ..core.paths import config_dir
from ..core.runs.live import LiveRun, format_rate, progress_line, run_summary, summary_lines
from ..core.runs.manager import RunManager, RunUpdate
from ..core.runs.stall_watch import detector_for_run
from ..core.runs.stalls import OK, PHASE, StallPolicy, StallPolicyError
from ..core.store import RunRecord, RunStore
from .common import EXIT_FAILED, EXIT_INTERRUPTED, STATE_EXIT, terminal_text

#: The CLI's stall thresholds (StallPolicy.to_dict() as JSON) in the config folder; defaults without one.
STALLS_FILE = "stalls.json"


def stall_policy() -> StallPolicy:
    """The thresholds ``ddpgui follow`` judges stalls by: ``stalls.json`` in the config folder, else the defaults
    (a file that cannot be used is said on stderr, and the defaults used)."""
    path = config_dir() / STALLS_FILE
    if not path.is_file():
        return StallPolicy()
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return StallPolicy.from_dict(data)
    except (OSError, ValueError, StallPolicyError) as exc:  # StallPolicyError names the field
        hint = getattr(exc, "hint", "") or 'write it as a JSON object, e.g. {"min_silence_s": 300}'
        print(f"stall detection: {path} cannot be used ({exc}); the default thresholds are used\nHint: {hint}",
              file=sys.stderr)
        return StallPolicy()


def follow_live(manager: RunManager, run_id: str, line_interval_s: float = 0.5,
                policy: StallPolicy | None = None) -> int:
    """Print a live line (at most every ``line_interval_s``) until the run has ended; returns the exit code.
    A stall (docs/STALLS.md, by ``policy``, default :func:`stall_policy`) is said once on stderr, ``stalled?
    REASON``, and ``progressing again`` when it clears."""
    record = manager.store.get_run(run_id)
    live = LiveRun.of_run(record)  # its elapsed time from the run's own start, as every view (run_elapsed_s)
    stall = detector_for_run(manager.store, record, policy or stall_policy())
    lock = threading.Lock()
    said = {"queue": record.message if record.state == "queued" else None}
    if record.state == "queued":
        print(terminal_text(record.message), file=sys.stderr)
    for rec in manager.store.records(run_id, EVENTS):
        live.add_event(rec)

    def on_update(update: RunUpdate) -> None:
        if update.run_id != run_id:
            if update.connection == "lost":
                print(f"\nconnection to {terminal_text(update.host)} lost; reconnecting", file=sys.stderr)
            elif update.store is not None:  # said once by the follower, and once more when it works again
                print("\n" + (f"ddpgui: {terminal_text(update.store)}" if update.store else
                              "the run store works again; following goes on"), file=sys.stderr)
            return
        with lock:
            now = time.time()
            stall.add_records(update.records, update.node, now)
            for spool, data in update.logs.items():
                stall.add_output(spool, data, update.node, now)
            if update.run is not None:
                live.set_run(update.run)
            queued = update.run is not None and update.run.state == "queued"
            if queued and update.run.message != said.get("queue"):  # a Slurm job waiting, and why
                said["queue"] = update.run.message
                print(terminal_text(update.run.message) + (f" ({terminal_text(update.run.hint)})"
                                                           if update.run.hint else ""), file=sys.stderr)
            for spool, records in update.records.items():
                for rec in records:
                    live.add(spool, rec)
                    _print_event(spool, rec)

    unsubscribe = manager.subscribe(on_update)
    tty = sys.stdout.isatty()
    last_step = -1
    stalled = None  # the since of the stall said (once per stall)
    try:
        while True:
            try:
                record = manager.wait(run_id, timeout=line_interval_s)
                break
            except TimeoutError:
                pass
            with lock:
                if live.step != last_step and live.step:
                    print(("\r" if tty else "") + progress_line(live), end="" if tty else "\n", flush=True)
                    last_step = live.step
                d = stall.decide()
            if d.stalled and d.since != stalled:
                stalled = d.since
                print(("\n" if tty else "") + f"stalled? {terminal_text(d.reason)}", file=sys.stderr, flush=True)
            elif stalled is not None and not d.stalled and d.state in (OK, PHASE):
                stalled = None
                print(("\n" if tty else "") + "progressing again", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print(f"\ninterrupted; the run goes on on its host (ddpgui follow {run_id})", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        unsubscribe()
    if tty:
        print()
    _print_summary(manager.store, run_id)
    return STATE_EXIT.get(record.state, EXIT_FAILED)


def _print_event(spool: str, rec: dict) -> None:
    if spool != EVENTS:
        return
    event = rec.get("event")
    if event == "compile_end":
        print(f"  compiled in {rec.get('duration_s', 0):.1f} s", file=sys.stderr)
    elif event == "warmup_done":
        print(f"  warm-up done at step {rec.get('step')}", file=sys.stderr)
    elif event in ("warning", "retry"):
        print(f"  {event}: {terminal_text(rec.get('message') or rec.get('reason'))}", file=sys.stderr)
    elif event == "inference_unsupported":
        print(f"  {terminal_text(rec.get('precision'))}: {terminal_text(rec.get('reason'))}", file=sys.stderr)


def _print_summary(store: RunStore, run_id: str) -> None:
    """The ended run's summary, from the store: every follower of the run prints the same."""
    for line in summary_lines(run_summary(store, run_id)):
        print(terminal_text(line, multiline=True))


def print_runs_table(runs: list[RunRecord]) -> None:
    """``ddpgui runs``: one line per run, names and hosts cut to their column."""
    gpus = any((r.config or {}).get("gpus") is not None for r in runs)  # a GPUs column when a run chose some
    print(f"{'id':<22} {'name':<32} {'host':<12} {'state':<9} {'step':>11} {'samples/s':>10}" + ("  gpus" if gpus else ""))
    for r in runs:
        step = f"{r.last_step or 0}/{r.total_steps}" if r.total_steps else str(r.last_step or 0)
        rate = r.summary.get("steady_samples_per_s")
        chosen = (r.config or {}).get("gpus")
        print(f"{r.id:<22} {terminal_text(r.name)[:32]:<32} {terminal_text(r.host)[:12]:<12} {r.state:<9} {step:>11} "
              f"{format_rate(rate, '') if rate else '-':>10}"
              + (f"  {','.join(map(str, chosen)) if chosen is not None else '-'}" if gpus else ""))
