"""Every host at once, as small multiples: one card a host with its free GPUs, one compact line a GPU
(utilisation, memory, who holds it), or a CPU host's load and memory; a problem or a host not connected says so
with a Connect button.

The cards flow into as many columns as the width holds; long names are elided (their whole text is the
tooltip), so nothing here widens the window.  A snapshot updates its card in place.
"""
from __future__ import annotations

import html

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QTextDocument
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ...core.gpus.snapshot import GpuState, HostSnapshot
from .dashboard_header import ElidedLabel
from .gpu_parts import (
    BUSY_COLOR,
    LOST_COLOR,
    STALE_COLOR,
    Meter,
    exact_memory,
    format_memory,
    fraction,
    gpu_label,
    holders,
    level_color,
    state_text,
    state_tip,
)

#: A card's width; the grid holds as many columns of them as fit.
CARD_WIDTH = 300
SPACING = 8


class GpuLine(QWidget):
    """One GPU of a card in one painted line: its index, a utilisation bar, a memory bar and who holds it."""

    INDEX_W, BAR_W, GAP = 22, 54, 6

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: tuple = ()
        self.stale = False  # the host's data is old: drawn grey
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def set_gpu(self, gpu: GpuState) -> None:
        util = None if gpu.util_pct is None else gpu.util_pct / 100
        memory = fraction(gpu.mem_used_mib, gpu.mem_total_mib)
        text, color = (holders(gpu), LOST_COLOR) if gpu.state != "ok" else (
            holders(gpu), QColor(state_text(gpu)[1]) if gpu.is_free() else self.palette().windowText().color())
        values = ("?" if gpu.index is None else str(gpu.index), util, memory, text, color.name())
        if values != self.values:
            self.values = values
            self.update()
        tip = (f"{gpu_label(gpu)}: {gpu.name or 'name not reported'}\n"
               f"utilisation {'not reported' if gpu.util_pct is None else f'{gpu.util_pct:.0f}%'}; memory "
               f"{exact_memory(gpu.mem_used_mib, gpu.mem_total_mib)}\n{state_tip(gpu)}")
        if gpu.mig_mode == "enabled":
            tip += f"\nMIG on: {len(gpu.mig_devices)} devices"
        if tip != self.toolTip():
            self.setToolTip(tip)

    def text(self) -> str:
        """The holder text as given (before eliding)."""
        return self.values[3] if self.values else ""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(120, self.fontMetrics().height() + 4)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return self.sizeHint()

    def paintEvent(self, event) -> None:  # noqa: N802
        if not self.values:
            return
        index, util, memory, text, color = self.values
        painter = QPainter(self)
        h = self.height()
        painter.setPen(self.palette().windowText().color())
        painter.drawText(QRect(0, 0, self.INDEX_W, h), int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight),
                         index)
        x = self.INDEX_W + self.GAP
        for share in (util, memory):
            rect = QRect(x, 3, self.BAR_W, h - 6)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(0, 0, 0, 25))
            painter.drawRoundedRect(rect, 2, 2)
            if share:
                painter.setBrush(level_color(share, 200))
                painter.drawRoundedRect(QRect(x, 3, max(2, round(self.BAR_W * share)), h - 6), 2, 2)
            x += self.BAR_W + self.GAP
        painter.setPen(STALE_COLOR if self.stale else QColor(color))
        rest = QRect(x, 0, max(0, self.width() - x), h)
        painter.drawText(rest, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft),
                         self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, rest.width()))
        painter.end()


class GpuCaption(GpuLine):
    """The words over a card's GPU lines: which bar is which."""

    CAPTIONS = ("GPU", "util", "memory", "held by")

    def __init__(self, parent=None):
        super().__init__(parent)
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 0.85)
        self.setFont(font)
        self.setToolTip("Each GPU: its index, utilisation, memory used of its total, and who holds it")

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.setPen(STALE_COLOR)
        h, left = self.height(), int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft)
        painter.drawText(QRect(0, 0, self.INDEX_W, h), int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight),
                         self.CAPTIONS[0])
        x = self.INDEX_W + self.GAP
        for caption in self.CAPTIONS[1:]:
            width = self.BAR_W if caption != "held by" else max(0, self.width() - x)
            painter.drawText(QRect(x, 0, width, h), left, caption)
            x += self.BAR_W + self.GAP
        painter.end()


class HostCard(QFrame):
    """One host of the fleet."""

    opened = Signal(str)
    connect_clicked = Signal(str)

    def __init__(self, host: str, display: str, parent=None):
        super().__init__(parent, objectName="fleet_card")
        self.host = host
        self.snapshot: HostSnapshot | None = None
        self.connected = True
        self.stale = False
        self.problem_text = ""
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setToolTip("Double-click for this host's GPUs and processes")
        self.title = ElidedLabel(display, objectName="fleet_title")
        font = self.title.font()
        font.setBold(True)
        self.title.setFont(font)
        self.summary = ElidedLabel("not sampled yet", objectName="fleet_summary")
        self.notes = ElidedLabel(objectName="fleet_notes", visible=False)
        self.notes.setStyleSheet(f"color: {BUSY_COLOR.name()}")
        self.status = QLabel(objectName="fleet_status", wordWrap=True, visible=False)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.details = QPushButton("Details", toolTip="Show this host's GPUs and processes", objectName="fleet_details")
        self.details.clicked.connect(lambda: self.opened.emit(self.host))
        self.connect_button = QPushButton("Connect", visible=False, objectName="fleet_connect",
                                          toolTip="Connect to this host and start watching its GPUs")
        self.connect_button.clicked.connect(lambda: self.connect_clicked.emit(self.host))
        self.lines: list[GpuLine] = []
        self.caption = GpuCaption(self)
        self.caption.setVisible(False)
        self.lines_box = QVBoxLayout()
        self.lines_box.setSpacing(1)
        self.lines_box.addWidget(self.caption)
        self.cpu_meters = (Meter(tip="Load average over 1 minute against the host's CPU count"),
                           Meter(tip="Memory used of the host's total"))
        cpu_row = QHBoxLayout()
        for meter in self.cpu_meters:
            meter.setVisible(False)
            cpu_row.addWidget(meter, 1)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.details)
        buttons = QHBoxLayout()
        buttons.addWidget(self.connect_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.summary)
        layout.addWidget(self.notes)
        layout.addLayout(self.lines_box)
        layout.addLayout(cpu_row)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

    def set_display(self, display: str) -> None:
        self.title.setText(display)
        self.title.setToolTip(display if display == self.host else f"{display} ({self.host})")

    def show_snapshot(self, snapshot: HostSnapshot) -> None:
        self.snapshot = snapshot
        self.problem_text = ""
        self.status.setVisible(False)
        self._set_stale(False)
        if snapshot.gpus:
            self.summary.setText(snapshot.summary())
            self.summary.setToolTip(f"{snapshot.summary()} (from {snapshot.source}); free: no compute process "
                                    "and under 1 GiB of memory used")
        else:
            cpu = snapshot.cpu
            load = "?" if cpu is None or cpu.load_1m is None else f"{cpu.load_1m:.2f}"
            count = "?" if cpu is None or not cpu.cpu_count else cpu.cpu_count
            self.summary.setText(f"CPU host · load {load} of {count} CPUs")
        while len(self.lines) < len(snapshot.gpus):
            line = GpuLine(self)
            self.lines.append(line)
            self.lines_box.addWidget(line)
        for line, gpu in zip(self.lines, snapshot.gpus):
            line.set_gpu(gpu)
            line.setVisible(True)
        for line in self.lines[len(snapshot.gpus):]:
            line.setVisible(False)
        self.caption.setVisible(bool(snapshot.gpus))
        self._show_cpu(snapshot)
        if snapshot.errors:
            self.notes.setText("; ".join(snapshot.errors))
            self.notes.setToolTip("The monitor on the host could not read everything:\n" + "\n".join(snapshot.errors))
        self.notes.setVisible(bool(snapshot.errors))
        self._update_buttons()

    def _show_cpu(self, snapshot: HostSnapshot) -> None:
        cpu = snapshot.cpu if not snapshot.gpus else None
        for meter in self.cpu_meters:
            meter.setVisible(cpu is not None)
        if cpu is None:
            return
        load = None if cpu.load_1m is None or not cpu.cpu_count else min(1.0, cpu.load_1m / cpu.cpu_count)
        self.cpu_meters[0].set(load, f"load {'?' if cpu.load_1m is None else f'{cpu.load_1m:.2f}'}")
        share = fraction(cpu.mem_used_mib, cpu.mem_total_mib)
        self.cpu_meters[1].set(share, format_memory(cpu.mem_used_mib, cpu.mem_total_mib),
                               f"Memory: {exact_memory(cpu.mem_used_mib, cpu.mem_total_mib)}")

    def show_problem(self, message: str, hint: str) -> None:
        self.problem_text = message
        self.status.setText(f"<span style='color:{LOST_COLOR.name()}'>{html.escape(message)}</span>"
                            + (f"<br><span style='color:{STALE_COLOR.name()}'>{html.escape(hint)}</span>"
                               if hint else ""))
        self.status.setToolTip(message + (f"\n{hint}" if hint else ""))
        self.status.setVisible(True)
        if self.snapshot is None:
            self.summary.setText("no data")
        self._set_stale(self.snapshot is not None)
        self._update_buttons()

    def show_waiting(self, text: str) -> None:
        self.problem_text = ""
        self.status.setText(f"<i>{html.escape(text)}</i>")
        self.status.setToolTip(text)
        self.status.setVisible(True)
        self._set_stale(self.snapshot is not None)  # what it showed is of a sampler that is no more
        self._update_buttons()

    def set_connected(self, connected: bool) -> None:
        self.connected = connected
        if not connected and not self.problem_text:
            self.status.setText("<i>not connected</i>")
            self.status.setToolTip("ddpgui has no connection to this host; Connect opens one and starts watching")
            self.status.setVisible(True)
        if not connected:
            self._set_stale(self.snapshot is not None)  # its last data, greyed: nothing updates it now
        elif connected and self.status.text() == "<i>not connected</i>":
            self.status.setVisible(False)
        self._update_buttons()

    def status_text(self) -> str:
        """The status line as plain words (empty when hidden)."""
        if not self.status.isVisibleTo(self):
            return ""
        text = QTextDocument()
        text.setHtml(self.status.text())
        return text.toPlainText()

    def _update_buttons(self) -> None:
        self.connect_button.setVisible(not self.connected or bool(self.problem_text))

    def _set_stale(self, stale: bool) -> None:
        self.stale = stale
        color = STALE_COLOR if stale else self.palette().windowText().color()
        palette = self.summary.palette()
        if palette.color(self.summary.foregroundRole()) != color:
            palette.setColor(self.summary.foregroundRole(), color)
            self.summary.setPalette(palette)
        for line in self.lines:
            if line.stale != stale:
                line.stale = stale
                line.update()

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.opened.emit(self.host)
        super().mouseDoubleClickEvent(event)


class FleetView(QWidget):
    """Every host as a card, in order; a card per host kept across :meth:`set_hosts` while the host stays."""

    host_opened = Signal(str)
    connect_requested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cards: dict[str, HostCard] = {}
        self.order: list[str] = []
        self._columns = 0
        self.grid_widget = QWidget(objectName="fleet_grid")
        self.grid = QGridLayout(self.grid_widget)
        self.grid.setSpacing(SPACING)
        self.grid.setContentsMargins(SPACING, SPACING, SPACING, SPACING)
        self.scroll = QScrollArea(widgetResizable=True, objectName="fleet_scroll")
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setWidget(self.grid_widget)
        self.empty = QLabel("No hosts yet: add one in the hosts panel", objectName="fleet_empty",
                            alignment=Qt.AlignmentFlag.AlignCenter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.empty)
        layout.addWidget(self.scroll, 1)
        self.set_hosts([])

    def set_hosts(self, hosts: list[tuple[str, str]]) -> None:
        """The hosts (name, display name) in order; cards of hosts still there keep their data."""
        names = [name for name, _ in hosts]
        for name in list(self.cards):
            if name not in names:
                card = self.cards.pop(name)
                self.grid.removeWidget(card)
                card.deleteLater()
        for name, display in hosts:
            card = self.cards.get(name)
            if card is None:
                card = self.cards[name] = HostCard(name, display, self.grid_widget)
                card.opened.connect(self.host_opened)
                card.connect_clicked.connect(self.connect_requested)
            card.set_display(display)
        self.order = names
        self.empty.setVisible(not names)
        self.scroll.setVisible(bool(names))
        self._columns = 0
        self._reflow()

    def card(self, host: str) -> HostCard | None:
        return self.cards.get(host)

    def show_snapshot(self, host: str, snapshot: HostSnapshot) -> None:
        if host in self.cards:
            self.cards[host].show_snapshot(snapshot)

    def show_problem(self, host: str, message: str, hint: str) -> None:
        if host in self.cards:
            self.cards[host].show_problem(message, hint)

    def show_waiting(self, host: str, text: str) -> None:
        if host in self.cards:
            self.cards[host].show_waiting(text)

    def set_connected(self, host: str, connected: bool) -> None:
        if host in self.cards:
            self.cards[host].set_connected(connected)

    def columns(self) -> int:
        return self._columns

    def _reflow(self) -> None:
        width = self.scroll.viewport().width() if self.scroll.isVisible() else self.width()
        columns = max(1, (width - SPACING) // (CARD_WIDTH + SPACING))
        if columns == self._columns:
            return
        self._columns = columns
        for name in self.order:
            self.grid.removeWidget(self.cards[name])
        for position, name in enumerate(self.order):
            self.grid.addWidget(self.cards[name], position // columns, position % columns, Qt.AlignmentFlag.AlignTop)
        for column in range(max(self.grid.columnCount(), columns)):  # empty columns too: one card is one column wide
            self.grid.setColumnStretch(column, 1 if column < columns else 0)
        rows = -(-len(self.order) // columns)
        for row in range(max(self.grid.rowCount(), rows + 1)):
            self.grid.setRowStretch(row, 1 if row == rows else 0)  # the cards at the top, the space below them

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._reflow()
