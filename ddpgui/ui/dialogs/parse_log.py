"""Try the reading of a script's metrics before a launch: the series a chosen log yields, as a run would read them.

The launch form's "Try reading a log…" picks a log file (the script's printed output, a TensorBoard event file, a
CSV log) or a folder of TensorBoard/CSV logs; :func:`try_reading` opens this dialog at once and reads the log on a
worker (:func:`~ddpgui.core.runs.parselog.parse_log`, the host's own readers, with the form's metric regex and loss
series), with a progress bar and Cancel.  The dialog then shows what ``ddpgui parse-log`` prints: each series with
its points, first and last values and source (the loss first, marked), what was skipped, the script's summary,
and for a log without a metric, why and what to try.  "Use as the loss series" puts the selected series into the
form.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from ddpgui.core.runs.parselog import ParseResult, parse_log
from ddpgui.core.runs.series import SeriesInfo, point_text, source_text, summary_text

from ..texts import as_rich
from ..widgets.dashboard_header import STALL_COLOR, ElidedLabel, never_widening

COLUMNS = ("Series", "Points", "First", "Last", "Source")
WHAT = {"folder": "log files under", "tensorboard": "TensorBoard event file", "csv": "CSV log", "file": "printed output in"}


class ReadingCancelled(Exception):
    """The user closed the dialog while the log was read."""


def for_the_form(text: str) -> str:
    """The readers' advice in the launch form's words (its Metric regex field, not the CLI's option)."""
    text = re.sub(r"e\.g\. --metric-regex ", "e.g. ", text)
    return re.sub(r"(?:give )?--metric-regex\b", "fill in Metric regex", text)


def series_name(info: SeriesInfo) -> str:
    return f"{info.name} (from {info.from_})" if info.is_loss and info.from_ and info.from_ != "loss" else info.name


class ParseLogDialog(QDialog):
    """A log being read, then what was found in it (:meth:`show_result`) or why it could not be read."""

    #: A series the user picked as the loss ("Use as the loss series"), by the name the log gave it.
    loss_chosen = Signal(str)
    _progress = Signal(int, int)

    def __init__(self, path: str, parent=None):
        super().__init__(parent, objectName="parse_log_dialog")
        self.path = path
        self.result: ParseResult | None = None
        self.cancelled = threading.Event()
        self.setWindowTitle(f"Reading {Path(path).name or path}")
        self.heading = ElidedLabel(f"Reading {path}…", objectName="parse_log_heading")
        self.progress = QProgressBar(objectName="parse_log_progress", textVisible=False)
        self.progress.setRange(0, 0)
        self.table = QTableWidget(0, len(COLUMNS), objectName="parse_log_table", visible=False)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.loss_line = never_widening(QLabel(objectName="parse_log_loss", wordWrap=True, visible=False))
        self.notes = never_widening(QLabel(objectName="parse_log_notes", wordWrap=True, visible=False))
        self.problem = never_widening(QLabel(objectName="parse_log_problem", wordWrap=True, visible=False))
        self.problem.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        palette = QPalette(self.problem.palette())
        palette.setColor(QPalette.ColorRole.WindowText, QColor(STALL_COLOR))
        self.problem.setPalette(palette)
        self.last_caption = QLabel("The last lines it read:", visible=False)
        self.last_lines = QPlainTextEdit(objectName="parse_log_last_lines", readOnly=True, visible=False)
        self.last_lines.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.last_lines.setFont(QFont("monospace"))
        self.last_lines.setMaximumHeight(160)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.rejected.connect(self.reject)
        self.use_button = QPushButton("Use as the loss series", objectName="parse_log_use", enabled=False,
                                      toolTip="Read the selected series as the run's loss (the launch form's "
                                              "Loss series)")
        self.use_button.clicked.connect(self._use)
        self.table.itemSelectionChanged.connect(lambda: self.use_button.setEnabled(self._selected() is not None))
        layout = QVBoxLayout(self)
        for widget in (self.heading, self.progress, self.loss_line, self.table, self.notes, self.problem,
                       self.last_caption, self.last_lines):
            layout.addWidget(widget, 1 if widget in (self.table, self.last_lines) else 0)
        layout.addStretch(0)  # what is left when neither the table nor the last lines are shown
        layout.addWidget(self.buttons)
        self._progress.connect(self._show_progress, Qt.ConnectionType.QueuedConnection)
        self.rejected.connect(self.cancelled.set)
        self.resize(760, 420)

    # ---- while reading ---------------------------------------------------------------------
    def report_progress(self, done: int, total: int) -> None:
        """Thread-safe: the reading's progress (bytes or files); raises ReadingCancelled once the dialog closed."""
        if self.cancelled.is_set():
            raise ReadingCancelled("cancelled")
        self._progress.emit(int(done), int(total))

    def _show_progress(self, done: int, total: int) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(done)

    def _finish(self) -> None:
        """Reading is over: Cancel gives way to Use as the loss series and Close."""
        if not self.progress.isVisible():
            return
        self.progress.setVisible(False)
        self.buttons.clear()
        self.buttons.addButton(self.use_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Close)

    # ---- what was found --------------------------------------------------------------------
    def show_result(self, result: ParseResult) -> None:
        self.result = result
        self._finish()
        self.setWindowTitle(f"Read {Path(result.path).name or result.path}")
        records = f"{result.records} record{'s' if result.records != 1 else ''}, {len(result.series)} series"
        self.heading.setText(f"{WHAT.get(result.kind, 'read')} {result.path}: {records}")
        self.table.setRowCount(len(result.series))
        for row, info in enumerate(result.series):
            cells = (series_name(info), str(info.points), point_text(info.first), point_text(info.last),
                     source_text(info) + (f" in {info.file}" if info.file else ""))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                item.setData(Qt.ItemDataRole.UserRole, info.from_ or info.name)
                if column == 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if info.is_loss:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(row, column, item)
        self.table.setVisible(bool(result.series))
        self.use_button.setVisible(bool(result.series))
        if result.loss_from is not None:
            how = "as you chose" if result.loss_series else "the first loss-like series, as a run would take it"
            self.loss_line.setText(f"The loss: <b>{as_rich(result.loss_from)}</b> ({how}). Select another "
                                   "series and press Use as the loss series to read it as the loss.")
        elif result.series:
            self.loss_line.setText("No series is the loss: select one and press Use as the loss series.")
        self.loss_line.setVisible(bool(result.series))
        notes = [f"read {f['path']}" for f in result.files if f.get("reading")]
        if result.summary:
            notes.append(f"the script's summary: {summary_text(result.summary)}")
        notes += [f"note: {note}" for note in (result.notes if result.series else ())]
        notes += [f"skipped: {skipped}" for skipped in result.skipped]
        self.notes.setText("<br>".join(as_rich(n) for n in notes))
        self.notes.setVisible(bool(notes))
        report = result.no_metrics
        if report is not None:
            self.show_problem(report["message"], for_the_form(report.get("hint") or ""))
            lines = report.get("last_lines") or []
            self.last_lines.setPlainText("\n".join(lines[-10:]))
            self.last_lines.setVisible(bool(lines))
            self.last_caption.setVisible(bool(lines))

    def show_problem(self, message: str, hint: str = "") -> None:
        """Why nothing (or not everything) could be read, and what to try."""
        self._finish()
        self.problem.setText(f"<b>{as_rich(message)}</b>" + (f"<br>Hint: {as_rich(hint)}" if hint else ""))
        self.problem.setVisible(True)

    def _selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) if rows else None

    def _use(self) -> None:
        name = self._selected()
        if name is not None:
            self.loss_chosen.emit(name)
            self.accept()


def try_reading(parent, start: Callable, path: str, metric_regex: str = "", loss_series: str = "") -> ParseLogDialog:
    """Open the dialog on ``path`` and read it on a worker (``start``: a WorkerPool's); returns the dialog."""
    dialog = ParseLogDialog(path, parent)

    def failed(exc: Exception) -> None:
        if isinstance(exc, ReadingCancelled):
            return
        if isinstance(exc, re.error):
            dialog.show_problem(f"Metric regex is not a valid regular expression: {exc}",
                                r"name the groups, e.g. step (?P<step>\d+).*loss (?P<loss>[0-9.e+-]+)")
        elif isinstance(exc, OSError):
            dialog.show_problem(f"cannot read {path}: {exc.strerror or exc}",
                                "pick a log file (the script's printed output, an event file, a CSV log) or a folder")
        else:
            dialog.show_problem(f"could not read {path}: {exc}")

    start(parse_log, path, metric_regex.strip() or None, loss_series.strip() or None, dialog.report_progress,
          on_return=lambda result: dialog.isVisible() and dialog.show_result(result), on_error=failed)
    dialog.open()
    return dialog

