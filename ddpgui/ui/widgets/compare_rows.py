"""Rows of the Compare tab's numbers table: one per (setting, metric), each cell holding its number as data."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel

from ddpgui.core.analysis.comparison import Comparison, GroupStats
from ddpgui.core.analysis.run_stats import RUN_METRICS
from ddpgui.core.analysis.stats import Estimate, Ratio
from ddpgui.core.outputs import tables

COLUMNS = ("Setting", "Metric", "Unit", "Value", "± 95% CI", "Low", "High", "n", "Note")
#: Rows of the numbers table beyond the per-run metrics: the comparison's ratios.
RATIOS = ("speedup", "memory_saving", "scaling_efficiency")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _item(text: str, value: object = None) -> QStandardItem:
    item = QStandardItem(text)
    item.setData(value, Qt.ItemDataRole.UserRole)
    if text:
        item.setToolTip(text)  # a long note is cut at the column's edge: the whole of it on hover
    return item


def estimate_row(setting: str, key: str, metric: str, unit: str, est: Estimate) -> list[QStandardItem]:
    return [_item(setting, key), _item(metric), _item(unit), _item(_number(est.mean), est.mean),
            _item(_number(est.ci95), est.ci95), _item(_number(est.low), est.low), _item(_number(est.high), est.high),
            _item(f"{est.n} {est.over}".strip(), est.n), _item(est.reason)]


def ratio_row(setting: str, key: str, metric: str, unit: str, r: Ratio) -> list[QStandardItem]:
    return [_item(setting, key), _item(metric), _item(unit), _item(_number(r.value), r.value), _item(""),
            _item(_number(r.low), r.low), _item(_number(r.high), r.high),
            _item(f"{r.n[0]}/{r.n[1]} {r.over}".strip(), r.n), _item(r.reason)]


def fill_table(model: QStandardItemModel, comparison: Comparison, groups: list[GroupStats]) -> None:
    """One row per (group, metric) and per (group, ratio), in the groups' order."""
    model.removeRows(0, model.rowCount())
    ratios = {"speedup": comparison.speedup, "memory_saving": comparison.memory_saving,
              "scaling_efficiency": comparison.scaling}
    for g in groups:
        setting = g.label + (" (baseline)" if g.key == comparison.baseline else "")
        for metric in RUN_METRICS:
            model.appendRow(estimate_row(setting, g.key, metric, tables.metric_unit(metric, comparison),
                                         g.metrics[metric]))
        for metric in RATIOS:
            model.appendRow(ratio_row(setting, g.key, metric, tables.UNITS[metric], ratios[metric][g.key]))


def table_value(model: QStandardItemModel, group_key: str, metric: str, column: str = "Value") -> float | None:
    """The number behind a cell of the row (group, metric); None when the cell is empty."""
    col = COLUMNS.index(column)
    for row in range(model.rowCount()):
        if model.item(row, 0).data(Qt.ItemDataRole.UserRole) == group_key and model.item(row, 1).text() == metric:
            return model.item(row, col).data(Qt.ItemDataRole.UserRole)
    raise KeyError((group_key, metric))
