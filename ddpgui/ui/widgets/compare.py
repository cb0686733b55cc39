"""The Compare tab: runs (or a sweep) side by side — curves, bars with 95% CIs, scaling, every number with its n.

Statistics, curves and exports are computed on worker threads (:func:`compute_comparison`,
:func:`export_comparison`); the GUI thread only draws what they return.  The numbers are
those of :mod:`ddpgui.core.analysis` (docs/ANALYSIS.md), the exported files those of
:mod:`ddpgui.core.outputs.figures` and :mod:`ddpgui.core.outputs.report`.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core import analysis
from ddpgui.core.analysis import RUN_METRICS, Comparison, Estimate, GroupStats, Ratio, RunStats
from ddpgui.core.hosts import HostStore
from ddpgui.core.outputs import figures, report
from ddpgui.core.store import RunStore, SweepRecord
from remote_runner.spools import METRICS
from remote_runner.status import FINAL_STATES

from ..plots.buffer import SeriesBuffer
from ..plots.live_plot import LivePlot

EMPTY_TEXT = ("No runs to compare yet.\n\nAdd runs from the Runs tab: right-click → Add to comparison,\n"
              "or pick a sweep above and press Add sweep.")
ALL_FORMATS = figures.FORMATS + report.FORMATS
#: Group-by choice that keeps the analysis' own groups (runs with the same settings).
BY_SETTING = "setting"
ALIGN = ("step", "time")
#: Pen styles that go with figures.LINESTYLES (a repeat gets the next one).
PEN_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DashDotLine, Qt.PenStyle.DotLine)
#: Rows of the numbers table beyond the per-run metrics: the comparison's ratios.
RATIOS = ("speedup", "memory_saving", "scaling_efficiency")


@dataclass
class Curve:
    """One run's loss curve: step, seconds since its first logged step, loss (finite points only)."""

    step: np.ndarray
    time: np.ndarray
    loss: np.ndarray


@dataclass
class CompareResult:
    """What the worker hands the view: the comparison, the loss curves, and the stats it may keep."""

    comparison: Comparison
    curves: dict[str, Curve]
    final: dict[str, RunStats] = field(default_factory=dict)  # ended runs: their stats no longer change
    missing: list[str] = field(default_factory=list)  # run ids no longer in the store


def load_curve(store: RunStore, run_id: str) -> Curve:
    s = store.series(run_id, METRICS, keys=["step", "t", "loss", "phase"])
    keep = np.isfinite(s["step"]) & np.isfinite(s["loss"]) & np.isfinite(s["t"])
    if s["phase"].dtype == object:
        keep &= s["phase"] != "inference"
    t = s["t"][keep]
    return Curve(s["step"][keep].astype(np.float64), t - (t[0] if len(t) else 0.0), s["loss"][keep])


def compute_comparison(store: RunStore, hosts: HostStore | None, run_ids: list[str], baseline: str | None,
                       known: dict[str, RunStats] | None = None, curves: dict[str, Curve] | None = None
                       ) -> CompareResult:
    """Worker: each run's statistics (reusing ``known`` ones), their comparison and the loss curves.

    "Time to N steps" uses the fewest steps any compared run reached, as ``ddpgui compare`` does.
    """
    known, curves = dict(known or {}), dict(curves or {})
    runs, missing = [], []
    for run_id in run_ids:
        try:
            runs.append(store.get_run(run_id))
        except KeyError:
            missing.append(run_id)
    if not runs:
        raise ValueError("none of the runs to compare is in the run store any more")
    n_steps = analysis.common_steps(runs)
    stats, final = [], {}
    for run in runs:
        cached = known.get(run.id)
        if cached is None or cached.n_steps != n_steps:
            price = analysis.run_price_per_hour(run, hosts) if hosts is not None else None
            cached = analysis.run_stats(store, run.id, price, n_steps)
        stats.append(cached)
        if run.state in FINAL_STATES:
            final[run.id] = cached
        if run.id not in curves or run.state not in FINAL_STATES:
            curves[run.id] = load_curve(store, run.id)
    ids = {s.run_id for s in stats}
    comparison = analysis.compare(stats, baseline if baseline in ids or _is_group(stats, baseline) else None)
    return CompareResult(comparison, {k: v for k, v in curves.items() if k in ids}, final, missing)


def _is_group(stats: list[RunStats], key: str | None) -> bool:
    return key is not None and any(s.setting == key for s in stats)


def export_comparison(comparison: Comparison, store: RunStore, folder: Path, formats: list[str], width: str,
                      x: str):
    """Worker: figures, then tables; yields what it is doing, returns :class:`figures.Exported`."""
    wanted_figures = [f for f in formats if f in figures.FORMATS]
    wanted_data = [f for f in formats if f in report.FORMATS]
    written = figures.Exported()
    if wanted_figures:
        yield f"drawing figures ({', '.join(wanted_figures)})…"
        written.extend(figures.export(comparison, store, folder, wanted_figures, width, x))
    if wanted_data:
        yield f"writing tables ({', '.join(wanted_data)})…"
        written.extend(report.export(comparison, store, folder, wanted_data))
    return written


def differing_settings(groups: list[GroupStats]) -> list[str]:
    """The settings whose values differ between the groups (process counts shown as one world size)."""
    rows = [_grouping_settings(g) for g in groups]
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return [k for k in keys if len({_shown(row.get(k)) for row in rows}) > 1]


def _grouping_settings(group: GroupStats) -> dict:
    s = dict(group.settings)
    s["world_size"] = group.world_size
    s.pop("nproc_per_node", None)
    s.pop("nnodes", None)
    return s


def _shown(value: object) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


class ExportDialog(QDialog):
    """Folder, formats and figure width of an export; remembered in the window's QSettings."""

    def __init__(self, settings: QSettings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Export comparison")
        self.setObjectName("export_dialog")
        self.settings = settings
        self.folder = QLineEdit(str(settings.value("compare/export_dir", str(Path.home() / "ddpgui-export"))),
                                objectName="export_folder")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        chosen = str(settings.value("compare/export_formats", ",".join(ALL_FORMATS))).split(",")
        self.formats = {fmt: QCheckBox(fmt, objectName=f"export_{fmt}", checked=fmt in chosen) for fmt in ALL_FORMATS}
        self.single = QRadioButton("single column (3.5 in)", objectName="export_single")
        self.double = QRadioButton("double column (7 in)", objectName="export_double")
        widths = QButtonGroup(self)
        widths.addButton(self.single)
        widths.addButton(self.double)
        (self.double if settings.value("compare/export_width", "single") == "double" else self.single).setChecked(True)
        self.error = QLabel(objectName="export_error", wordWrap=True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Export")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        format_row = QHBoxLayout()
        for box in self.formats.values():
            format_row.addWidget(box)
            box.toggled.connect(self._validate)
        width_row = QHBoxLayout()
        width_row.addWidget(self.single)
        width_row.addWidget(self.double)
        form = QFormLayout(self)
        form.addRow("Folder", folder_row)
        form.addRow("Formats", format_row)
        form.addRow("Figure width", width_row)
        form.addRow(self.error)
        form.addRow(self.buttons)
        self.folder.textChanged.connect(self._validate)
        self._validate()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export to folder", self.folder.text())
        if folder:
            self.folder.setText(folder)

    def chosen_formats(self) -> list[str]:
        return [fmt for fmt, box in self.formats.items() if box.isChecked()]

    def width(self) -> str:
        return "double" if self.double.isChecked() else "single"

    def _validate(self) -> bool:
        error = ""
        if not self.folder.text().strip():
            error = "Choose a folder for the files."
        elif not self.chosen_formats():
            error = "Tick at least one format."
        self.error.setText(error)
        self.error.setVisible(bool(error))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not error)
        return not error

    def accept(self) -> None:
        if not self._validate():
            return
        self.settings.setValue("compare/export_dir", self.folder.text().strip())
        self.settings.setValue("compare/export_formats", ",".join(self.chosen_formats()))
        self.settings.setValue("compare/export_width", self.width())
        super().accept()


class BarPlot(pg.PlotWidget):
    """Bars with 95% CI error bars (pyqtgraph BarGraphItem + ErrorBarItem), one tick label per bar."""

    def __init__(self, title: str, y_label: str, parent=None):
        super().__init__(parent=parent)
        self.setObjectName(f"bars:{title}")
        self.title = title
        self.getPlotItem().setLabel("left", y_label)
        self.getPlotItem().setMouseEnabled(x=False, y=False)
        self.values: list[float | None] = []
        self.errors: list[tuple[float, float] | None] = []

    def show_bars(self, labels: list[str], values: list[float | None], errors: list[tuple[float, float] | None],
                  colors: list[str], reason: str = "", reference: float | None = None) -> None:
        """Draw one bar per label; ``errors`` are (below, above) half-widths; ``reason`` shown when no bar."""
        item = self.getPlotItem()
        item.clear()
        self.values, self.errors = values, errors
        drawn = [i for i, v in enumerate(values) if v is not None]
        item.setTitle(self.title if drawn else f"{self.title}: {reason or 'no values'}")
        item.getAxis("bottom").setTicks([[(i, label) for i, label in enumerate(labels)]])
        if not drawn:
            return
        x = np.array(drawn, float)
        heights = np.array([values[i] for i in drawn], float)
        item.addItem(pg.BarGraphItem(x=x, height=heights, width=0.6, brushes=[pg.mkBrush(colors[i]) for i in drawn],
                                     pens=[pg.mkPen("k", width=0.5)] * len(drawn)))
        with_ci = [i for i in drawn if errors[i] is not None]
        if with_ci:
            item.addItem(pg.ErrorBarItem(x=np.array(with_ci, float), y=np.array([values[i] for i in with_ci], float),
                                         bottom=np.array([errors[i][0] for i in with_ci], float),
                                         top=np.array([errors[i][1] for i in with_ci], float), beam=0.2,
                                         pen=pg.mkPen("k", width=1)))
        if reference is not None:
            item.addItem(pg.InfiniteLine(reference, angle=0, pen=pg.mkPen("#888", style=Qt.PenStyle.DotLine)))
        item.setXRange(-0.6, len(labels) - 0.4, padding=0)
        item.enableAutoRange(axis="y")


class CompareView(QWidget):
    """Pick runs or a sweep, choose baseline, grouping and x alignment; see every number; export."""

    def __init__(self, store: RunStore, hosts: HostStore | None, settings: QSettings,
                 loader: Callable[..., object], parent=None):
        """``loader`` starts work off the GUI thread (``WorkerPool.start``)."""
        super().__init__(parent)
        self.setObjectName("compare_view")
        self.store, self.hosts, self.settings, self.loader = store, hosts, settings, loader
        self.run_ids: list[str] = []
        self.comparison: Comparison | None = None
        self.curves: dict[str, Curve] = {}
        self.known: dict[str, RunStats] = {}
        self.baseline: str | None = None
        self.sweeps: list[SweepRecord] = []
        self.busy = False
        self.exported: figures.Exported | None = None
        self._generation = 0

        self.runs_list = QListWidget(objectName="compare_runs", maximumHeight=90)
        self.runs_list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.remove_button = QPushButton("Remove", objectName="compare_remove", toolTip="Remove the selected runs")
        self.clear_button = QPushButton("Clear", objectName="compare_clear")
        self.sweep_combo = QComboBox(objectName="compare_sweep", minimumWidth=200)
        self.add_sweep_button = QPushButton("Add sweep", objectName="compare_add_sweep",
                                            toolTip="Add the finished runs of the chosen sweep")
        self.baseline_combo = QComboBox(objectName="compare_baseline", minimumWidth=160,
                                        toolTip="Speedup and memory saving are relative to this setting")
        self.group_combo = QComboBox(objectName="compare_group", toolTip="Colour (and order) by this setting")
        self.align_combo = QComboBox(objectName="compare_align", toolTip="x axis of the loss curves")
        self.align_combo.addItems(ALIGN)
        self.align_combo.setCurrentText(str(settings.value("compare/align", "step")))
        self._group_choice = str(settings.value("compare/group", BY_SETTING))
        self.export_button = QPushButton("Export…", objectName="compare_export", enabled=False)
        self.status = QLabel(objectName="compare_status", wordWrap=True,
                             textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.legend = QLabel(objectName="compare_legend", wordWrap=True)

        self.loss_plot = LivePlot("loss", "training loss", "step")
        self.throughput_plot = BarPlot("steady throughput (mean ± 95% CI)", "samples/s")
        self.memory_plot = BarPlot("peak memory (mean ± 95% CI)", "GiB")
        self.speedup_plot = BarPlot("speedup vs baseline (95% CI)", "×")
        self.scaling_plot = pg.PlotWidget(objectName="scaling_plot")
        self.scaling_plot.getPlotItem().setLabel("bottom", "processes (GPUs)")
        self.scaling_plot.getPlotItem().addLegend(offset=(10, 10))
        self.table_model = QStandardItemModel(0, 9)
        self.table_model.setHorizontalHeaderLabels(["Setting", "Metric", "Unit", "Value", "± 95% CI", "Low", "High",
                                                    "n", "Note"])
        self.table = QTableView(objectName="compare_table")
        self.table.setModel(self.table_model)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)

        top = QHBoxLayout()
        runs_box = QVBoxLayout()
        runs_box.addWidget(QLabel("Compared runs", objectName="panel_title"))
        runs_box.addWidget(self.runs_list)
        top.addLayout(runs_box, 2)
        controls = QGridLayout()
        controls.addWidget(QLabel("Sweep"), 0, 0)
        controls.addWidget(self.sweep_combo, 0, 1)
        controls.addWidget(self.add_sweep_button, 0, 2)
        controls.addWidget(QLabel("Baseline"), 1, 0)
        controls.addWidget(self.baseline_combo, 1, 1, 1, 2)
        controls.addWidget(QLabel("Colour by"), 2, 0)
        controls.addWidget(self.group_combo, 2, 1)
        controls.addWidget(QLabel("Align by"), 2, 2)
        controls.addWidget(self.align_combo, 2, 3)
        buttons = QHBoxLayout()
        for button in (self.remove_button, self.clear_button, self.export_button):
            buttons.addWidget(button)
        controls.addLayout(buttons, 3, 0, 1, 4)
        top.addLayout(controls, 3)

        plots = QWidget()
        grid = QGridLayout(plots)
        grid.setContentsMargins(0, 0, 0, 0)
        for i, plot in enumerate((self.loss_plot, self.throughput_plot, self.memory_plot, self.speedup_plot,
                                  self.scaling_plot)):
            grid.addWidget(plot, i // 3, i % 3)
        grid.addWidget(self.legend, 1, 2, Qt.AlignmentFlag.AlignBottom)
        content = QSplitter(Qt.Orientation.Vertical)
        content.addWidget(plots)
        content.addWidget(self.table)
        content.setSizes([560, 260])
        self.empty = QLabel(EMPTY_TEXT, objectName="compare_empty", alignment=Qt.AlignmentFlag.AlignCenter,
                            wordWrap=True)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(content)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.stack, 1)
        layout.addWidget(self.status)

        self.remove_button.clicked.connect(self._remove_selected)
        self.clear_button.clicked.connect(lambda: self.set_runs([]))
        self.add_sweep_button.clicked.connect(self._add_chosen_sweep)
        self.baseline_combo.activated.connect(self._baseline_chosen)
        self.group_combo.activated.connect(self._group_chosen)
        self.align_combo.currentTextChanged.connect(self._align_chosen)
        self.export_button.clicked.connect(self.ask_export)
        self._show_state()

    # ---- choosing runs -----------------------------------------------------------------
    def add_runs(self, run_ids: list[str]) -> None:
        """Add runs (those already compared are kept once)."""
        self.set_runs(list(dict.fromkeys([*self.run_ids, *run_ids])))

    def set_runs(self, run_ids: list[str]) -> None:
        self.run_ids = list(dict.fromkeys(run_ids))
        if self.baseline is not None and not self.run_ids:
            self.baseline = None
        self.recompute()

    def on_update(self, update) -> None:
        """A compared run that has just ended changes the numbers: compute them again (a RunUpdate)."""
        if update.run is not None and update.run.id in self.run_ids and update.run.state in FINAL_STATES:
            self.recompute()

    def _remove_selected(self) -> None:
        gone = {item.data(Qt.ItemDataRole.UserRole) for item in self.runs_list.selectedItems()}
        self.set_runs([r for r in self.run_ids if r not in gone])

    def refresh_sweeps(self) -> None:
        """Read the list of sweeps on a worker and fill the chooser."""
        self.loader(self.store.list_sweeps, on_return=self._set_sweeps,
                    on_error=lambda exc: self.status.setText(f"Could not read the sweeps: {exc}"))

    def _set_sweeps(self, sweeps: list[SweepRecord]) -> None:
        current = self.sweep_combo.currentData()
        self.sweeps = sweeps
        self.sweep_combo.clear()
        for sweep in sweeps:
            self.sweep_combo.addItem(f"{sweep.name} ({sweep.state})", sweep.id)
        if not sweeps:
            self.sweep_combo.addItem("no sweeps yet", None)
        index = self.sweep_combo.findData(current)
        self.sweep_combo.setCurrentIndex(max(0, index))
        self.add_sweep_button.setEnabled(bool(sweeps))

    def _add_chosen_sweep(self) -> None:
        sweep_id = self.sweep_combo.currentData()
        if sweep_id:
            self.add_sweep(sweep_id)

    def add_sweep(self, sweep_id: str) -> None:
        """Add the sweep's finished runs (read on a worker)."""
        def added(runs) -> None:
            done = [r.id for r in runs if r.state == "finished"]
            skipped = len(runs) - len(done)
            self.add_runs(done)
            if not done:
                self.status.setText("That sweep has no finished runs yet.")
            elif skipped:
                self.status.setText(f"Added {len(done)} finished runs of the sweep ({skipped} not finished left out).")

        self.loader(self.store.sweep_runs, sweep_id, on_return=added,
                    on_error=lambda exc: self.status.setText(f"Could not read the sweep: {exc}"))

    # ---- computing -----------------------------------------------------------------------
    def recompute(self) -> None:
        """Statistics and curves of the chosen runs, on a worker; a newer request supersedes an older one."""
        self._generation += 1
        generation = self._generation
        self._fill_runs_list()
        if not self.run_ids:
            self.comparison = None
            self.busy = False
            self._show_state()
            return
        self.busy = True
        self.export_button.setEnabled(False)
        self.status.setText(f"Computing statistics of {len(self.run_ids)} runs…")
        self.loader(compute_comparison, self.store, self.hosts, list(self.run_ids), self.baseline, dict(self.known),
                    dict(self.curves),
                    on_return=lambda result: self._computed(generation, result),
                    on_error=lambda exc: self._failed(generation, exc))

    def _failed(self, generation: int, exc: Exception) -> None:
        if generation != self._generation:
            return
        self.busy = False
        self.comparison = None
        self.status.setText(f"Could not compare: {exc}")
        self._show_state()

    def _computed(self, generation: int, result: CompareResult) -> None:
        if generation != self._generation:
            return
        self.busy = False
        self.known.update(result.final)
        self.curves = result.curves
        if result.missing:
            self.run_ids = [r for r in self.run_ids if r not in result.missing]
            self._fill_runs_list()
        self.comparison = result.comparison
        self.baseline = result.comparison.baseline
        self._fill_choices()
        self.draw()
        note = f" ({len(result.missing)} deleted runs left out)" if result.missing else ""
        self.status.setText(f"{len(self.run_ids)} runs in {len(result.comparison.groups)} settings{note}; "
                            f"baseline {result.comparison.baseline_group.label}.")

    def _fill_runs_list(self) -> None:
        self.runs_list.clear()
        labels = figures.run_labels(self.comparison) if self.comparison is not None else {}
        for run_id in self.run_ids:
            item = QListWidgetItem(labels.get(run_id, run_id) + f"  ({run_id})")
            item.setData(Qt.ItemDataRole.UserRole, run_id)
            self.runs_list.addItem(item)

    def _fill_choices(self) -> None:
        comparison = self.comparison
        self.baseline_combo.clear()
        for g in comparison.groups:
            self.baseline_combo.addItem(f"{g.label} (n={g.n})", g.key)
        self.baseline_combo.setCurrentIndex(self.baseline_combo.findData(comparison.baseline))
        self.group_combo.clear()
        self.group_combo.addItem("setting (each its own)", BY_SETTING)
        for key in differing_settings(comparison.groups):
            self.group_combo.addItem(key, key)
        index = self.group_combo.findData(self._group_choice)
        self.group_combo.setCurrentIndex(max(0, index))
        self._fill_runs_list()

    def _baseline_chosen(self, index: int) -> None:
        key = self.baseline_combo.itemData(index)
        if key and key != self.baseline:
            self.set_baseline(key)

    def set_baseline(self, key: str) -> None:
        """Compare with this group (a group key or a run id); recomputed on a worker."""
        self.baseline = key
        self.recompute()

    def _group_chosen(self, index: int) -> None:
        self.set_group_by(self.group_combo.itemData(index) or BY_SETTING)

    def set_group_by(self, key: str) -> None:
        self._group_choice = key
        self.settings.setValue("compare/group", key)
        index = self.group_combo.findData(key)
        if index >= 0 and index != self.group_combo.currentIndex():
            self.group_combo.setCurrentIndex(index)
        self.draw()

    def _align_chosen(self, text: str) -> None:
        self.settings.setValue("compare/align", text)
        self.draw()

    @property
    def group_by(self) -> str:
        return self.group_combo.currentData() or BY_SETTING

    # ---- drawing -------------------------------------------------------------------------
    def ordered_groups(self) -> list[GroupStats]:
        """The groups in drawing order: by the colour-by setting's value (stable), else as compared."""
        groups = list(self.comparison.groups)
        key = self.group_by
        if key == BY_SETTING:
            return groups
        first_seen = {}
        for g in groups:
            first_seen.setdefault(_shown(_grouping_settings(g).get(key)), len(first_seen))
        return sorted(groups, key=lambda g: first_seen[_shown(_grouping_settings(g).get(key))])

    def colours(self, groups: list[GroupStats]) -> dict[str, tuple[str, str]]:
        """Group key → (colour, the value it stands for): one colour per value of the colour-by setting."""
        key = self.group_by
        values: dict[str, int] = {}
        out = {}
        for g in groups:
            value = g.label if key == BY_SETTING else f"{key}={_shown(_grouping_settings(g).get(key))}"
            values.setdefault(value, len(values))
            out[g.key] = (figures.OKABE_ITO[values[value] % len(figures.OKABE_ITO)], value)
        return out

    def draw(self) -> None:
        self._show_state()
        if self.comparison is None:
            return
        comparison = self.comparison
        groups = self.ordered_groups()
        colours = self.colours(groups)
        self.legend.setText("Colour: " + "  ".join(f'<span style="color:{c}">■</span> {value}'
                                                   for c, value in dict.fromkeys(colours.values())))
        labels = [f"{g.label}\nn={g.n}" for g in groups]
        bar_colours = [colours[g.key][0] for g in groups]
        unit = comparison.groups[0].runs[0].throughput_unit
        self.throughput_plot.getPlotItem().setLabel("left", unit)
        for plot, metric in ((self.throughput_plot, "throughput"), (self.memory_plot, "mem_peak_gib")):
            estimates = [g.metrics[metric] for g in groups]
            plot.show_bars(labels, [e.mean for e in estimates],
                           [None if e.ci95 is None else (e.ci95, e.ci95) for e in estimates], bar_colours,
                           "; ".join(sorted({e.reason for e in estimates if e.reason})))
        ratios = [comparison.speedup[g.key] for g in groups]
        self.speedup_plot.getPlotItem().setLabel("left", f"× vs {comparison.baseline_group.label}")
        self.speedup_plot.show_bars(labels, [r.value for r in ratios], [figures.ratio_error(r) for r in ratios],
                                    bar_colours, "; ".join(sorted({r.reason for r in ratios if r.reason})),
                                    reference=1.0)
        self._draw_curves(groups, colours)
        self._draw_scaling(groups, colours)
        self._fill_table(groups)

    def _draw_curves(self, groups: list[GroupStats], colours: dict[str, tuple[str, str]]) -> None:
        x_axis = self.align_combo.currentText()
        labels = figures.run_labels(self.comparison)
        plot = self.loss_plot
        plot.remove_curves()
        plot.getPlotItem().setLabel("bottom", figures.X_LABELS[x_axis])
        for g in groups:
            for k, run in enumerate(g.runs):
                curve = self.curves.get(run.run_id)
                if curve is None:
                    continue
                buffer = SeriesBuffer(max(16, len(curve.step)))
                buffer.extend(curve.step if x_axis == "step" else curve.time, curve.loss)
                plot.add_curve(run.run_id, buffer, labels[run.run_id], colours[g.key][0],
                               style=PEN_STYLES[k % len(PEN_STYLES)])
        plot.getPlotItem().enableAutoRange()
        plot.mark_dirty()
        plot.redraw()

    def _draw_scaling(self, groups: list[GroupStats], colours: dict[str, tuple[str, str]]) -> None:
        item = self.scaling_plot.getPlotItem()
        item.clear()
        item.legend.clear()
        families: dict[str, list[GroupStats]] = {}
        for g in groups:
            if self.comparison.scaling[g.key].value is not None:
                families.setdefault(analysis.family_key(g), []).append(g)
        families = {k: v for k, v in families.items() if len(v) >= 2}
        unit = self.comparison.groups[0].runs[0].throughput_unit
        item.setLabel("left", unit)
        if not families:
            item.setTitle("scaling: needs a 1-process run and an N-process run with otherwise the same settings")
            return
        item.setTitle("scaling (mean ± 95% CI; dotted: ideal N × 1-process)")
        for members in families.values():
            members.sort(key=lambda g: g.world_size)
            colour = colours[members[0].key][0]
            n = np.array([g.world_size for g in members], float)
            est = [g.metrics["throughput"] for g in members]
            mean = np.array([e.mean for e in est], float)
            one = next(e.mean for g, e in zip(members, est) if g.world_size == 1)
            words = [w for w in members[0].label.split() if not w.endswith("×")]
            item.plot(n, mean, pen=pg.mkPen(colour, width=1.5), symbol="o", symbolBrush=colour,
                      name=" ".join(words) or "throughput")
            item.addItem(pg.ErrorBarItem(x=n, y=mean, height=2 * np.array([e.ci95 or 0.0 for e in est]), beam=0.1,
                                         pen=pg.mkPen(colour)))
            item.plot(n, n * one, pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DotLine))
        sizes = sorted({g.world_size for members in families.values() for g in members})
        item.getAxis("bottom").setTicks([[(s, str(s)) for s in sizes]])

    def _fill_table(self, groups: list[GroupStats]) -> None:
        comparison = self.comparison
        model = self.table_model
        model.removeRows(0, model.rowCount())
        ratios = {"speedup": comparison.speedup, "memory_saving": comparison.memory_saving,
                  "scaling_efficiency": comparison.scaling}
        for g in groups:
            setting = g.label + (" (baseline)" if g.key == comparison.baseline else "")
            for metric in RUN_METRICS:
                model.appendRow(_estimate_row(setting, g.key, metric, report.metric_unit(metric, comparison),
                                              g.metrics[metric]))
            for metric in RATIOS:
                model.appendRow(_ratio_row(setting, g.key, metric, report.UNITS[metric], ratios[metric][g.key]))
        self.table.resizeColumnsToContents()

    def table_value(self, group_key: str, metric: str, column: str = "Value") -> float | None:
        """The number behind a table cell (for tests and copy): None when the cell is empty."""
        col = ["Setting", "Metric", "Unit", "Value", "± 95% CI", "Low", "High", "n", "Note"].index(column)
        for row in range(self.table_model.rowCount()):
            first = self.table_model.item(row, 0)
            if first.data(Qt.ItemDataRole.UserRole) == group_key and self.table_model.item(row, 1).text() == metric:
                return self.table_model.item(row, col).data(Qt.ItemDataRole.UserRole)
        raise KeyError((group_key, metric))

    def _show_state(self) -> None:
        has = self.comparison is not None and bool(self.run_ids)
        self.stack.setCurrentIndex(1 if has else 0)
        self.export_button.setEnabled(has and not self.busy)
        self.remove_button.setEnabled(bool(self.run_ids))
        self.clear_button.setEnabled(bool(self.run_ids))
        if not self.run_ids:
            self.status.setText("")

    # ---- export --------------------------------------------------------------------------
    def ask_export(self) -> ExportDialog:
        dialog = ExportDialog(self.settings, self)
        dialog.accepted.connect(lambda: self.export(Path(dialog.folder.text().strip()), dialog.chosen_formats(),
                                                    dialog.width()))
        dialog.open()
        return dialog

    def export(self, folder: Path, formats: list[str], width: str) -> None:
        """Write the chosen formats into ``folder`` on a worker; the status line says what was written where."""
        if self.comparison is None:
            return
        self.export_button.setEnabled(False)
        self.exported = None
        self.status.setText(f"Exporting to {folder}…")

        def done(written: figures.Exported) -> None:
            self.exported = written
            self.export_button.setEnabled(True)
            skipped = "; ".join(f"no {name} figure: {why}" for name, why in written.skipped.items())
            self.status.setText(f"Wrote {len(written.paths)} files to {folder}: "
                                f"{', '.join(p.name for p in written.paths)}" + (f". {skipped}" if skipped else ""))

        def failed(exc: Exception) -> None:
            self.export_button.setEnabled(True)
            self.status.setText(f"Export failed: {exc}")

        self.loader(export_comparison, self.comparison, self.store, folder, formats, width,
                    self.align_combo.currentText(), on_yield=lambda text: self.status.setText(f"Exporting: {text}"),
                    on_return=done, on_error=failed)


def _item(text: str, value: object = None) -> QStandardItem:
    item = QStandardItem(text)
    item.setData(value, Qt.ItemDataRole.UserRole)
    return item


def _estimate_row(setting: str, key: str, metric: str, unit: str, est: Estimate) -> list[QStandardItem]:
    return [_item(setting, key), _item(metric), _item(unit), _item(_number(est.mean), est.mean),
            _item(_number(est.ci95), est.ci95), _item(_number(est.low), est.low), _item(_number(est.high), est.high),
            _item(f"{est.n} {est.over}".strip(), est.n), _item(est.reason)]


def _ratio_row(setting: str, key: str, metric: str, unit: str, r: Ratio) -> list[QStandardItem]:
    return [_item(setting, key), _item(metric), _item(unit), _item(_number(r.value), r.value), _item(""),
            _item(_number(r.low), r.low), _item(_number(r.high), r.high),
            _item(f"{r.n[0]}/{r.n[1]} {r.over}".strip(), r.n), _item(r.reason)]
