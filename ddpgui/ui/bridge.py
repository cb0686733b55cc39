"""Bridges the RunManager's listener (called on follower threads) to a GUI-thread signal."""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal, Slot

from ddpgui.core.manager import RunManager, RunUpdate


class RunUpdates(QObject):
    """``update`` carries each :class:`RunUpdate` on the GUI thread, in order."""

    update = Signal(object)
    _posted = Signal(object)

    def __init__(self, manager: RunManager | None = None):
        super().__init__()
        self._posted.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        self._unsubscribe = manager.subscribe(self.post) if manager is not None else None

    def post(self, update: RunUpdate) -> None:
        """Thread-safe: queue an update for the GUI thread."""
        self._posted.emit(update)

    @Slot(object)
    def _deliver(self, update: RunUpdate) -> None:
        self.update.emit(update)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
