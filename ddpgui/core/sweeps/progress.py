"""Sweep progress (pure): a SweepProgress read from the store, the ETA and the one-line summary."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from ..store import CELL_FINAL_STATES, RunNotFound, SweepCell


@dataclass
class SweepProgress:
    """Where a sweep stands; the runner hands one to every listener (the CLI bar and the GUI read the same).

    ``counts``: cell state → cells; ``fraction`` (0..1) counts a running cell by
    its run's steps; ``eta_s``: seconds left from the finished cells' durations
    per host (None until one has finished); ``steps``: running cell index →
    (its run's last step, total steps); ``changed``: the cell whose state just
    changed (None for a tick while runs log steps).
    """

    sweep_id: str
    name: str
    state: str
    total: int
    counts: dict[str, int]
    fraction: float
    eta_s: float | None
    cells: list[SweepCell]
    steps: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    changed: SweepCell | None = None

    @property
    def ended(self) -> int:
        return sum(self.counts.get(s, 0) for s in CELL_FINAL_STATES)

    @property
    def done(self) -> int:
        return self.counts.get("done", 0)

    @property
    def failed(self) -> int:
        """Cells that did not give a run's results: failed or skipped."""
        return self.counts.get("failed", 0) + self.counts.get("skipped", 0)

    @property
    def running(self) -> list[SweepCell]:
        return [c for c in self.cells if c.state == "running"]


def sweep_progress(store, sweep_id: str, slots: dict[str, int] | None = None,
                   changed: int | None = None) -> SweepProgress:
    """The sweep's progress from the store alone (``slots``: cells at once per host, 1 when not given)."""
    sweep = store.get_sweep(sweep_id)
    cells = store.sweep_cells(sweep_id)
    counts = Counter(c.state for c in cells)
    steps: dict[int, tuple[int, int | None]] = {}
    worked = float(sum(counts[s] for s in CELL_FINAL_STATES))
    for cell in cells:
        if cell.state == "running" and cell.run_id:
            try:
                run = store.get_run(cell.run_id)
            except RunNotFound:
                continue
            steps[cell.index] = (run.last_step or 0, run.total_steps)
            minutes = run.config.get("minutes")
            if run.total_steps:
                worked += min(1.0, (run.last_step or 0) / run.total_steps)
            elif minutes and run.started_at:  # a run of a given length in time
                worked += min(1.0, max(0.0, time.time() - run.started_at) / (minutes * 60))
    return SweepProgress(sweep_id=sweep_id, name=sweep.name, state=sweep.state, total=len(cells), counts=dict(counts),
                         fraction=worked / len(cells) if cells else 1.0,
                         eta_s=_eta(cells, slots or {}, time.time()) if sweep.active else None, cells=cells,
                         steps=steps, changed=None if changed is None else cells[changed])


def _eta(cells: list[SweepCell], slots: dict[str, int], now: float) -> float | None:
    """Seconds left: per host, pending cells × the mean duration of its finished cells, plus what its running
    cells have left, over the cells it runs at once; the slowest host decides (hosts run side by side)."""
    longest = 0.0
    for host in dict.fromkeys(c.host for c in cells):
        mine = [c for c in cells if c.host == host]
        pending = sum(c.state == "pending" for c in mine)
        running = [c for c in mine if c.state == "running"]
        if not pending and not running:
            continue
        timed = [c for c in mine if c.ended_at and c.started_at and c.state in CELL_FINAL_STATES]
        durations = [c.ended_at - c.started_at for c in timed if c.state == "done"] or \
                    [c.ended_at - c.started_at for c in timed]
        if not durations:
            return None
        mean = sum(durations) / len(durations)
        work = pending * mean + sum(max(mean - (now - (c.started_at or now)), 0.0) for c in running)
        longest = max(longest, work / max(1, slots.get(host, 1)))
    return longest


def summary_line(counts: dict[str, int], total: int) -> str:
    """``14 of 16 cells done, 1 failed, 1 skipped``."""
    others = [f"{counts[s]} {s}" for s in ("failed", "skipped", "cancelled", "running", "pending") if counts.get(s)]
    return ", ".join([f"{counts.get('done', 0)} of {total} cells done", *others])
