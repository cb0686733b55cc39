"""The runs table: a model over the run store, sortable and filterable; state survives restarts.

State, Step and Throughput follow the name and stay in view however narrow the table is: the Name column takes
what is left (at least NAME_MIN), a long name elided where names differ least
(:func:`~ddpgui.ui.widgets.name_fit.fitted_name`: a sweep's shared name first), the full name as the cell's tooltip."""
from __future__ import annotations

import time

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QAction, QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QStyledItemDelegate,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.hosts.profiles import host_display_name
from ddpgui.core.runs.live import format_duration, format_rate, record_elapsed_s
from ddpgui.core.store import RunRecord, RunStore
from remote_runner.status import FINAL_STATES

from .name_fit import fitted_name
from .slurm_view import host_cell, state_cell

COLUMNS = ("Name", "State", "Step", "Throughput", "Started", "Host", "Workload", "Compile", "Precision", "Processes",
           "Peak mem", "Duration", "Cost")
#: The columns beside the name that stay in view however narrow the table is, and the name's least width.
ALWAYS_SHOWN, NAME_MIN = ("State", "Step", "Throughput"), 120
#: A cell's text padding (Qt's margins and a little air), in pixels.
PADDING = 24
#: A running run the stall watch flags: its State cell reads this, in this colour, the reason as its tooltip.
STALLED, STALLED_COLOR = "stalled?", "#e37400"
STATE_COLORS = {"queued": "#8e6bbf", "running": "#34a853", "starting": "#4c8df6", "launching": "#4c8df6", "finished": "#5f6368",
                "failed": "#d93025", "stopped": "#f29900"}


def uses_gpus(run: RunRecord) -> bool | None:
    """Whether the run's processes drive GPUs (its device, else the GPUs its host had); None when unknown."""
    cfg, env = run.config or {}, run.environment or {}
    if cfg.get("device") in ("cuda", "xpu", "mps") or cfg.get("backend") == "nccl":
        return True
    if cfg.get("device") == "cpu" or cfg.get("backend") == "gloo":
        return False
    return None if env.get("gpu_count") is None else env["gpu_count"] > 0


def processes_cell(run: RunRecord) -> str:
    """``2 × GPU``, ``2 × CPU``, or just the count while it is unknown what the processes drive; ``2 × GPU 0,3``
    for a run given those GPUs (``--gpus``, the launch form's GPU row, a parallel sweep's placement)."""
    cfg = run.config or {}
    n = int(cfg.get("nproc_per_node", 1)) * int(cfg.get("nnodes", 1))
    if cfg.get("gpus"):
        return f"{n} × GPU {','.join(map(str, cfg['gpus']))}"
    gpus = uses_gpus(run)
    return str(n) if gpus is None else f"{n} × {'GPU' if gpus else 'CPU'}"


def started_cell(run: RunRecord) -> str:
    """When the run started (created, before it starts): tells apart two runs of the same name."""
    when = run.started_at or run.created_at
    if not when:
        return ""
    today = time.localtime(when)[:3] == time.localtime()[:3]
    return time.strftime("%H:%M:%S" if today else "%b %d %H:%M", time.localtime(when))


class NameDelegate(QStyledItemDelegate):
    """Paints the Name cell as :func:`fitted_name` cuts it to the cell's width."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 (Qt's name)
        super().initStyleOption(option, index)
        option.text = fitted_name(option.text, option.fontMetrics, option.rect.width() - PADDING // 2)


def _duration(run: RunRecord) -> float | None:
    """The run's elapsed time as every view shows it (:func:`~ddpgui.core.runs.live.run_elapsed_s`)."""
    return record_elapsed_s(run)


class RunsModel(QAbstractTableModel):
    """Rows are :class:`RunRecord`s, newest first; :meth:`update_run` changes one row in place."""

    def __init__(self, store: RunStore, prices: dict[str, float] | None = None):
        super().__init__()
        self.store = store
        self.prices = prices or {}
        self.runs: list[RunRecord] = []
        self.stalls: dict = {}  # run id → StallDecision (set_stalls)

    def reload(self) -> None:
        self.beginResetModel()
        self.runs = self.store.list_runs()
        self.endResetModel()

    def update_run(self, run: RunRecord) -> None:
        for row, old in enumerate(self.runs):
            if old.id == run.id:
                self.runs[row] = run
                self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))
                return
        self.beginInsertRows(QModelIndex(), 0, 0)
        self.runs.insert(0, run)
        self.endInsertRows()

    def remove_run(self, run_id: str) -> None:
        for row, run in enumerate(self.runs):
            if run.id == run_id:
                self.beginRemoveRows(QModelIndex(), row, row)
                del self.runs[row]
                self.endRemoveRows()
                return

    def set_stalls(self, decisions: dict) -> None:
        """The stall watch's decisions (run id → StallDecision): a running run flagged stalled reads "stalled?"
        in its State cell, the reason as its tooltip; its row is repainted when that changes."""
        old, self.stalls = self.stalls, dict(decisions)
        column = COLUMNS.index("State")
        for row, run in enumerate(self.runs):
            before, now = old.get(run.id), self.stalls.get(run.id)
            if (before is not None and before.stalled) or (now is not None and now.stalled):
                self.dataChanged.emit(self.index(row, column), self.index(row, column))

    def stall_of(self, run: RunRecord):
        """The run's stall decision when it is running and flagged "stalled?", else None."""
        decision = self.stalls.get(run.id)
        return decision if decision is not None and decision.stalled and run.state == "running" else None

    def run_at(self, row: int) -> RunRecord:
        return self.runs[row]

    def row_of(self, run_id: str) -> int:
        return next((i for i, r in enumerate(self.runs) if r.id == run_id), -1)

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008 (Qt's own signature)
        return 0 if parent.isValid() else len(self.runs)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008 (Qt's own signature)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def cell(self, run: RunRecord, column: str):
        """(display text, sort key) of one cell."""
        cfg, summary = run.config or {}, run.summary or {}
        if column == "Name":
            return run.name or run.id, (run.name or run.id).lower()
        if column == "Host":
            text = host_cell(run)  # a multi-node run's nodes (node 0 first), or a cluster's job
            text = " + ".join(host_display_name(h) for h in text.split(" + "))
            return text, text.lower()
        if column == "Workload":
            what = cfg.get("workload", "") if cfg.get("mode") != "script" else (cfg.get("script") or {}).get("entry", "script")
            return what, what
        if column in ("Compile", "Precision"):  # a script's own business: the config's defaults would mislead
            value = "" if cfg.get("mode") == "script" else cfg.get(column.lower(), "")
            return value, value
        if column == "Processes":
            return processes_cell(run), int(cfg.get("nproc_per_node", 1)) * int(cfg.get("nnodes", 1))
        if column == "Started":
            return started_cell(run), run.started_at or run.created_at or 0.0
        if column == "State":  # a queued Slurm job: with its reason (the whole message is the tooltip)
            return (STALLED if self.stall_of(run) else state_cell(run)), run.state
        if column == "Step":
            step = run.last_step or 0
            return (f"{step}/{run.total_steps}" if run.total_steps else str(step)), step
        if column == "Throughput":
            value = summary.get("steady_samples_per_s")
            return ("" if value is None else format_rate(value, "samples/s")), value or 0.0
        if column == "Peak mem":
            value = summary.get("mem_peak_gib")
            return ("" if value is None else f"{value:.2f} GiB"), value or 0.0
        if column == "Duration":
            value = _duration(run)
            return ("" if value is None else format_duration(value)), value or 0.0
        if column == "Cost":
            price, value = sum(self.prices.get(h) or 0.0 for h in run.hosts), _duration(run)  # every node is paid
            if not price or value is None:
                return "", 0.0
            return f"{price * value / 3600:.2f}", price * value / 3600
        return "", ""

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        run, column = self.runs[index.row()], COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return self.cell(run, column)[0]
        if role == Qt.ItemDataRole.UserRole:
            return self.cell(run, column)[1]
        if role == Qt.ItemDataRole.ForegroundRole and column == "State":
            return QColor(STALLED_COLOR if self.stall_of(run) else STATE_COLORS.get(run.state, "#5f6368"))
        if role == Qt.ItemDataRole.ToolTipRole:
            stall = self.stall_of(run) if column == "State" else None
            if stall is not None:
                return f"{run.id}\nstalled? {stall.reason}"
            tip = (f"{run.name}\n" if column == "Name" and run.name else "") + f"{run.id}\n{run.state}"
            if column == "Processes" and (run.config or {}).get("gpus"):
                chosen = ",".join(map(str, run.config["gpus"]))
                tip += f"\non GPUs {chosen} of each host (CUDA_VISIBLE_DEVICES={chosen}, nvidia-smi's numbering)"
            if run.message:
                tip += f": {run.message}"
            if run.hint:
                tip += f"\nHint: {run.hint}"
            return tip
        return None


class RunsFilter(QSortFilterProxyModel):
    def __init__(self, source: RunsModel):
        super().__init__()
        self.setSourceModel(source)
        self.setSortRole(Qt.ItemDataRole.UserRole)
        self.text, self.state = "", ""

    def set_filter(self, text: str, state: str) -> None:
        self.text, self.state = text.lower().strip(), state
        self.invalidateFilter()

    def filterAcceptsRow(self, row: int, parent) -> bool:
        run = self.sourceModel().run_at(row)
        if self.state and run.state != self.state:
            return False
        if not self.text:
            return True
        hosts = [host_display_name(h) for h in run.hosts]  # as the Host column shows them
        haystack = " ".join([run.name, run.id, " ".join(run.tags), " ".join(run.hosts), " ".join(hosts),
                             str((run.config or {}).get("workload", ""))]).lower()
        return all(word in haystack for word in self.text.split())


class RunsTable(QWidget):
    """The table with its filter bar; actions are signals the main window carries out."""

    run_selected = Signal(str)  # the current run changed (a click, the arrows): the tab stays as it is
    run_opened = Signal(str)  # double-click or Enter on a run: open it on the dashboard
    runs_selected = Signal(list)  # the selected run ids, the current one first (the dashboard overlays them)
    action_requested = Signal(str, list)  # action name, run ids

    ACTIONS = (("stop", "Stop"), ("rerun", "Rerun"), ("duplicate", "Duplicate and edit"),
               ("logs", "Open logs"), ("pull", "Download outputs…"), ("compare", "Add to comparison"),
               ("export", "Export CSV…"),
               ("delete", "Delete…"))

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.model = RunsModel(store)
        self.proxy = RunsFilter(self.model)
        self.view = QTableView(objectName="runs_view")
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().hide()
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.view.setItemDelegateForColumn(COLUMNS.index("Name"), NameDelegate(self.view))
        self.name_needed = NAME_MIN  # the longest name's width seen (the Name column's width when there is room)
        self.view.viewport().installEventFilter(self)  # a resized table gives its name the width left
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._menu)
        self.view.selectionModel().currentRowChanged.connect(self._current)
        self.view.selectionModel().selectionChanged.connect(self._selection)
        self.view.doubleClicked.connect(self._open)
        for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            QShortcut(QKeySequence(key), self.view, self._open, context=Qt.ShortcutContext.WidgetShortcut,
                      whatsThis="Open the selected run on the dashboard (Runs tab; a click only selects)")
        self.find = QLineEdit(objectName="runs_find", placeholderText="Filter runs by name, tag, host… (Ctrl+F)",
                              clearButtonEnabled=True)
        self.state = QComboBox(objectName="runs_state")
        self.state.addItems(["all states", "queued", "running", "starting", "finished", "failed", "stopped"])
        self.find.textChanged.connect(self._filter)
        self.state.currentTextChanged.connect(self._filter)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Runs", objectName="panel_title"))
        bar.addWidget(self.find, 1)
        bar.addWidget(self.state)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.view)
        self.model.reload()
        self.view.resizeColumnsToContents()
        self.model.rowsInserted.connect(lambda _parent, first, last: self._fit(range(first, last + 1)))
        self.model.modelReset.connect(lambda: self._fit(range(min(self.model.rowCount(), 200))))
        self.model.dataChanged.connect(lambda top, bottom, *_: self._fit(range(top.row(), bottom.row() + 1)))
        self._fit(range(min(self.model.rowCount(), 200)))

    def set_stalls(self, decisions: dict) -> None:
        """See :meth:`RunsModel.set_stalls` (the main window calls this after each stall check)."""
        self.model.set_stalls(decisions)

    def _fit(self, rows) -> None:
        """Widen the State, Step and the summary's columns to a longer text of ``rows`` (model rows) than they
        show, e.g. a stopped run's throughput filled in at its end (never narrower: a width the user set stays);
        the Name column to its longest name, as far as State, Step and Throughput stay in view."""
        metrics = self.view.fontMetrics()
        for column in map(COLUMNS.index, ("Name", "State", "Step", "Throughput", "Peak mem", "Duration")):
            texts = [self.model.data(self.model.index(row, column)) or "" for row in rows]
            needed = max((metrics.horizontalAdvance(t) for t in texts), default=0) + PADDING
            if column == 0:
                self.name_needed = max(self.name_needed, needed)
            elif needed > self.view.columnWidth(column):
                self.view.setColumnWidth(column, needed)
        self._fit_name()

    def _fit_name(self) -> None:
        room = self.view.viewport().width() - sum(self.view.columnWidth(COLUMNS.index(c)) for c in ALWAYS_SHOWN)
        self.view.setColumnWidth(0, max(NAME_MIN, min(self.name_needed, room)))

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Resize:
            self._fit_name()
        return super().eventFilter(watched, event)

    def _filter(self) -> None:
        state = self.state.currentText()
        self.proxy.set_filter(self.find.text(), "" if state == "all states" else state)

    def selected_ids(self) -> list[str]:
        rows = {self.proxy.mapToSource(i).row() for i in self.view.selectionModel().selectedRows()}
        return [self.model.run_at(r).id for r in sorted(rows)]

    def select_run(self, run_id: str) -> None:
        """This run alone selected and current, whatever keys are held (QTableView.selectRow would add to the
        selection while Ctrl is down, or after a Ctrl-click Qt still remembers)."""
        self.select_runs([run_id])

    def select_runs(self, run_ids: list[str]) -> None:
        """Select these runs (the first one current); ids not in the table are left out."""
        rows = [self.model.row_of(r) for r in run_ids]
        indexes = [self.proxy.mapFromSource(self.model.index(row, 0)) for row in rows if row >= 0]
        indexes = [i for i in indexes if i.isValid()]
        if not indexes:
            return
        selection = self.view.selectionModel()
        flags = QItemSelectionModel.SelectionFlag
        selection.setCurrentIndex(indexes[0], flags.ClearAndSelect | flags.Rows)
        for index in indexes[1:]:
            selection.select(index, flags.Select | flags.Rows)

    def _current(self, current, _previous) -> None:
        if current.isValid():
            self.run_selected.emit(self.model.run_at(self.proxy.mapToSource(current).row()).id)

    def _open(self, index=None) -> None:
        index = index if index is not None and index.isValid() else self.view.currentIndex()
        if index.isValid():
            self.run_opened.emit(self.model.run_at(self.proxy.mapToSource(index).row()).id)

    def _selection(self, *_: object) -> None:
        ids = self.selected_ids()
        current = self.view.currentIndex()
        if current.isValid():
            first = self.model.run_at(self.proxy.mapToSource(current).row()).id
            if first in ids:
                ids.remove(first)
                ids.insert(0, first)
        if ids:
            self.runs_selected.emit(ids)

    def _menu(self, pos) -> None:
        menu = self.context_menu(self.selected_ids())
        if menu is not None:
            menu.popup(self.view.viewport().mapToGlobal(pos))

    def context_menu(self, ids: list[str]) -> QMenu | None:
        """The actions on the runs ``ids``: Stop only while one of them has not ended."""
        if not ids:
            return None
        ended = all(self.model.runs[self.model.row_of(i)].state in FINAL_STATES for i in ids if self.model.row_of(i) >= 0)
        menu = QMenu(self)
        for key, text in self.ACTIONS:
            action = QAction(text, menu)
            action.triggered.connect(lambda _=False, k=key: self.action_requested.emit(k, ids))
            action.setObjectName(f"run_{key}")
            if (key in ("rerun", "duplicate", "logs", "pull") and len(ids) != 1) or (key == "stop" and ended):
                action.setEnabled(False)
            menu.addAction(action)
        return menu
