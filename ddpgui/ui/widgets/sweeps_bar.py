"""The sweeps' part of the status bar: the SweepRunner the window owns, a progress bar with ETA, resume offers.

The runner calls its listeners on worker threads; :class:`SweepsBar` relays each
:class:`SweepProgress` to the GUI thread through a :class:`~ddpgui.ui.bridge.GuiRelay`, so the
widgets change on the GUI thread only.  Starting, resuming and stopping touch the store
and the hosts, so they run on the window's worker pool.  A sweep started here announces its first run
(:attr:`SweepsBar.first_run`) once it has one, for the dashboard to show.  Its parts are spaced apart: the line
(its sweep name cut first when the bar is short), the progress bar wide enough for ``100% · 00:00:00 left``,
and real buttons.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget

from ddpgui.core.runs.live import format_duration
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store.records import SWEEP_FINAL_STATES
from ddpgui.core.sweeps import SweepProgress, SweepRunner, SweepSpec, summary_line
from ddpgui.core.sweeps.gpus import sweep_gpus

from ..bridge import GuiRelay
from .name_fit import FittedLabel

#: Progress bar resolution (the bar's maximum).
STEPS = 1000
#: Sweep states a restarted app offers to resume.
RESUMABLE = ("running", "queued")
#: The widest the sweep line and the resume offer ask for in the status bar (pixels; cut where names differ least).
LINE_WIDTH, OFFER_WIDTH = 760, 300


def resumable_sweeps(store) -> list:
    """Worker: the stored sweeps that were running or queued when the app last closed."""
    return [s for s in store.list_sweeps() if s.state in RESUMABLE]


class SweepsBar(QWidget):
    """Owns the window's :class:`SweepRunner`; shows the latest sweep's progress and offers to resume."""

    progress_changed = Signal(object)  # SweepProgress, on the GUI thread
    compare_requested = Signal(str)  # sweep id
    first_run = Signal(str)  # run id: the first run of a sweep started here, once it has one

    def __init__(self, manager: RunManager, loader: Callable[..., object], parent=None):
        """``loader`` starts work off the GUI thread (``WorkerPool.start``)."""
        super().__init__(parent)
        self.setObjectName("sweeps_bar")
        self.manager, self.loader = manager, loader
        self.runner = SweepRunner(manager)
        self.sweep_id: str | None = None
        self.last: SweepProgress | None = None
        self.offers: list = []
        self.warnings: list[str] = []  # about the GPUs the last sweep started on (busy ones it runs on anyway)
        self.following: str | None = None  # a sweep started here whose first run is not announced yet
        self.label = FittedLabel(objectName="sweep_label", preferred=LINE_WIDTH)
        self.bar = QProgressBar(objectName="sweep_progress", textVisible=True)
        self.bar.setRange(0, STEPS)
        self.bar.setFixedWidth(self.bar.fontMetrics().horizontalAdvance("100% · 00:00:00 left") + 32)  # never wraps
        self.bar.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.stop_button = QPushButton("Stop sweep", objectName="sweep_stop")
        self.compare_button = QPushButton("Compare", objectName="sweep_compare",
                                          toolTip="Open the sweep's finished runs in the Compare tab")
        self.resume_button = QPushButton(objectName="sweep_resume")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(10)
        for widget in (self.resume_button, self.label, self.bar, self.stop_button, self.compare_button):
            layout.addWidget(widget)
            widget.setVisible(False)
        self.stop_button.clicked.connect(self.stop)
        self.compare_button.clicked.connect(lambda: self.sweep_id and self.compare_requested.emit(self.sweep_id))
        self.resume_button.clicked.connect(self._resume_offered)
        self._relay = GuiRelay(self)
        self._relay.received.connect(self._deliver)
        self._unsubscribe = self.runner.subscribe(self._relay.post)

    # ---- starting ------------------------------------------------------------------------
    def start(self, spec: SweepSpec) -> None:
        """Plan, store and start the sweep on a worker (its GPU choice checked on the hosts first); its progress
        shows here, after the warnings about busy GPUs chosen."""
        self._show_text(f"Starting sweep {spec.name or ''}…".replace("  ", " "))
        self.loader(self._start, spec, on_return=self._started, on_error=self._failed)

    def _start(self, spec: SweepSpec):
        """Worker: the launch form's GPU choice made into the sweep's settings (snapshots of its hosts), then
        the sweep started."""
        base, warnings = sweep_gpus(spec, self.manager)
        return self.runner.start(dataclasses.replace(spec, base=base)), warnings, True

    def resume(self, sweep_id: str) -> None:
        self._show_text("Resuming the sweep…")
        self.loader(self.runner.resume, sweep_id, on_return=self._started, on_error=self._failed)

    def _started(self, started) -> None:
        """A sweep started (``(sweep, warnings, True)``: here, from the dialog) or resumed (the sweep alone)."""
        sweep, self.warnings, new = started if isinstance(started, tuple) else (started, [], False)
        self.sweep_id = sweep.id
        self.following = sweep.id if new else None
        self.offers = [s for s in self.offers if s.id != sweep.id]
        self._show_offer()
        self.loader(self.runner.progress, sweep.id, on_return=self._deliver)

    def _failed(self, exc: Exception) -> None:
        self._show_text(f"Sweep not started: {exc}" + (f" — {exc.hint}" if getattr(exc, "hint", "") else ""))

    def stop(self) -> None:
        if self.sweep_id:
            self.stop_button.setEnabled(False)
            self._show_text("Stopping the sweep…", keep_bar=True)
            self.loader(self.runner.stop, self.sweep_id, on_return=lambda _: self.loader(
                self.runner.progress, self.sweep_id, on_return=self._deliver), on_error=self._failed)

    # ---- resume offers -------------------------------------------------------------------
    def check_resumable(self) -> None:
        """Look (on a worker) for sweeps a previous session left running or queued; offer the newest."""
        self.loader(resumable_sweeps, self.manager.store, on_return=self._set_offers)

    def _set_offers(self, sweeps: list) -> None:
        running = {self.sweep_id}
        self.offers = [s for s in sweeps if s.id not in running]
        self._show_offer()

    def _show_offer(self) -> None:
        if self.offers:
            sweep = self.offers[0]
            more = f" (+{len(self.offers) - 1} more)" if len(self.offers) > 1 else ""
            name = self.resume_button.fontMetrics().elidedText(sweep.name, Qt.TextElideMode.ElideMiddle, OFFER_WIDTH)
            self.resume_button.setText(f"Resume sweep “{name}”{more}")
            self.resume_button.setToolTip(f"Resume sweep “{sweep.name}” ({sweep.id}): it was {sweep.state} when "
                                          "ddpgui last closed; its finished cells are kept and running runs are "
                                          "reattached")
        self.resume_button.setVisible(bool(self.offers))

    def _resume_offered(self) -> None:
        if self.offers:
            self.resume(self.offers.pop(0).id)
            self._show_offer()

    # ---- progress ------------------------------------------------------------------------
    @Slot(object)
    def _deliver(self, progress: SweepProgress) -> None:
        if self.sweep_id is None:
            self.sweep_id = progress.sweep_id
        if progress.sweep_id != self.sweep_id:
            return
        self.last = progress
        first = next((c.run_id for c in sorted(progress.cells, key=lambda c: c.index) if c.run_id), None)
        if self.following == progress.sweep_id and first is not None:
            self.following = None
            self.first_run.emit(first)
        self.bar.setValue(round(STEPS * min(1.0, progress.fraction)))
        eta = f" · {format_duration(progress.eta_s)} left" if progress.eta_s is not None else ""
        self.bar.setFormat(f"{progress.fraction:.0%}{eta}")
        many = len(self.warnings) > 1
        warned = f" · {len(self.warnings)} warning{'s' if many else ''} (hover)" if self.warnings else ""
        self.label.setText(f"Sweep “{progress.name}”: {summary_line(progress.counts, progress.total)} "
                           f"({progress.state}){warned}")
        self.label.setToolTip("\n".join([*(f"warning: {w}; running on it anyway" for w in self.warnings),
                                         *(f"{c.label}: {c.state}" + (f" — {c.reason}" if c.reason else "")
                                           for c in progress.cells)]))
        active = progress.state not in SWEEP_FINAL_STATES
        for widget in (self.label, self.bar):
            widget.setVisible(True)
        self.stop_button.setVisible(active)
        self.stop_button.setEnabled(active)
        self.compare_button.setVisible(progress.done > 0)
        self.progress_changed.emit(progress)

    def _show_text(self, text: str, keep_bar: bool = False) -> None:
        self.label.setText(text)
        self.label.setVisible(True)
        self.bar.setVisible(keep_bar and self.bar.isVisible())

    def close_runner(self) -> None:
        """Detach (the window is closing): runs go on on their hosts and the sweep stays resumable."""
        self._unsubscribe()
        self.runner.close()
