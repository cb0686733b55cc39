"""Pieces the GPU views share: memory and age in words, a GPU's state and holders, table cells with a bar behind
their text, a one-line painted meter, and a fixed-size utilisation history.

Everything here is cheap per snapshot: cells and meters are updated in place, the history writes into arrays
allocated once.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QAction, QColor, QKeySequence, QPainter
from PySide6.QtWidgets import QApplication, QSizePolicy, QStyledItemDelegate, QTableWidget, QTableWidgetItem, QWidget

from ...core.gpus.snapshot import GpuProcess, GpuState
from ...core.runs.stalls import format_span

#: The item data role holding a cell's bar: (fraction 0..1, QColor) or None.
BAR_ROLE = Qt.ItemDataRole.UserRole + 7
LOST_COLOR = QColor("#c5221f")
FREE_COLOR = QColor("#188038")
BUSY_COLOR = QColor("#b06000")
STALE_COLOR = QColor("#80868b")
#: One colour per GPU (its history line and its index cell), repeated past eight.
GPU_COLORS = ("#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#12b5cb", "#f9ab00", "#80868b")
#: Samples the history keeps per GPU: five minutes at the monitor's 2 s.
HISTORY_SAMPLES = 150


def gpu_color(position: int) -> QColor:
    return QColor(GPU_COLORS[position % len(GPU_COLORS)])


def format_mib(mib: float | None) -> str:
    """``802 MiB``, ``28.5 GiB``, ``–`` when unknown."""
    if mib is None:
        return "–"
    return f"{mib:.0f} MiB" if mib < 1024 else f"{mib / 1024:.1f} GiB"


def format_memory(used: float | None, total: float | None) -> str:
    """``28.5 / 45.0 GiB``, ``26 MiB / 45.0 GiB``, ``– / 45.0 GiB``."""
    if used is None and total is None:
        return "–"
    used_text, total_text = format_mib(used), format_mib(total)
    if used_text[-4:] == total_text[-4:] and used is not None:
        return f"{used_text[:-4]} / {total_text}"
    return f"{used_text} / {total_text}"


def exact_memory(used: float | None, total: float | None) -> str:
    """``29143 of 46068 MiB used (63%)`` for a tooltip."""
    if used is None and total is None:
        return "memory not reported"
    if total:
        share = "" if used is None else f" ({100 * used / total:.0f}%)"
        return f"{'?' if used is None else f'{used:.0f}'} of {total:.0f} MiB used{share}"
    return f"{used:.0f} MiB used (the total is not reported)"


def fraction(used: float | None, total: float | None) -> float | None:
    if used is None or not total:
        return None
    return max(0.0, min(1.0, used / total))


def age_text(seconds: float) -> str:
    """``just now``, ``2 s ago``, ``4 min 10 s ago``."""
    if seconds < 1:
        return "just now"
    return f"{int(seconds)} s ago" if seconds < 60 else f"{format_span(seconds)} ago"


def gpu_label(gpu: GpuState) -> str:
    """``GPU 3``, or its bus id when the host lost its index."""
    if gpu.index is not None:
        return f"GPU {gpu.index}"
    return f"the GPU at {gpu.bus_id}" if gpu.bus_id else "a GPU without an index"


def state_text(gpu: GpuState) -> tuple[str, QColor]:
    """The state cell: ``free``, ``busy``, ``lost: Unknown Error``, ``error: …`` and its colour."""
    if gpu.state != "ok":
        return (f"{gpu.state}: {gpu.message}" if gpu.message else gpu.state), LOST_COLOR
    return ("free", FREE_COLOR) if gpu.is_free() else (f"busy · {holders(gpu)}", BUSY_COLOR)


def state_tip(gpu: GpuState) -> str:
    reason = gpu.busy_reason()
    if reason is None:
        return f"{gpu_label(gpu)} is free: no compute process and under 1 GiB of memory used"
    if gpu.state == "lost":
        return f"{gpu_label(gpu)} {reason}. The host's driver cannot reach it; it needs a reboot of that host."
    if gpu.state == "error":
        return f"{gpu_label(gpu)} {reason}. Do not launch on it until it reports values again."
    return f"{gpu_label(gpu)} is busy: {reason}"


def owner(process: GpuProcess) -> str:
    return "an unknown user" if process.user == "?" else process.user


def holders(gpu: GpuState) -> str:
    """Who holds a GPU, short: ``alice, bob``, ``julia (owner unknown)``, ``free``, ``lost: Unknown Error``,
    ``6.3 GiB used, processes not visible``."""
    if gpu.state != "ok":
        return state_text(gpu)[0]
    if gpu.processes:
        names: list[str] = []
        for process in gpu.processes:
            name = process.user if process.user != "?" else f"{short_command(process.command)} (owner unknown)"
            if name not in names:
                names.append(name)
        return ", ".join(names)
    if gpu.is_free():
        return "free"
    unseen = "processes not visible" if gpu.processes is None else "by no listed process"
    return f"{format_mib(gpu.mem_used_mib)} used, {unseen}"


def short_command(command: str) -> str:
    """The program's name of a command line: ``python3.8``, ``julia``, ``Xorg``."""
    words = command.split()
    return words[0].rsplit("/", 1)[-1] if words else "?"


def one_line(text: str) -> str:
    """A command line on one line (its newlines and runs of spaces as one space)."""
    return " ".join(text.split())


def mig_text(gpu: GpuState) -> str:
    if gpu.mig_mode is None:
        return "–"
    if gpu.mig_mode == "enabled":
        count = len(gpu.mig_devices)
        return f"on · {count} device{'s' if count != 1 else ''}"
    return "off" if gpu.mig_mode == "disabled" else gpu.mig_mode


def level_color(share: float | None, alpha: int = 150) -> QColor:
    """Green when light, amber when half used, red when nearly full."""
    share = share or 0.0
    color = QColor("#34a853" if share < 0.5 else "#fbbc04" if share < 0.85 else "#ea4335")
    color.setAlpha(alpha)
    return color


def cell(text: str = "", tip: str = "", align: Qt.AlignmentFlag | None = None) -> QTableWidgetItem:
    """A read-only table cell."""
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if tip:
        item.setToolTip(tip)
    if align is not None:
        item.setTextAlignment(align | Qt.AlignmentFlag.AlignVCenter)
    return item


def set_cell(item: QTableWidgetItem, text: str, tip: str | None = None, color: QColor | None = ...,
             bar: tuple[float, QColor] | None = ...) -> None:
    """Update a cell in place, touching only what changed (an unchanged text repaints nothing); ``color`` None:
    the table's own text colour (grey while stale), ``...``: left as it is."""
    if item.text() != text:
        item.setText(text)
    if tip is not None and item.toolTip() != tip:
        item.setToolTip(tip)
    if color is None:
        if item.data(Qt.ItemDataRole.ForegroundRole) is not None:
            item.setData(Qt.ItemDataRole.ForegroundRole, None)
    elif color is not ... and item.foreground().color() != color:
        item.setForeground(color)
    if bar is not ...:
        if item.data(BAR_ROLE) != bar:
            item.setData(BAR_ROLE, bar)


def selected_text(table: QTableWidget) -> str:
    """The selected rows as tab-separated lines of their cells' text."""
    rows = sorted({index.row() for index in table.selectedIndexes()})
    return "\n".join("\t".join(table.item(row, column).text() for column in range(table.columnCount()))
                     for row in rows)


def copyable(table: QTableWidget) -> None:
    """Ctrl+C and the right-click menu's Copy put the selected rows on the clipboard (a PID to kill, a command)."""
    action = QAction("Copy", table, shortcut=QKeySequence.StandardKey.Copy,
                     shortcutContext=Qt.ShortcutContext.WidgetWithChildrenShortcut,
                     toolTip="Copy the selected rows as tab-separated text")
    action.triggered.connect(lambda: QApplication.clipboard().setText(selected_text(table)))
    table.addAction(action)
    table.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)


class BarDelegate(QStyledItemDelegate):
    """Paints a cell's bar (``BAR_ROLE``: fraction and colour) behind its text: utilisation and memory cells."""

    def paint(self, painter: QPainter, option, index) -> None:
        bar = index.data(BAR_ROLE)
        if bar:
            share, color = bar
            rect = option.rect.adjusted(2, 3, -2, -3)
            painter.save()
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(0, 0, 0, 18))
            painter.drawRoundedRect(rect, 2, 2)
            if share > 0:
                painter.setBrush(color)
                painter.drawRoundedRect(QRect(rect.x(), rect.y(), max(2, round(rect.width() * share)),
                                              rect.height()), 2, 2)
            painter.restore()
        super().paint(painter, option, index)


class Meter(QWidget):
    """A one-line bar with its text over it, elided to its width; asks for no width (never widens a layout)."""

    def __init__(self, parent=None, tip: str = ""):
        super().__init__(parent)
        self.share: float | None = None
        self.text = ""
        self.color = level_color(0)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setToolTip(tip)

    def set(self, share: float | None, text: str, tip: str | None = None, color: QColor | None = None) -> None:
        color = color or level_color(share)
        if (share, text, color) != (self.share, self.text, self.color):
            self.share, self.text, self.color = share, text, color
            self.update()
        if tip is not None and tip != self.toolTip():
            self.setToolTip(tip)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(40, self.fontMetrics().height() + 4)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return self.sizeHint()

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        rect = self.rect().adjusted(0, 1, -1, -1)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(0, 0, 0, 22))
        painter.drawRoundedRect(rect, 3, 3)
        if self.share:
            painter.setBrush(self.color)
            painter.drawRoundedRect(QRect(rect.x(), rect.y(), max(2, round(rect.width() * self.share)),
                                          rect.height()), 3, 3)
        painter.setPen(self.palette().windowText().color())
        text = self.fontMetrics().elidedText(self.text, Qt.TextElideMode.ElideRight, rect.width() - 6)
        painter.drawText(rect.adjusted(3, 0, -3, 0), int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft),
                         text)
        painter.end()


class History:
    """The last ``samples`` utilisation values of each GPU in arrays allocated once (a ring written twice, so
    the newest ``count`` values are always one contiguous view: no copy, no allocation per sample)."""

    def __init__(self, gpus: int, samples: int = HISTORY_SAMPLES):
        self.samples = samples
        self.t = np.zeros(2 * samples)
        self.y = np.full((gpus, 2 * samples), np.nan)
        self.next = 0
        self.count = 0

    @property
    def gpus(self) -> int:
        return self.y.shape[0]

    def add(self, t: float, values) -> None:
        """One sample: the time and each GPU's utilisation (None: not reported)."""
        i, j = self.next, self.next + self.samples
        self.t[i] = self.t[j] = t
        for row, value in enumerate(values):
            self.y[row, i] = self.y[row, j] = np.nan if value is None else value
        self.next = (self.next + 1) % self.samples
        self.count = min(self.samples, self.count + 1)

    def window(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, values per GPU) of the kept samples, oldest first: views into the arrays."""
        start = self.next + self.samples - self.count
        return self.t[start:start + self.count], self.y[:, start:start + self.count]
