"""Rows of the Compare tab's numbers table: one per (setting, metric), each cell holding its number as data."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItem

from ddpgui.core.analysis.stats import Estimate, Ratio

COLUMNS = ("Setting", "Metric", "Unit", "Value", "± 95% CI", "Low", "High", "n", "Note")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _item(text: str, value: object = None) -> QStandardItem:
    item = QStandardItem(text)
    item.setData(value, Qt.ItemDataRole.UserRole)
    return item


def estimate_row(setting: str, key: str, metric: str, unit: str, est: Estimate) -> list[QStandardItem]:
    return [_item(setting, key), _item(metric), _item(unit), _item(_number(est.mean), est.mean),
            _item(_number(est.ci95), est.ci95), _item(_number(est.low), est.low), _item(_number(est.high), est.high),
            _item(f"{est.n} {est.over}".strip(), est.n), _item(est.reason)]


def ratio_row(setting: str, key: str, metric: str, unit: str, r: Ratio) -> list[QStandardItem]:
    return [_item(setting, key), _item(metric), _item(unit), _item(_number(r.value), r.value), _item(""),
            _item(_number(r.low), r.low), _item(_number(r.high), r.high),
            _item(f"{r.n[0]}/{r.n[1]} {r.over}".strip(), r.n), _item(r.reason)]
