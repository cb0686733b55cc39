"""Bridges from worker threads to the GUI thread: a value posted on any thread arrives as a signal on the GUI thread.

:class:`GuiRelay` is the one mechanism; :class:`RunUpdates` (the RunManager's listener),
the sweeps bar (the SweepRunner's listener) and ``workers.GeneratorWorker`` use it.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal, Slot

from ddpgui.core.runs.manager import RunManager


class GuiRelay(QObject):
    """``received`` carries each value given to :meth:`post` (from any thread) on this object's thread, in order.

    Create it on the GUI thread.  The queued hop matters: slots that are plain functions would
    otherwise run on the posting thread.
    """

    received = Signal(object)
    _posted = Signal(object)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._posted.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def post(self, value: object) -> None:
        """Thread-safe: queue a value for the GUI thread."""
        self._posted.emit(value)

    @Slot(object)
    def _deliver(self, value: object) -> None:
        self.received.emit(value)


class RunUpdates(GuiRelay):
    """``received`` carries each :class:`RunUpdate` the manager reports, on the GUI thread, in order."""

    def __init__(self, manager: RunManager | None = None):
        super().__init__()
        self._unsubscribe = manager.subscribe(self.post) if manager is not None else None

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
