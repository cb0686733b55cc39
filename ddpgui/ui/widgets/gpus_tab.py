"""The main window's "GPUs" tab: the selected host's GPUs (:class:`GpuView`) or every host at once
(:class:`FleetView`), and which hosts it wants sampled.

:attr:`GpusTab.watch_changed` carries the hosts the page shows now: the selected one in "This host" mode,
every host in fleet mode, none while the page is hidden, so the monitors run only while somebody looks.
"""
from __future__ import annotations

import time

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QButtonGroup, QHBoxLayout, QPushButton, QStackedWidget, QVBoxLayout, QWidget

from ...core.gpus.snapshot import HostSnapshot
from .fleet_view import FleetView
from .gpu_view import GpuView

HOST_MODE, FLEET_MODE = "host", "fleet"
MODES = (HOST_MODE, FLEET_MODE)


class GpusTab(QWidget):
    watch_changed = Signal(list)
    connect_requested = Signal(str)
    host_chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.host: str | None = None
        self.hosts: list[tuple[str, str]] = []
        self._latest: dict[str, tuple[HostSnapshot, float]] = {}
        self._problems: dict[str, tuple[str, str]] = {}
        self._connected: dict[str, bool] = {}
        self._shown = False
        self._watched: list[str] = []
        self.gpu_view = GpuView()
        self.fleet = FleetView()
        self.fleet.connect_requested.connect(self.connect_requested)
        self.gpu_view.connect_requested.connect(self.connect_requested)
        self.fleet.host_opened.connect(self._open)
        self.buttons = QButtonGroup(self)
        self.mode_buttons: dict[str, QPushButton] = {}
        toggle = QHBoxLayout()
        for mode, text, tip in ((HOST_MODE, "This host", "The GPUs and processes of the host selected in the "
                                 "hosts panel"),
                                (FLEET_MODE, "All hosts (fleet)", "Every host at once: free GPUs and who holds "
                                 "the others (samples every host while shown)")):
            button = QPushButton(text, checkable=True, toolTip=tip, objectName=f"gpus_mode_{mode}")
            self.buttons.addButton(button)
            self.mode_buttons[mode] = button
            button.clicked.connect(lambda _=False, m=mode: self.set_mode(m))
            toggle.addWidget(button)
        toggle.addStretch(1)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.gpu_view)
        self.stack.addWidget(self.fleet)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(toggle)
        layout.addWidget(self.stack, 1)
        self._mode = HOST_MODE
        self.mode_buttons[HOST_MODE].setChecked(True)

    # --- mode and hosts -------------------------------------------------------------------------------------

    def mode(self) -> str:
        """``host`` or ``fleet``."""
        return self._mode

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"the GPUs tab shows {' or '.join(MODES)}, not {mode!r}")
        self._mode = mode
        self.mode_buttons[mode].setChecked(True)
        self.stack.setCurrentWidget(self.gpu_view if mode == HOST_MODE else self.fleet)
        self._announce()

    def set_host(self, name: str, display: str) -> None:
        """The host selected in the hosts panel, shown in "This host" mode with what is known of it."""
        changed = name != self.host
        self.host = name
        if changed:
            self.gpu_view.set_host(name, display)
            if name in self._latest:
                snapshot, received = self._latest[name]
                self.gpu_view.show_snapshot(name, snapshot, received)
            if name in self._problems:
                self.gpu_view.show_problem(name, *self._problems[name])
            if name in self._connected:
                self.gpu_view.set_connected(name, self._connected[name])
        else:
            self.gpu_view.set_host(name, display)
        self._announce()

    def set_hosts(self, hosts: list[tuple[str, str]]) -> None:
        """Every host (name, display name) in the hosts panel's order, for the fleet."""
        self.hosts = list(hosts)
        names = {name for name, _ in hosts}
        for known in (self._latest, self._problems, self._connected):
            for name in [n for n in known if n not in names]:
                del known[name]
        if self.host is not None and self.host not in names:  # deleted: nothing to show until another is chosen
            self.host = None
            self.gpu_view.clear()
        self.fleet.set_hosts(self.hosts)
        for name, (snapshot, _) in self._latest.items():
            if self.fleet.card(name) is not None and self.fleet.card(name).snapshot is None:
                self.fleet.show_snapshot(name, snapshot)
        self._announce()

    def watched(self) -> list[str]:
        """The hosts this page wants sampled now."""
        if not self._shown:
            return []
        if self._mode == FLEET_MODE:
            return [name for name, _ in self.hosts]
        return [self.host] if self.host else []

    # --- data ----------------------------------------------------------------------------------------------

    def show_snapshot(self, host: str, snapshot: HostSnapshot) -> None:
        received = time.monotonic()
        self._latest[host] = (snapshot, received)
        self._problems.pop(host, None)
        if host == self.host:
            self.gpu_view.show_snapshot(host, snapshot, received)
        self.fleet.show_snapshot(host, snapshot)

    def show_problem(self, host: str, message: str, hint: str) -> None:
        self._problems[host] = (message, hint)
        if host == self.host:
            self.gpu_view.show_problem(host, message, hint)
        self.fleet.show_problem(host, message, hint)

    def show_waiting(self, host: str, text: str) -> None:
        if host == self.host:
            self.gpu_view.show_waiting(host, text)
        self.fleet.show_waiting(host, text)

    def set_connected(self, host: str, connected: bool) -> None:
        self._connected[host] = connected
        self.fleet.set_connected(host, connected)
        self.gpu_view.set_connected(host, connected)

    # --- internals ------------------------------------------------------------------------------------------

    def _open(self, host: str) -> None:
        display = dict(self.hosts).get(host, host)
        self.set_host(host, display)
        self.set_mode(HOST_MODE)
        self.host_chosen.emit(host)

    def _announce(self) -> None:
        watched = self.watched()
        if watched != self._watched:
            self._watched = watched
            self.watch_changed.emit(list(watched))

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self._shown = True
        self._announce()

    def hideEvent(self, event) -> None:  # noqa: N802
        super().hideEvent(event)
        self._shown = False
        self._announce()
