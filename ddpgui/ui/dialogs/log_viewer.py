"""Open logs: a run's full stdout and stderr, per node, searchable, following the run while it is live.

The store keeps the last 1 MiB of each stream per node (``RunStore.log_tail``); the viewer shows one stream at
a time and keeps at most :data:`MAX_CHARS` of each, so a long run's log stays fast.  The search highlights every
match (up to :data:`HIGHLIGHT_MAX`), steps through them forwards and backwards (Enter, Shift+Enter, F3,
Shift+F3), from the end back to the top, with or without matching case, and says where it is ("3 of 41").
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QFontDatabase, QKeySequence, QShortcut, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
)

from ddpgui.core.runs.loglines import host_text, log_text
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.runs.nodes import node_states
from ddpgui.core.runs.protocol import LOG_SPOOLS
from ddpgui.core.runs.traces import load_logs
from ddpgui.core.store import RunRecord, RunStore

from ..widgets.log_tail import read_inline

#: Characters kept per stream (the store keeps the last 1 MiB of each): beyond it the oldest lines go.
MAX_CHARS = 1 << 20
#: Matches highlighted at most (the count still counts them all).
HIGHLIGHT_MAX = 1000
#: Pause after the last key typed in the search box before every match is highlighted.
SEARCH_DELAY_MS = 150
MATCH_COLOR, CURRENT_COLOR = QColor("#fde68a"), QColor("#f59e0b")


@dataclass
class NodeLogs:
    """What one read brings: the run, its nodes' labels (node → "node 1 (hpc)"), one node's streams."""

    run: RunRecord
    labels: dict[int, str]
    node: int
    logs: dict[str, str]


def read_node_logs(store: RunStore, run_id: str, node: int) -> NodeLogs:
    """The run, its nodes and one node's stdout and stderr (a worker thread calls it)."""
    run = store.get_run(run_id)
    nodes = sorted(run.run_dirs) or [0]
    labels = {node: f"node {node} ({host_text(run)})" for node in nodes}
    if len(nodes) > 1:
        labels = {state.node: state.label for state in node_states(store, run)} or labels
    return NodeLogs(run, labels, node, load_logs(store, run_id, node))


def kept(text: str, limit: int = MAX_CHARS) -> str:
    """The newest ``limit`` characters of ``text``, from a line's start."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    newline = text.find("\n", cut)
    return text[newline + 1:] if 0 <= newline < len(text) - 1 else text[cut:]


class LogViewer(QDialog):
    """A run's logs: node and stream, the text, and a search bar."""

    def __init__(self, store: RunStore, run_id: str, read: Callable | None = None, parent=None):
        """``read(func, *args, on_return=..., on_error=...)`` runs the store reads off the GUI thread."""
        super().__init__(parent)
        self.setObjectName("log_viewer")
        self.setWindowTitle(f"Logs of {run_id}")
        self.store, self.run_id, self.read = store, run_id, read or read_inline
        self.texts: dict[tuple[int, str], str] = {}  # (node, stream) → its text, once read
        self.reading: set[int] = set()  # nodes being read
        self.resize(1000, 640)

        self.node_box = QComboBox(objectName="log_viewer_node", toolTip="Which node's logs")
        self.node_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.stream_box = QComboBox(objectName="log_viewer_stream", toolTip="Which stream: torchrun and the "
                                    "ranks write their warnings and tracebacks to stderr, the run's prints to stdout")
        for spool in LOG_SPOOLS:
            self.stream_box.addItem(spool.removesuffix(".log"), spool)
        self.stream_box.setCurrentIndex(max(0, self.stream_box.findText("stderr")))
        self.search = QLineEdit(objectName="log_viewer_search", placeholderText="Find in the log",
                                clearButtonEnabled=True)
        self.previous_button = QPushButton("Previous", objectName="log_viewer_previous",
                                           toolTip="The match before (Shift+Enter, Shift+F3)")
        self.next_button = QPushButton("Next", objectName="log_viewer_next", toolTip="The next match (Enter, F3)")
        for button in (self.previous_button, self.next_button):
            button.setAutoDefault(False)  # Enter in the search box is Next, not also the dialog's default button
        self.case = QCheckBox("Match case", objectName="log_viewer_case")
        self.matches = QLabel(objectName="log_viewer_matches")
        self.follow = QCheckBox("Follow", objectName="log_viewer_follow", checked=True,
                                toolTip="Keep the newest lines in view while the run writes them")
        self.text = QPlainTextEdit(objectName="log_viewer_text", readOnly=True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.status = QLabel(objectName="log_viewer_status")

        top = QHBoxLayout()
        for widget in (QLabel("Node"), self.node_box, QLabel("Stream"), self.stream_box):
            top.addWidget(widget)
        top.addStretch(1)
        top.addWidget(self.follow)
        find = QHBoxLayout()
        for widget in (self.search, self.previous_button, self.next_button, self.case, self.matches):
            find.addWidget(widget, 1 if widget is self.search else 0)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(find)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.status)

        self.search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self.search_timer.timeout.connect(self.highlight)
        self.search.textChanged.connect(lambda _: self.search_timer.start())
        self.search.returnPressed.connect(self.find_next)
        self.case.toggled.connect(lambda _: self.highlight())
        self.next_button.clicked.connect(self.find_next)
        self.previous_button.clicked.connect(self.find_previous)
        for keys, slot in (("F3", self.find_next), ("Shift+F3", self.find_previous),
                           ("Shift+Return", self.find_previous), ("Shift+Enter", self.find_previous),
                           (QKeySequence.StandardKey.Find, self.search.setFocus)):
            QShortcut(QKeySequence(keys), self, slot)
        self.node_box.currentIndexChanged.connect(lambda _: self.show_stream())
        self.stream_box.currentIndexChanged.connect(lambda _: self.show_stream())
        self._read_node(0)

    # ---- reading ---------------------------------------------------------------------------
    @property
    def node(self) -> int:
        return self.node_box.currentData() if self.node_box.count() else 0

    @property
    def stream(self) -> str:
        return self.stream_box.currentData()

    def _read_node(self, node: int) -> None:
        self.reading.add(node)
        self.status.setText(f"Reading the logs of node {node}…")

        def failed(exc: Exception) -> None:
            self.reading.discard(node)
            self.status.setText(f"Could not read the logs of node {node}: {exc}")

        self.read(read_node_logs, self.store, self.run_id, node, on_return=self._node_read, on_error=failed)

    def _node_read(self, read: NodeLogs) -> None:
        self.reading.discard(read.node)
        self.setWindowTitle(f"Logs of {read.run.name or read.run.id}")
        for spool in LOG_SPOOLS:
            key = (read.node, spool)
            stored = kept(read.logs.get(spool, ""))
            # lines that arrived live while it was read are in the store's tail too, unless they came after it
            live = self.texts.get(key, "")
            self.texts[key] = stored if not live or stored.endswith(live) else kept(stored + live)
        if self.node_box.count() == 0:
            self.node_box.blockSignals(True)
            for node, label in sorted(read.labels.items()):
                self.node_box.addItem(label, node)
            self.node_box.blockSignals(False)
            self.node_box.setEnabled(self.node_box.count() > 1)
            if not self.texts.get((0, self.stream)) and self.texts.get((0, "stdout.log")):
                self.stream_box.setCurrentIndex(self.stream_box.findData("stdout.log"))  # stderr has nothing
        self.status.setText("")
        if read.node == self.node:
            self.show_stream()

    def show_stream(self) -> None:
        """Show the chosen node's chosen stream (read first if need be)."""
        key = (self.node, self.stream)
        if key not in self.texts:
            self.text.clear()
            if self.node not in self.reading:
                self._read_node(self.node)
            return
        self._set_text(self.texts[key])

    def _set_text(self, text: str) -> None:
        self.text.setPlainText(text.removesuffix("\n"))
        self.status.setText("" if text else "(nothing written to this stream yet)")
        if self.follow.isChecked():
            self._scroll_to_end()
        self.highlight()

    def _scroll_to_end(self) -> None:
        bar = self.text.verticalScrollBar()
        bar.setValue(bar.maximum())

    # ---- live ------------------------------------------------------------------------------
    def on_update(self, update: RunUpdate) -> None:
        """New log lines of the run: kept for their stream, shown when it is the one in view."""
        if update.run_id != self.run_id:
            return
        for spool, data in update.logs.items():
            key = (update.node, spool)
            if key not in self.texts:
                if update.node in self.reading:  # the store's tail, read now, holds them or will be followed
                    self.texts[key] = log_text(data)
                continue
            new = log_text(data)
            text = self.texts[key] + new
            trimmed = len(text) > MAX_CHARS * 5 // 4  # trim now and then, not on every line
            self.texts[key] = kept(text) if trimmed else text
            if key != (self.node, self.stream):
                continue
            if trimmed:
                self._set_text(self.texts[key])
                continue
            self.status.setText("")
            self.text.appendPlainText(new.removesuffix("\n"))
            if self.follow.isChecked():
                self._scroll_to_end()
            if self.search.text():
                self.search_timer.start()

    # ---- search ----------------------------------------------------------------------------
    def _flags(self, backward: bool = False) -> QTextDocument.FindFlag:
        flags = QTextDocument.FindFlag(0)
        if self.case.isChecked():
            flags |= QTextDocument.FindFlag.FindCaseSensitively
        if backward:
            flags |= QTextDocument.FindFlag.FindBackward
        return flags

    def find_next(self) -> bool:
        return self._find(backward=False)

    def find_previous(self) -> bool:
        return self._find(backward=True)

    def _find(self, backward: bool) -> bool:
        """Select the next (or previous) match, going round from the end to the top; False when there is none."""
        needle = self.search.text()
        if not needle:
            return False
        self.follow.setChecked(False)  # the user is reading a place: new lines must not scroll it away
        found = self.text.find(needle, self._flags(backward))
        if not found:
            self.text.moveCursor(QTextCursor.MoveOperation.End if backward else QTextCursor.MoveOperation.Start)
            found = self.text.find(needle, self._flags(backward))
        self.highlight()
        return found

    def match_cursors(self) -> list[QTextCursor]:
        """Where the search text occurs, in order (at most HIGHLIGHT_MAX)."""
        needle, document = self.search.text(), self.text.document()
        found: list[QTextCursor] = []
        if not needle:
            return found
        cursor = QTextCursor(document)
        while len(found) < HIGHLIGHT_MAX:
            cursor = document.find(needle, cursor, self._flags())
            if cursor.isNull():
                break
            found.append(QTextCursor(cursor))
        return found

    def match_count(self) -> int:
        """Every match in the text shown (not only those highlighted)."""
        needle, text = self.search.text(), self.texts.get((self.node, self.stream), "")
        if not needle:
            return 0
        return text.count(needle) if self.case.isChecked() else text.casefold().count(needle.casefold())

    def highlight(self) -> None:
        """Mark every match, the current one (the text's selection) stronger, and say where it is."""
        cursors = self.match_cursors()
        current = self.text.textCursor()
        selections, index = [], None
        for i, cursor in enumerate(cursors):
            selection = QTextEdit.ExtraSelection()
            selection.cursor = cursor
            is_current = current.hasSelection() and (cursor.selectionStart(), cursor.selectionEnd()) == (
                current.selectionStart(), current.selectionEnd())
            if is_current:
                index = i
            selection.format.setBackground(CURRENT_COLOR if is_current else MATCH_COLOR)
            selections.append(selection)
        self.text.setExtraSelections(selections)
        total = max(self.match_count(), len(cursors))
        if not self.search.text():
            self.matches.setText("")
        elif not cursors:
            self.matches.setText("no match")
        elif index is None:
            self.matches.setText(f"{total} match{'es' if total != 1 else ''}")
        else:
            self.matches.setText(f"{index + 1} of {total}")
