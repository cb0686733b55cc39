"""The Compare tab's numbers table: one row per (setting, metric), each cell holding its number as data.

Metrics are named in words with their unit ("peak memory (GiB)", :mod:`ddpgui.core.analysis.metric_names`);
the metric's key is the data of its cell.  A metric that no setting has a value for (GPU utilisation on a CPU
host) is hidden unless "Show empty metrics" is ticked (kept in the window's QSettings).
"""
from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.analysis.comparison import Comparison, GroupStats
from ddpgui.core.analysis.metric_names import WORDS, metric_words
from ddpgui.core.analysis.run_stats import RUN_METRICS
from ddpgui.core.analysis.stats import METHODS, RANGE, Estimate, Ratio

COLUMNS = ("Setting", "Metric", "Value", "Low", "High", "Interval", "n", "Note")
#: Rows of the numbers table beyond the per-run metrics: the comparison's ratios.
RATIOS = ("speedup", "memory_saving", "scaling_efficiency")
KEY = Qt.ItemDataRole.UserRole


def _number(value: float | None) -> str:
    """Four significant digits, whole numbers from 10,000 up (11230, not 1.123e+04, beside 8830)."""
    if value is None:
        return ""
    return f"{value:.0f}" if 1e4 <= abs(value) < 1e9 else f"{value:.4g}"


def _item(text: str, value: object = None) -> QStandardItem:
    item = QStandardItem(text)
    item.setData(value, KEY)
    if text:
        item.setToolTip(text)  # a long note is cut at the column's edge: the whole of it on hover
    return item


def _bounds(spread: Estimate | Ratio) -> list[QStandardItem]:
    """Low, High and what they are, in stats.METHODS' words: the interval, else (below 3 repeats) the range."""
    if spread.has_interval:
        (low, high), kind = (spread.low, spread.high), spread.method
    else:
        (low, high), kind = spread.range or (None, None), RANGE if spread.range else ""
    return [_item(_number(low), low), _item(_number(high), high), _item(METHODS[kind] if kind else "", kind)]


def estimate_row(setting: str, key: str, metric: str, words: str, est: Estimate) -> list[QStandardItem]:
    return [_item(setting, key), _item(words, metric), _item(_number(est.mean), est.mean), *_bounds(est),
            _item(f"{est.n} {est.over}".strip(), est.n), _item(est.reason)]


def ratio_row(setting: str, key: str, metric: str, words: str, r: Ratio) -> list[QStandardItem]:
    return [_item(setting, key), _item(words, metric), _item(_number(r.value), r.value), *_bounds(r),
            _item(f"{r.n[0]}/{r.n[1]} {r.over}".strip(), r.n), _item(r.reason)]


def _ratios(comparison: Comparison) -> dict[str, dict[str, Ratio]]:
    return {"speedup": comparison.speedup, "memory_saving": comparison.memory_saving,
            "scaling_efficiency": comparison.scaling}


def empty_metrics(comparison: Comparison) -> list[str]:
    """The metrics (and ratios) that no setting of the comparison has a value for, in table order."""
    ratios = _ratios(comparison)
    empty = [m for m in RUN_METRICS if all(g.metrics[m].mean is None for g in comparison.groups)]
    return empty + [m for m in RATIOS if all(ratios[m][g.key].value is None for g in comparison.groups)]


def fill_table(model: QStandardItemModel, comparison: Comparison, groups: list[GroupStats]) -> None:
    """One row per (group, metric) and per (group, ratio), in the groups' order."""
    model.removeRows(0, model.rowCount())
    ratios = _ratios(comparison)
    words = {m: metric_words(m, comparison) for m in (*RUN_METRICS, *RATIOS)}
    for g in groups:
        setting = g.label + (" (baseline)" if g.key == comparison.baseline else "")
        for metric in RUN_METRICS:
            model.appendRow(estimate_row(setting, g.key, metric, words[metric], g.metrics[metric]))
        for metric in RATIOS:
            model.appendRow(ratio_row(setting, g.key, metric, words[metric], ratios[metric][g.key]))


def table_value(model: QStandardItemModel, group_key: str, metric: str, column: str = "Value") -> float | None:
    """The number behind a cell of the row (group, metric key); None when the cell is empty."""
    col = COLUMNS.index(column)
    for row in range(model.rowCount()):
        if model.item(row, 0).data(KEY) == group_key and model.item(row, 1).data(KEY) == metric:
            return model.item(row, col).data(KEY)
    raise KeyError((group_key, metric))


class NumbersTable(QWidget):
    """The table, and the toggle that shows the metrics without data."""

    def __init__(self, settings: QSettings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.empty: list[str] = []
        self.model = QStandardItemModel(0, len(COLUMNS))
        self.model.setHorizontalHeaderLabels(list(COLUMNS))
        self.view = QTableView(objectName="compare_table")
        self.view.setModel(self.model)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().hide()
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.show_empty = QCheckBox("Show empty metrics", objectName="compare_show_empty",
                                   toolTip="Also list the metrics that no setting has a value for")
        self.show_empty.setChecked(str(settings.value("compare/show_empty", "false")).lower() == "true")
        self.hidden_note = QLabel(objectName="compare_hidden_note", wordWrap=True)  # never widens the tab
        self.hidden_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        row.addWidget(self.show_empty)
        row.addWidget(self.hidden_note, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.view, 1)
        self.show_empty.toggled.connect(self._show_empty_chosen)

    def fill(self, comparison: Comparison, groups: list[GroupStats]) -> None:
        fill_table(self.model, comparison, groups)
        self.empty = empty_metrics(comparison)
        self._show_rows()
        self.view.resizeColumnsToContents()
        note = COLUMNS.index("Note")
        self.view.setColumnWidth(note, max(self.view.columnWidth(note), 260))

    def _show_empty_chosen(self, on: bool) -> None:
        self.settings.setValue("compare/show_empty", "true" if on else "false")
        self._show_rows()

    def _show_rows(self) -> None:
        hide = set() if self.show_empty.isChecked() else set(self.empty)
        for row in range(self.model.rowCount()):
            self.view.setRowHidden(row, self.model.item(row, 1).data(KEY) in hide)
        names = ", ".join(WORDS[m].format(n="N") for m in self.empty)
        if not self.empty:
            self.hidden_note.setText("")
        elif hide:
            self.hidden_note.setText(f"{len(self.empty)} without data on any setting hidden: {names}")
        else:
            self.hidden_note.setText(f"{len(self.empty)} without data on any setting: {names}")
        self.hidden_note.setToolTip(self.hidden_note.text())

    def shown_metrics(self) -> list[str]:
        """The metric keys of the rows shown, each once, in table order (for tests)."""
        keys = [self.model.item(r, 1).data(KEY) for r in range(self.model.rowCount()) if not self.view.isRowHidden(r)]
        return list(dict.fromkeys(keys))
