"""The dashboard's log tail: the primary run's stdout/stderr tail with the run's own lines among them.

The run's own lines (:mod:`ddpgui.core.runs.loglines`: started, compiled, warm-up done, the end and its summary)
come from its event records: read back with the stored tail (the run's life before it, its end after it), and
as they arrive live, in arrival order with the log's lines.  A multi-node run shows one node's tail at a time
(node 0 first); the run's own lines are node 0's, where rank 0 records the run's phases.
"""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont, QSyntaxHighlighter, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from ddpgui.core.runs.loglines import MARK, StoredLines, event_lines, log_text, run_end_lines, stored_lines
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.runs.traces import load_logs
from remote_runner.spools import EVENTS
from remote_runner.status import FINAL_STATES

from ..plots.traces import RunTrace

#: Lines the tail keeps (the log viewer has the whole stored log).
LOG_LINES = 2000


def read_inline(func: Callable, *args: object, on_return: Callable, on_error: Callable | None = None) -> None:
    """A store read run at once (no worker pool): ``on_return(func(*args))``, or ``on_error(exc)`` when given."""
    try:
        result = func(*args)
    except Exception as exc:
        if on_error is None:
            raise
        on_error(exc)
        return
    on_return(result)


class RunLinesHighlighter(QSyntaxHighlighter):
    """The run's own lines in bold, in the palette's link colour, so they stand out among torchrun's."""

    def __init__(self, document, color):
        super().__init__(document)
        self.format = QTextCharFormat()
        self.format.setFontWeight(QFont.Weight.Bold)
        self.format.setForeground(color)

    def highlightBlock(self, text: str) -> None:  # noqa: N802 (Qt's name)
        if text.startswith(MARK):
            self.setFormat(0, len(text), self.format)


class TailText(QPlainTextEdit):
    """The tail's text: its first show scrolls down to the last line, never sideways to where that line ends
    (QPlainTextEdit shows its cursor when first shown, and the cursor follows the appended text to its end)."""

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        left = self.horizontalScrollBar().value()
        super().showEvent(event)
        self.horizontalScrollBar().setValue(left)


class LogTail(QWidget):
    """The tail of one run's logs, a search box, (multi-node) the node selector and Open logs."""

    open_requested = Signal()

    def __init__(self, store, read: Callable, parent=None):
        """``read(func, *args, on_return=..., on_error=...)`` runs a store read off the GUI thread."""
        super().__init__(parent)
        self.store = store
        self.read = read
        self.trace: RunTrace | None = None
        self.generation = 0  # bumped whenever the text is started again: late reads for an older text are dropped
        self.end_shown = False  # the run's end lines are in the text
        self.shown_events: set[int] = set()  # seq of node 0's events whose lines are in the text
        self.run = None  # the shown run's record (a live "started" line names its host and settings)

        self.log = TailText(objectName="log_tail", readOnly=True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.find_box = QLineEdit(objectName="log_find", placeholderText="Search the log", clearButtonEnabled=True)
        self.find_box.returnPressed.connect(self.find)
        self.node_box = QComboBox(objectName="log_node", toolTip="Whose log to show", visible=False)
        self.node_box.currentIndexChanged.connect(self._show_node)
        self.open_button = QPushButton("Open logs…", objectName="open_logs",
                                       toolTip="The run's whole stdout and stderr, each node's, with search")
        self.open_button.clicked.connect(self.open_requested)
        self.highlighter = RunLinesHighlighter(self.log.document(), self.palette().link().color())
        row = QHBoxLayout()
        row.addWidget(self.find_box, 1)
        row.addWidget(self.node_box)
        row.addWidget(self.open_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.log)

    # ---- what is shown ---------------------------------------------------------------------
    def show_trace(self, trace: RunTrace | None) -> None:
        """Start the text again for ``trace`` (the primary run; None: nothing): its stored tail and lines."""
        self.trace = trace
        self._restart()
        if trace is not None and trace.loaded:
            self._show_stored(trace)
        self.fill_nodes()

    def _restart(self) -> None:
        self.generation += 1
        self.end_shown = False
        self.shown_events = set()
        self.log.clear()

    def _show_stored(self, trace: RunTrace) -> None:
        for text in trace.logs:
            self.log.appendPlainText(text)
        if trace.log_node != 0:
            return
        generation = self.generation

        def done(lines: StoredLines) -> None:
            if generation != self.generation:
                return
            self.run = lines.run
            before = lines.before(self.shown_events)  # but those shown live meanwhile
            self.shown_events.update(e["seq"] for e in lines.events if e.get("seq", -1) >= 0)
            if before:  # the run's life goes before its stored tail: its lines have no times
                empty = self.log.document().isEmpty()
                cursor = QTextCursor(self.log.document())
                cursor.movePosition(QTextCursor.MoveOperation.Start)
                cursor.insertText("\n".join(before) + ("" if empty else "\n"))
            if lines.after:
                self._append_end(lines.after)

        self.read(stored_lines, self.store, trace.run_id, on_return=done, on_error=self._read_failed)

    def _append_end(self, lines: list[str]) -> None:
        if not self.end_shown:
            self.end_shown = True
            for line in lines:
                self.log.appendPlainText(line)

    def _read_failed(self, exc: Exception) -> None:
        self.log.appendPlainText(f"(could not read the run's events: {exc})")

    def fill_nodes(self) -> None:
        """The node selector: shown for a multi-node run, on the node shown."""
        trace = self.trace
        nodes = trace.nodes if trace is not None and trace.multinode else []
        self.node_box.blockSignals(True)
        self.node_box.clear()
        for state in nodes:
            self.node_box.addItem(f"log of {state.label}", state.node)
        if nodes:
            self.node_box.setCurrentIndex(max(0, self.node_box.findData(trace.log_node)))
        self.node_box.blockSignals(False)
        self.node_box.setVisible(bool(nodes))

    def node_labels(self) -> list[str]:
        return [self.node_box.itemText(i).removeprefix("log of ") for i in range(self.node_box.count())]

    def _show_node(self, index: int) -> None:
        """Show another node's log tail (read off the GUI thread); its live lines follow."""
        trace, node = self.trace, self.node_box.itemData(index)
        if trace is None or node is None or node == trace.log_node:
            return
        trace.log_node, trace.logs, trace.logs_loading = node, [], True
        self._restart()

        def done(logs: dict[str, bytes]) -> None:
            if self.trace is trace and trace.log_node == node:
                trace.set_logs(logs)
                trace.logs_loading = False
                self._restart()
                self._show_stored(trace)
                self.run_changed()

        def failed(exc: Exception) -> None:
            trace.logs_loading = False
            self.log.appendPlainText(f"(could not read the log of node {node}: {exc})")

        self.read(load_logs, self.store, trace.run_id, node, on_return=done, on_error=failed)

    # ---- live ------------------------------------------------------------------------------
    def on_update(self, update: RunUpdate) -> None:
        """A live update of the run shown: its new events' lines, then its log lines, in arrival order."""
        trace = self.trace
        if trace is None or update.run_id != trace.run_id or update.node != trace.log_node or trace.logs_loading:
            return
        if update.run is not None:
            self.run = update.run
        if update.node == 0:
            for event in update.records.get(EVENTS, ()):
                if event.get("seq", -1) in self.shown_events:
                    continue
                self.shown_events.add(event.get("seq", -1))
                if event.get("event") == "started" and (self.run is None or self.run.id != trace.run_id):
                    # the stored lines' read (which brings the record) has not returned yet: one row, now
                    self.run = self.store.get_run(trace.run_id)
                for line in event_lines(event, self.run if self.run is not None and
                                        self.run.id == trace.run_id else None):
                    self.log.appendPlainText(line)
        for data in update.logs.values():
            self.log.appendPlainText(log_text(data).rstrip("\n"))

    def run_changed(self) -> None:
        """The run's state (or a node's) changed: once it has ended everywhere, its end lines (read off the GUI
        thread: the summary is the store's)."""
        trace = self.trace
        if trace is None or self.end_shown or trace.log_node != 0 or trace.live.state not in FINAL_STATES:
            return
        if trace.multinode and not all(n.final for n in trace.nodes):
            return
        generation = self.generation

        def done(lines: list[str]) -> None:
            if generation == self.generation:
                self._append_end(lines)

        self.read(run_end_lines, self.store, trace.run_id, on_return=done, on_error=lambda exc: None)

    def find(self) -> bool:
        """The next place the search box's text occurs (from the top again after the last)."""
        text = self.find_box.text()
        if not text:
            return False
        if self.log.find(text):
            return True
        self.log.moveCursor(QTextCursor.MoveOperation.Start)
        return self.log.find(text)
