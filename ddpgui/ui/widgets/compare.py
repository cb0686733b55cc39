"""The Compare tab: runs (or a sweep) side by side — curves, bars with 95% CIs, scaling, every number with its n.

Statistics, curves and exports are computed on worker threads
(:func:`ddpgui.core.analysis.comparison.compute_comparison`, :func:`ddpgui.core.outputs.export.export_steps`);
the GUI thread only draws what they return.  The numbers are those of :mod:`ddpgui.core.analysis`
(docs/ANALYSIS.md), the exported files those of :mod:`ddpgui.core.outputs`.
"""
from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QStackedWidget,
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
    grouping_settings,
    shown_value,
)
from ddpgui.core.analysis.curves import group_curves
from ddpgui.core.analysis.run_stats import RunStats
from ddpgui.core.hosts import HostStore
from ddpgui.core.outputs import figures
from ddpgui.core.outputs.style import envelope
from ddpgui.core.store import RunStore, SweepRecord
from ddpgui.core.store.records import SWEEP_FINAL_STATES
from remote_runner.status import FINAL_STATES

from ..plots.bars import BarPlot
from ..plots.compare_curves import MeanCurvesPlot, ready_curves
from ..plots.scaling import ScalingPlot
from .compare_export import ExportMixin
from .compare_plots import ComparePlots
from .compare_rows import NumbersTable, table_value

EMPTY_TEXT = ("No runs to compare yet.\n\nAdd runs from the Runs tab: right-click → Add to comparison,\n"
              "or pick a sweep above and press Add sweep.")
#: Group-by choice that keeps the analysis' own groups (runs with the same settings).
BY_SETTING = "setting"
ALIGN = ("step", "time")


def _note(value: float | None, reason: str) -> str:
    """What a bar's mark says: why it has no value, or that its value is from a run that never settled."""
    return reason if value is None or "not settled" in reason else ""


#: Pixel columns a run's faint curve is reduced to on the worker (``style.envelope``: exact at this width or less)
RUN_COLUMNS = 4096


def compare_on_worker(*args, **kwargs) -> tuple[CompareResult, dict[str, list]]:
    """:func:`compute_comparison` and, beside it, the groups' mean loss curves along each x axis, each run's
    curve reduced to the points that decide its pixels, ready to draw (:func:`ready_curves`; averaging and reducing
    10 runs × 100k points took the GUI thread 70 ms and 90 ms: they are done here, on the worker)."""
    result = compute_comparison(*args, **kwargs)
    means = {x: group_curves(result.comparison, result.curves, x) for x in ALIGN}
    for c in (c for curves in means.values() for c in curves):
        c.runs = [envelope(rx, ry, RUN_COLUMNS) for rx, ry in c.runs]
    return result, {x: ready_curves(curves) for x, curves in means.items()}  # buffers and bands: drawn as they are


class SweepChooser(QComboBox):
    """The sweep drop-down: it reads the sweeps again each time it opens (one may have started or ended)."""

    def __init__(self, refresh, **kwargs):
        super().__init__(**kwargs)
        self._refresh = refresh
        # a long sweep name never widens the window; what the box cannot show is its tooltip
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.currentTextChanged.connect(self.setToolTip)

    def showPopup(self) -> None:  # noqa: N802 (Qt's name)
        self._refresh()
        super().showPopup()


class CompareView(ExportMixin, QWidget):
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
        self.means: dict[str, list] = {}  # x axis → the groups' curves ready to draw, from the worker
        self.known: dict[str, RunStats] = {}
        self.baseline: str | None = None
        self.sweeps: list[SweepRecord] = []
        self.busy = False
        self.exported: figures.Exported | None = None
        self._generation = 0

        self.runs_list = QListWidget(objectName="compare_runs", maximumHeight=90)
        self.runs_list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.runs_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # "1× fp32 #1  (2026…-2a20ee)": no sideways
        self.runs_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # scrolling; tooltip
        self.remove_button = QPushButton("Remove", objectName="compare_remove", toolTip="Remove the selected runs")
        self.clear_button = QPushButton("Clear", objectName="compare_clear")
        self.sweep_combo = SweepChooser(self.refresh_sweeps, objectName="compare_sweep", minimumWidth=200)
        self._sweeps_later = QTimer(self, singleShot=True, interval=300)  # one read for a burst of run updates
        self._sweeps_later.timeout.connect(self.refresh_sweeps)
        self._wanted_sweep: str | None = None  # the sweep the chooser shows once it is read (compare_sweep)
        self.add_sweep_button = QPushButton("Add sweep", objectName="compare_add_sweep",
                                            toolTip="Add the finished runs of the chosen sweep")
        self.baseline_combo = QComboBox(objectName="compare_baseline", minimumWidth=160,
                                        toolTip="Speedup and memory saving are relative to this setting")
        self.group_combo = QComboBox(objectName="compare_group", toolTip="Colour (and order) by this setting",
                                     sizeAdjustPolicy=QComboBox.SizeAdjustPolicy.AdjustToContents, minimumWidth=130)
        self.align_combo = QComboBox(objectName="compare_align", toolTip="x axis of the loss curves")
        self.align_combo.addItems(ALIGN)
        self.align_combo.setCurrentText(str(settings.value("compare/align", "step")))
        self._group_choice = str(settings.value("compare/group", BY_SETTING))
        self.export_button = QPushButton("Export…", objectName="compare_export", enabled=False)
        self.status = QLabel(objectName="compare_status", wordWrap=True,
                             textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.legend = QLabel(objectName="compare_legend", wordWrap=True)
        self.individual_box = QCheckBox("Each run", objectName="compare_individual",
                                        toolTip="Draw each repeat faintly under its setting's mean and 95% interval")
        self.individual_box.setChecked(str(settings.value("compare/individual", "true")).lower() == "true")

        self.loss_plot = MeanCurvesPlot()
        self.throughput_plot = BarPlot("steady throughput (mean ± 95% CI)", "samples/s")
        self.memory_plot = BarPlot("peak memory (mean ± 95% CI)", "GiB")
        self.speedup_plot = BarPlot("speedup vs baseline (95% CI)", "×")
        self.scaling_plot = ScalingPlot()
        self.bar_plots = (self.throughput_plot, self.memory_plot, self.speedup_plot)
        self._legend: tuple[list[GroupStats], dict[str, tuple[str, str]]] = ([], {})
        for plot in self.bar_plots:
            plot.keyed_changed.connect(self._fill_legend)
        self.numbers = NumbersTable(settings)  # metrics in words; those without data hidden unless asked
        self.table_model, self.table = self.numbers.model, self.numbers.view

        top = QHBoxLayout()
        runs_box = QVBoxLayout()
        runs_box.addWidget(QLabel("Compared runs", objectName="panel_title"))
        runs_box.addWidget(self.runs_list)
        top.addLayout(runs_box, 2)
        controls = QGridLayout()
        controls.addWidget(QLabel("Sweep"), 0, 0)
        controls.addWidget(self.sweep_combo, 0, 1, 1, 3)  # as wide as the row allows: a sweep's name is long
        controls.addWidget(self.add_sweep_button, 0, 4)
        controls.addWidget(QLabel("Baseline"), 1, 0)
        controls.addWidget(self.baseline_combo, 1, 1, 1, 4)
        controls.addWidget(QLabel("Colour by"), 2, 0)
        controls.addWidget(self.group_combo, 2, 1)
        controls.addWidget(QLabel("Align by"), 2, 2)
        controls.addWidget(self.align_combo, 2, 3)
        controls.addWidget(self.individual_box, 2, 4)
        buttons = QHBoxLayout()
        for button in (self.remove_button, self.clear_button, self.export_button):
            buttons.addWidget(button)
        controls.addLayout(buttons, 3, 0, 1, 5)
        top.addLayout(controls, 3)

        # a grid while each plot there can be read (>= 150 px tall, its title whole), else one plot per tab
        self.plot_area = ComparePlots([self.loss_plot, self.throughput_plot, self.memory_plot, self.speedup_plot,
                                       self.scaling_plot], self.legend)
        content = QSplitter(Qt.Orientation.Vertical, childrenCollapsible=False)
        content.addWidget(self.plot_area)
        content.addWidget(self.numbers)
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
        self.individual_box.toggled.connect(self._individual_chosen)
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
        """A RunUpdate: a compared run that has just ended changes the numbers (computed again); a sweep's
        run that changed state may have started or ended its sweep (the sweep chooser is read again)."""
        if update.run is None:
            return
        if update.run.id in self.run_ids and update.run.state in FINAL_STATES:
            self.recompute()
        if update.run.sweep_id:
            self._sweeps_later.start()

    def _remove_selected(self) -> None:
        gone = {item.data(Qt.ItemDataRole.UserRole) for item in self.runs_list.selectedItems()}
        self.set_runs([r for r in self.run_ids if r not in gone])

    def refresh_sweeps(self) -> None:
        """Read the list of sweeps on a worker and fill the chooser."""
        # bound methods, not lambdas: Qt drops a reply whose widget is gone (a window closed while it read)
        self.loader(self.store.list_sweeps, on_return=self._set_sweeps, on_error=self._sweeps_unread)

    def _sweeps_unread(self, exc: Exception) -> None:
        self.status.setText(f"Could not read the sweeps: {exc}")

    def _set_sweeps(self, sweeps: list[SweepRecord]) -> None:
        self.sweeps = sweeps
        combo = self.sweep_combo
        items = [(f"{sweep.name} ({sweep.state})", sweep.id) for sweep in sweeps] or [("no sweeps yet", None)]
        wanted = self._wanted_sweep if any(i == self._wanted_sweep for _, i in items) else combo.currentData()
        if items != [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]:
            combo.clear()  # only when something changed: an open drop-down is not rebuilt under the mouse
            for text, sweep_id in items:
                combo.addItem(text, sweep_id)
        combo.setCurrentIndex(max(0, combo.findData(wanted)))
        self._wanted_sweep = None
        self.add_sweep_button.setEnabled(bool(sweeps))

    def on_sweep_progress(self, progress) -> None:
        """A SweepProgress (the status bar's): a cell that changed or a sweep that ended is read again."""
        if progress.changed is not None or progress.state in SWEEP_FINAL_STATES:
            self._sweeps_later.start()

    def _add_chosen_sweep(self) -> None:
        sweep_id = self.sweep_combo.currentData()
        if sweep_id:
            self.add_sweep(sweep_id)

    def add_sweep(self, sweep_id: str, replace: bool = False) -> None:
        """Add the sweep's finished runs (read on a worker); ``replace``: compare those alone, nothing else."""
        def added(runs) -> None:
            done = [r.id for r in runs if r.state == "finished"]
            skipped = len(runs) - len(done)
            if replace:
                if done:
                    self.baseline = None  # the previous comparison's baseline is not one of these
                    self.set_runs(done)
                index = self.sweep_combo.findData(sweep_id)
                if index >= 0:
                    self.sweep_combo.setCurrentIndex(index)
            else:
                self.add_runs(done)
            verb = "Comparing" if replace else "Added"
            if not done:
                self.status.setText("That sweep has no finished runs yet.")
            elif skipped:
                self.status.setText(f"{verb} {len(done)} finished runs of the sweep ({skipped} not finished left out).")

        self.loader(self.store.sweep_runs, sweep_id, on_return=added,
                    on_error=lambda exc: self.status.setText(f"Could not read the sweep: {exc}"))

    def compare_sweep(self, sweep_id: str) -> None:
        """Compare this sweep's finished runs instead of what was compared (the status bar's Compare)."""
        self._wanted_sweep = sweep_id
        self.refresh_sweeps()
        self.add_sweep(sweep_id, replace=True)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.refresh_sweeps()

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
        self.loader(compare_on_worker, self.store, self.hosts, list(self.run_ids), self.baseline, dict(self.known),
                    dict(self.curves),
                    on_return=lambda done: self._computed(generation, *done),
                    on_error=lambda exc: self._failed(generation, exc))

    def _failed(self, generation: int, exc: Exception) -> None:
        if generation != self._generation:
            return
        self.busy = False
        self.comparison = None
        self.status.setText(f"Could not compare: {exc}")
        self._show_state()

    def _computed(self, generation: int, result: CompareResult, means: dict | None = None) -> None:
        """``means``: each x axis's group mean curves (:func:`compare_on_worker`); None: computed when drawn."""
        if generation != self._generation:
            return
        self.busy = False
        self.known.update(result.final)
        self.curves = result.curves
        self.means = means or {}
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
            item.setToolTip(item.text())
            item.setData(Qt.ItemDataRole.UserRole, run_id)
            self.runs_list.addItem(item)

    def _fill_choices(self) -> None:
        comparison = self.comparison
        self.baseline_combo.clear()
        for g in comparison.groups:
            self.baseline_combo.addItem(f"{g.label} (n={g.n})", g.key)
        self.baseline_combo.setCurrentIndex(self.baseline_combo.findData(comparison.baseline))
        self.group_combo.clear()
        self.group_combo.addItem("each setting", BY_SETTING)
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

    def _individual_chosen(self, on: bool) -> None:
        self.settings.setValue("compare/individual", "true" if on else "false")
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
        self._legend = (groups, colours)
        labels = [f"{g.label}\nn={g.n}" for g in groups]
        bar_colours = [colours[g.key][0] for g in groups]
        unit = comparison.groups[0].runs[0].throughput_unit
        self.throughput_plot.set_y_label(unit)
        memory_unit, scale = figures.memory_unit(g.metrics["mem_peak_gib"].mean for g in groups)
        self.memory_plot.set_y_label(memory_unit)
        for plot, metric, factor, title in ((self.throughput_plot, "throughput", 1.0, "steady throughput"),
                                            (self.memory_plot, "mem_peak_gib", scale, "peak memory")):
            estimates = [g.metrics[metric] for g in groups]
            centres = {e.centre for e in estimates if e.mean is not None and e.n > 1}
            words = figures.interval_words(estimates, centres.pop() if len(centres) == 1 else "")
            plot.show_bars(labels, [None if e.mean is None else e.mean * factor for e in estimates],
                           [figures.estimate_error(e, factor) for e in estimates],
                           bar_colours, "; ".join(sorted({e.reason for e in estimates if e.reason})),
                           notes=[_note(e.mean, e.reason) for e in estimates],
                           title=f"{title} ({words})" if words else title,
                           dots=[[v * factor for v in e.values] for e in estimates])
        ratios = [comparison.speedup[g.key] for g in groups]
        base = comparison.baseline_group.label
        self.speedup_plot.set_y_label("×")
        if len(groups) < 2:
            self.speedup_plot.show_bars(labels, [None] * len(groups), [None] * len(groups), bar_colours,
                                        "One setting only: nothing to compare with the baseline.",
                                        title=f"speedup vs {base}")
        else:
            others = [r for g, r in zip(groups, ratios) if g.key != comparison.baseline]
            words = figures.interval_words(others)
            self.speedup_plot.show_bars(labels, [r.value for r in ratios],
                                        [None if g.key == comparison.baseline else figures.ratio_error(r)
                                         for g, r in zip(groups, ratios)],
                                        bar_colours, "; ".join(sorted({r.reason for r in ratios if r.reason})),
                                        reference=1.0, notes=[_note(r.value, r.reason) for r in ratios],
                                        title=f"speedup vs {base}" + (f" ({words})" if words else ""),
                                        dots=[r.values for r in ratios])
        x_axis = self.align_combo.currentText()
        self.loss_plot.show_groups(comparison, self.curves, x_axis,
                                   {k: c for k, (c, _) in colours.items()}, [g.key for g in groups],
                                   figures.run_labels(comparison), self.individual_box.isChecked(),
                                   self.means.get(x_axis))
        self.scaling_plot.show_scaling(comparison, {k: c for k, (c, _) in colours.items()}, groups)
        self._fill_legend()  # after the bars: it names their keys and marks
        self._fill_table(groups)
        self.plot_area.arrange()  # titles and bars changed: the arrangement that reads best may too

    def _fill_legend(self, *_: object) -> None:
        """Which colour is which; and, when the bars are named A, B, … (long labels), which key is which."""
        groups, colours = self._legend
        text = "Colour: " + "  ".join(f'<span style="color:{c}">■</span> {html.escape(value)}'
                                      for c, value in dict.fromkeys(colours.values()))
        if any(plot.keyed for plot in self.bar_plots):
            text += "<br>Bars: " + "; ".join(f"<b>{figures.group_key(i)}</b> {html.escape(g.label)} (n={g.n})"
                                             for i, g in enumerate(groups))
        if any(note and value is not None for plot in self.bar_plots for note, value in zip(plot.notes, plot.values)):
            text += "<br>* from a run that never settled: the mean of all its intervals after warm-up (hover a plot)"
        self.legend.setText(text)

    def _fill_table(self, groups: list[GroupStats]) -> None:
        self.numbers.fill(self.comparison, groups)

    def table_value(self, group_key: str, metric: str, column: str = "Value") -> float | None:
        """The number behind a table cell (for tests and copy): None when the cell is empty."""
        return table_value(self.table_model, group_key, metric, column)

    def _show_state(self) -> None:
        has = self.comparison is not None and bool(self.run_ids)
        self.stack.setCurrentIndex(1 if has else 0)
        self.export_button.setEnabled(has and not self.busy)
        self.remove_button.setEnabled(bool(self.run_ids))
        self.clear_button.setEnabled(bool(self.run_ids))
        if not self.run_ids:
            self.status.setText("")
