"""The Compare tab: runs (or a sweep) side by side — curves, bars with 95% CIs, scaling, every number with its n.

Statistics, curves and exports are computed on worker threads
(:func:`ddpgui.core.analysis.comparison.compute_comparison`, :func:`ddpgui.core.outputs.export.export_steps`);
the GUI thread only draws what they return.  The numbers are those of :mod:`ddpgui.core.analysis`
(docs/ANALYSIS.md), the exported files those of :mod:`ddpgui.core.outputs`.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.analysis.comparison import (
    CompareResult,
    Comparison,
    Curve,
    GroupStats,
    compute_comparison,
    differing_settings,
    family_key,
    grouping_settings,
    shown_value,
)
from ddpgui.core.analysis.run_stats import RUN_METRICS, RunStats
from ddpgui.core.hosts import HostStore
from ddpgui.core.outputs import export, figures, tables
from ddpgui.core.store import RunStore, SweepRecord
from remote_runner.status import FINAL_STATES

from ..dialogs.export import ExportDialog
from ..plots.bars import BarPlot
from ..plots.buffer import SeriesBuffer
from ..plots.live_plot import LivePlot
from .compare_rows import COLUMNS, estimate_row, ratio_row

EMPTY_TEXT = ("No runs to compare yet.\n\nAdd runs from the Runs tab: right-click → Add to comparison,\n"
              "or pick a sweep above and press Add sweep.")
#: Group-by choice that keeps the analysis' own groups (runs with the same settings).
BY_SETTING = "setting"
ALIGN = ("step", "time")
#: Pen styles that go with figures.LINESTYLES (a repeat gets the next one).
PEN_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DashDotLine, Qt.PenStyle.DotLine)
#: Rows of the numbers table beyond the per-run metrics: the comparison's ratios.
RATIOS = ("speedup", "memory_saving", "scaling_efficiency")


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
        self.table_model = QStandardItemModel(0, len(COLUMNS))
        self.table_model.setHorizontalHeaderLabels(list(COLUMNS))
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
            first_seen.setdefault(shown_value(grouping_settings(g).get(key)), len(first_seen))
        return sorted(groups, key=lambda g: first_seen[shown_value(grouping_settings(g).get(key))])

    def colours(self, groups: list[GroupStats]) -> dict[str, tuple[str, str]]:
        """Group key → (colour, the value it stands for): one colour per value of the colour-by setting."""
        key = self.group_by
        values: dict[str, int] = {}
        out = {}
        for g in groups:
            value = g.label if key == BY_SETTING else f"{key}={shown_value(grouping_settings(g).get(key))}"
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
                families.setdefault(family_key(g), []).append(g)
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
                model.appendRow(estimate_row(setting, g.key, metric, tables.metric_unit(metric, comparison),
                                              g.metrics[metric]))
            for metric in RATIOS:
                model.appendRow(ratio_row(setting, g.key, metric, tables.UNITS[metric], ratios[metric][g.key]))
        self.table.resizeColumnsToContents()

    def table_value(self, group_key: str, metric: str, column: str = "Value") -> float | None:
        """The number behind a table cell (for tests and copy): None when the cell is empty."""
        col = COLUMNS.index(column)
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

        self.loader(export.export_steps, self.comparison, self.store, folder, formats, width,
                    self.align_combo.currentText(), on_yield=lambda text: self.status.setText(f"Exporting: {text}"),
                    on_return=done, on_error=failed)
