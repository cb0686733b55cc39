"""Live dashboard of one or several runs (overlaid): header, loss, throughput, device use, log tail, Stop.

A run's stored series are read on a worker thread (:func:`~ddpgui.core.runs.traces.load_trace`); live updates
that arrive meanwhile are queued and replayed after it by ``seq``, so nothing is shown
twice or lost.  Curves redraw on a timer (at most 20 Hz) as exact per-pixel envelopes.
A multi-node run shows each node's telemetry ("node 1 GPU 0"), each node's state in
the header, and one node's log tail at a time (node 0 first).  A Slurm run waiting in the queue
shows its job and the reason instead of its progress, and its nodes by their Slurm names once placed.
A script's series (where each came from, a run without a metric, the loss chosen) are :mod:`.run_series`'s.
"""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.runs.labels import differing_parts
from ddpgui.core.runs.live import LiveRun, stats_line
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.runs.nodes import NodeState, node_line, node_states
from ddpgui.core.runs.traces import TraceData, load_trace
from ddpgui.core.store import RunNotFound, RunStore
from remote_runner.spools import EVENTS
from remote_runner.status import FINAL_STATES

from ..plots.live_plot import PALETTE, LivePlot
from ..plots.traces import CPU_METRICS, DEVICE_METRICS, RunTrace, alpha_of
from .dashboard_header import ElidedLabel, StallLine, never_widening
from .log_tail import LogTail, read_inline
from .name_fit import FittedLabel
from .run_series import RunSeries
from .slurm_view import queued_text, slurm_node_line, slurm_of

#: Redraw period: at most 20 Hz whatever the data rate.
REDRAW_MS = 50
X_AXES = ("step", "elapsed", "wall clock")
#: After a multi-node run ended, re-read node states this often, this many times, until every node has ended.
NODE_RETRY_MS, NODE_RETRIES = 1000, 30


class Dashboard(QWidget):
    stop_requested = Signal(str)

    def __init__(self, store: RunStore, parent=None, loader: Callable | None = None):
        """``loader(func, *args, on_return=...)`` runs the store reads off the GUI thread (a WorkerPool's
        ``start``); without one they run inline."""
        super().__init__(parent)
        self.store = store
        self.loader = loader
        self.traces: dict[str, RunTrace] = {}
        self.slurm: dict[str, dict] = {}  # run id → its Slurm facts (job, state, reason, nodes); Slurm runs only
        self.x_axis = "step"
        self._header_dirty = True

        # nothing in the header may widen the window: one-line labels elide (full text as tooltip), others wrap
        self.title = FittedLabel("No run selected", objectName="run_title")  # a sweep's shared name cut first
        self.overlaid = QLabel(objectName="run_overlaid", visible=False)  # "+1 overlaid", never elided
        self.overlaid.setForegroundRole(QPalette.ColorRole.PlaceholderText)  # about the title, apart from the state
        self.overlaid.setContentsMargins(0, 0, 12, 0)
        self.legend_names: dict[str, str] = {}  # run id → its name in the legends (where overlaid names differ)
        self.state = QLabel(objectName="run_state")
        self.stats = ElidedLabel(objectName="run_stats")
        self.stall = StallLine(objectName="run_stall")  # "stalled? · why" or a slow phase (set_stalls)
        self.stalls: dict = {}  # run id → its StallDecision, from the window's StallWatch
        self.error = never_widening(QLabel(objectName="run_error", wordWrap=True, visible=False))
        self.nodes = never_widening(QLabel(objectName="run_nodes", wordWrap=True, visible=False))
        self.advice = never_widening(QLabel(objectName="run_advice", wordWrap=True, visible=False))
        self.stop_button = QPushButton("Stop", objectName="stop_button", toolTip="Stop the run (Ctrl+.)",
                                       enabled=False)
        self.stop_button.clicked.connect(lambda: self.run_id and self.stop_requested.emit(self.run_id))
        self.smoothing = QSlider(Qt.Orientation.Horizontal, objectName="ema_slider", minimum=0, maximum=99, value=60,
                                 toolTip="EMA smoothing of every curve (loss, throughput, device; raw stays faint behind)")
        self.smoothing.setMaximumWidth(140)
        self.smoothing.valueChanged.connect(self._set_smoothing)
        self.log_y = QCheckBox("log y", objectName="log_y")
        self.log_y.toggled.connect(lambda on: self.loss_plot.getPlotItem().setLogMode(y=on))
        self.x_axis_box = QComboBox(objectName="x_axis", toolTip="x axis of the loss plot")
        self.x_axis_box.addItems(X_AXES)
        self.x_axis_box.currentTextChanged.connect(self.set_x_axis)
        self.device_metric = QComboBox(objectName="device_metric")
        self.device_metric.currentTextChanged.connect(self._show_device_metric)

        self.loss_plot = LivePlot("Loss", "loss", "step")
        self.rate_plot = LivePlot("Throughput", "samples/s", "elapsed (s)")
        self.device_plot = LivePlot("Device", "", "elapsed (s)")
        self.plots = (self.loss_plot, self.rate_plot, self.device_plot)
        self.series = RunSeries(self, self._read)  # where each series came from, no metric, the loss chosen

        self.log_tail = LogTail(store, self._read)
        self.log, self.log_find, self.log_node = self.log_tail.log, self.log_tail.find_box, self.log_tail.node_box
        self.log_tail.open_requested.connect(lambda: self.run_id and self.open_logs(self.run_id))
        self.viewers: list = []  # open log viewers (Open logs): they follow their run's live lines
        self.empty = QLabel("No run selected — launch one on the left or pick one in Runs", objectName="empty_state",
                            alignment=Qt.AlignmentFlag.AlignCenter, wordWrap=True)
        font = self.empty.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        self.empty.setFont(font)
        self.empty.setForegroundRole(QPalette.ColorRole.PlaceholderText)

        head = QGridLayout()
        head.addWidget(self.title, 0, 0)
        head.addWidget(self.overlaid, 0, 1)
        head.addWidget(self.state, 0, 2, Qt.AlignmentFlag.AlignRight)
        head.addWidget(self.stop_button, 0, 3)
        for row, widget in enumerate((self.stats, self.stall, self.nodes, self.error, self.advice,
                                      self.series.warning), start=1):
            head.addWidget(widget, row, 0, 1, 4)
        head.setColumnStretch(0, 1)
        self.options = QWidget()
        options = QHBoxLayout(self.options)
        options.setContentsMargins(0, 0, 0, 0)
        options.addWidget(QLabel("x axis"))
        options.addWidget(self.x_axis_box)
        options.addWidget(QLabel("Smoothing"))
        options.addWidget(self.smoothing)
        options.addWidget(self.log_y)
        options.addWidget(self.series.button)
        options.addStretch(1)
        options.addWidget(self.device_metric)
        plots = QGridLayout()
        plots.addWidget(self.loss_plot, 0, 0, 1, 2)
        plots.addWidget(self.rate_plot, 1, 0)
        plots.addWidget(self.device_plot, 1, 1)
        plots_box = QWidget()
        plots_box.setLayout(plots)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(plots_box)
        self.split.addWidget(self.log_tail)
        self.split.setSizes([600, 160])
        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addWidget(self.options)
        layout.addWidget(self.split, 1)
        layout.addWidget(self.empty, 1)
        self._show_empty(True)

        # one plot per tick, in turn: each plot still redraws at most every REDRAW_MS, and a frame's
        # painting is split into three short blocks of the event loop instead of one long one
        self._next_plot = 0
        self.timer = QTimer(self, interval=REDRAW_MS // len(self.plots))
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    # ---- which runs ------------------------------------------------------------------------
    @property
    def run_id(self) -> str | None:
        """The primary run (the first selected): its header, log and Stop button are shown."""
        return next(iter(self.traces), None)

    @property
    def run_ids(self) -> list[str]:
        return list(self.traces)

    @property
    def live(self) -> LiveRun:
        trace = self.traces.get(self.run_id) if self.run_id else None
        return trace.live if trace else LiveRun()

    def set_run(self, run_id: str | None) -> None:
        self.set_runs([run_id] if run_id else [])

    def set_runs(self, run_ids: list[str]) -> None:
        """Show these runs overlaid (the first one is primary): stored data, then live updates."""
        run_ids = list(dict.fromkeys(run_ids))
        if run_ids == self.run_ids:
            return
        old, new = self.traces, []
        self.traces = {}
        alpha = alpha_of(self.smoothing.value())
        for i, run_id in enumerate(run_ids):
            color = PALETTE[i % len(PALETTE)]
            trace = old.get(run_id)
            if trace is None:
                trace = RunTrace(run_id, color, alpha)
                new.append(trace)
            trace.color = color
            self.traces[run_id] = trace
        self.log_tail.show_trace(self.traces.get(self.run_id) if self.run_id else None)
        self._show_empty(not self.traces)
        self._rebuild_curves(reset_view=bool(new))
        self._header_dirty = True
        self.series.show_run(self.run_id)
        for trace in new:
            self._load(trace)

    def reload_run(self, run_id: str) -> None:
        """Read a shown run again from the store (its loss series was chosen again); live updates meanwhile wait."""
        old = self.traces.get(run_id)
        if old is None:
            return
        self.traces[run_id] = RunTrace(run_id, old.color, old.alpha)
        self._rebuild_curves()
        self._load(self.traces[run_id])

    def _load(self, trace: RunTrace) -> None:
        def failed(exc: Exception) -> None:
            if self.traces.get(trace.run_id) is not trace:
                return
            if isinstance(exc, RunNotFound):  # deleted meanwhile
                del self.traces[trace.run_id]
                self._rebuild_curves()
            else:
                trace.live.state, trace.live.message = "failed", f"could not read the run: {exc}"
                trace.loaded = True
            self._header_dirty = True

        def done(data: TraceData) -> None:
            if self.traces.get(trace.run_id) is trace:
                self._loaded(trace, data)

        self._read(load_trace, self.store, trace.run_id, on_return=done, on_error=failed)

    def _loaded(self, trace: RunTrace, data: TraceData) -> None:
        trace.apply(data, self.x_axis)
        self.slurm.update({trace.run_id: slurm_of(data.run)} if slurm_of(data.run) else {})
        if trace.run_id == self.run_id:
            self.log_tail.show_trace(trace)
            self.series.refresh(trace.run_id)
        pending, trace.pending = trace.pending, []
        for update in pending:  # what arrived while the store was read: only records it did not have
            records = {s: [r for r in recs if r.get("seq", 0) > data.last_seq.get((s, update.node), -1)]
                       for s, recs in update.records.items()}
            self._apply_update(trace, RunUpdate(update.run_id, update.node, records=records, logs=update.logs,
                                                run=update.run))
        self._rebuild_curves()
        self._header_dirty = True

    def _read(self, func: Callable, *args: object, on_return: Callable, on_error: Callable | None = None) -> None:
        """Run a store read off the GUI thread (inline without a loader)."""
        (self.loader or read_inline)(func, *args, on_return=on_return, on_error=on_error)

    def _refresh_nodes(self, trace: RunTrace) -> None:
        """Re-read a multi-node run's per-node states (on its state changes and node events only)."""
        trace.nodes_asked += 1
        asked = trace.nodes_asked

        def done(states: list[NodeState]) -> None:
            # reads run on workers and can finish out of order: an older read must not overwrite a newer one
            if self.traces.get(trace.run_id) is trace and asked == trace.nodes_asked:
                trace.nodes = states
                self._header_dirty = True
                if trace.run_id == self.run_id and [s.label for s in states] != self.log_tail.node_labels():
                    self.log_tail.fill_nodes()  # a Slurm node's name is known once its job has placed it
                if trace.run_id == self.run_id:
                    self.log_tail.run_changed()  # every node has ended: the run's end lines
                # the run has ended but a node's own end is not stored yet: look again shortly (bounded)
                if trace.live.state in FINAL_STATES and not all(n.final for n in states) \
                        and trace.nodes_retries < NODE_RETRIES:
                    trace.nodes_retries += 1
                    QTimer.singleShot(NODE_RETRY_MS, lambda: self.traces.get(trace.run_id) is trace
                                      and self._refresh_nodes(trace))

        self._read(lambda store, run_id: node_states(store, store.get_run(run_id)), self.store, trace.run_id,
                   on_return=done, on_error=lambda exc: None)

    # ---- curves ----------------------------------------------------------------------------
    def _label(self, trace: RunTrace, text: str) -> str:
        return f"{self.legend_names.get(trace.run_id, trace.name)} {text}".strip() if len(self.traces) > 1 else text

    def _rebuild_curves(self, reset_view: bool = False) -> None:
        """Curves for the runs shown; ``reset_view``: a run was added, so no axis keeps the previous runs' range.
        Overlaid runs are named in the legends by the words their names differ in (a sweep's shared name left out)."""
        self.loss_plot.remove_curves()
        self.rate_plot.remove_curves()
        self.legend_names = dict(zip(self.traces, differing_parts([t.name for t in self.traces.values()])))
        for trace in self.traces.values():
            self.loss_plot.add_curve(f"{trace.run_id}:raw", trace.loss, None, trace.color, alpha=70)
            self.loss_plot.add_curve(f"{trace.run_id}:ema", trace.loss.smooth, self._label(trace, "") or "loss (EMA)",
                                     trace.color)
            self.rate_plot.add_curve(f"{trace.run_id}:rate:raw", trace.throughput, None, trace.color, alpha=70)
            self.rate_plot.add_curve(f"{trace.run_id}:rate", trace.throughput.smooth,
                                     self._label(trace, "") or "samples/s", trace.color)
        self._fill_metric_choices()
        for plot in self.plots:
            if reset_view:
                plot.reset_view()
            plot.enableAutoRange()

    def _fill_metric_choices(self) -> None:
        gpus = any(g >= 0 for trace in self.traces.values() for _, g, _ in trace.device)
        choices = list(DEVICE_METRICS) if gpus else ["CPU use %"]
        current = self.device_metric.currentText()
        if [self.device_metric.itemText(i) for i in range(self.device_metric.count())] != choices:
            self.device_metric.blockSignals(True)
            self.device_metric.clear()
            self.device_metric.addItems(choices)
            self.device_metric.blockSignals(False)
            if current in choices:
                self.device_metric.setCurrentText(current)
        self._show_device_metric(self.device_metric.currentText())

    def _show_device_metric(self, label: str) -> None:
        self.device_plot.remove_curves()
        item = self.device_plot.getPlotItem()
        many = len(self.traces) > 1
        # overlaid runs: one legend entry per run (its colour); the line styles are told in the title
        key_text = {True: " · solid host, dashed run's processes", False: " · GPU 0 solid, 1 dashed, 2 dotted"}
        item.setTitle((label or "Device") + (key_text[label not in DEVICE_METRICS] if many else ""))
        styles = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine, Qt.PenStyle.DashDotLine)
        for trace in self.traces.values():
            # a multi-node run's curves are named by node: "node 1 GPU 0 …", "node 1 host CPU %"
            key = (lambda node, t=trace: f"{t.run_id}:node{node}:") if trace.multinode else (lambda node, t=trace: f"{t.run_id}:")
            who = (lambda node: f"node {node} ") if trace.multinode else (lambda node: "")
            if label in DEVICE_METRICS:
                metric = DEVICE_METRICS[label]
                gpus = sorted((node, gpu) for name, gpu, node in trace.device if name == metric)
                for i, (node, gpu) in enumerate(gpus):
                    name = trace.gpu_names.get((node, gpu), trace.gpu_names.get((0, gpu), ""))
                    text = self._label(trace, f"{who(node)}GPU {gpu} {name}".strip())
                    # one colour per run when overlaid (GPUs by line style), one per GPU otherwise
                    self.device_plot.add_curve(f"{key(node)}gpu{gpu}", trace.device[metric, gpu, node].smooth, text,
                                               trace.color if many else PALETTE[i % len(PALETTE)],
                                               style=styles[i % len(styles)] if many else Qt.PenStyle.SolidLine,
                                               legend=not many or i == 0)
            else:
                nodes = sorted({node for _, gpu, node in trace.device if gpu < 0})
                for node in nodes:
                    for i, (metric, text) in enumerate(CPU_METRICS.items()):
                        if (metric, -1, node) in trace.device:
                            color = trace.color if many else PALETTE[(i + 1 + 2 * node) % len(PALETTE)]
                            self.device_plot.add_curve(f"{key(node)}{metric}", trace.device[metric, -1, node].smooth,
                                                       self._label(trace, f"{who(node)}{text}"), color,
                                                       style=styles[i], legend=not many or (i, node) == (0, nodes[0]))

    def set_x_axis(self, x_axis: str) -> None:
        """Step, elapsed seconds (since each run's start) or wall clock, for all plots."""
        if x_axis not in X_AXES or x_axis == self.x_axis:
            return
        for trace in self.traces.values():
            trace.set_x_axis(self.x_axis, x_axis)
        self.x_axis = x_axis
        if self.x_axis_box.currentText() != x_axis:
            self.x_axis_box.setCurrentText(x_axis)
        time_label = "time" if x_axis == "wall clock" else "elapsed (s)"
        self.loss_plot.set_wall_clock(x_axis == "wall clock", "step" if x_axis == "step" else time_label)
        for plot in (self.rate_plot, self.device_plot):
            plot.set_wall_clock(x_axis == "wall clock", time_label)
        for plot in self.plots:
            plot.mark_dirty()
            plot.enableAutoRange()

    def _set_smoothing(self, value: int) -> None:
        """One control for every series: loss, throughput and each device curve."""
        for trace in self.traces.values():
            trace.set_alpha(alpha_of(value))
        for plot in self.plots:
            plot.mark_dirty()

    # ---- live updates ----------------------------------------------------------------------
    def on_update(self, update: RunUpdate) -> None:
        for viewer in self.viewers:
            viewer.on_update(update)
        trace = self.traces.get(update.run_id)
        if trace is None:
            return
        if not trace.loaded:
            trace.pending.append(update)
            return
        self._apply_update(trace, update)

    def _apply_update(self, trace: RunTrace, update: RunUpdate) -> None:
        for spool, records in update.records.items():
            if not records:
                continue
            metrics, device, new_curve = trace.add_records(spool, records, self.x_axis, update.node)
            if metrics:
                self.loss_plot.mark_dirty(f"{trace.run_id}:raw")
                self.loss_plot.mark_dirty(f"{trace.run_id}:ema")
                self.rate_plot.mark_dirty(f"{trace.run_id}:rate")
                self.rate_plot.mark_dirty(f"{trace.run_id}:rate:raw")
            if new_curve:
                self._fill_metric_choices()
            elif device:
                self.device_plot.mark_dirty()
        if trace.run_id == self.run_id:
            self.log_tail.on_update(update)
            self.series.on_update(trace.run_id, update)
        changed = False  # the run's state or message (not just its last step)
        if update.run is not None:
            live, run = trace.live, update.run
            changed = (live.state, live.message) != (run.state, run.message)
            live.set_run(run)  # state, message, hint, summary, and the start and end elapsed time is measured by
            self.slurm.update({trace.run_id: slurm_of(run)} if slurm_of(run) else {})
            if trace.run_id == self.run_id and not trace.multinode:
                self.log_tail.run_changed()  # ended: the run's end lines follow its log
        # a node can end after the run's state was set (a stop marks the run first): read again until all have
        lagging = update.run is not None and not update.run.active and not all(n.final for n in trace.nodes)
        if trace.multinode and (changed or lagging or update.records.get(EVENTS)):
            self._refresh_nodes(trace)
        self._header_dirty = True

    # ---- drawing ---------------------------------------------------------------------------
    def _tick(self) -> None:
        self.plots[self._next_plot].redraw()
        self._next_plot = (self._next_plot + 1) % len(self.plots)
        if self._next_plot == 0:
            self._redraw_header()

    def redraw(self) -> None:
        """Push every plot's changed buffers to their curves and refresh the header."""
        for plot in self.plots:
            plot.redraw()
        self._redraw_header()

    def _redraw_header(self) -> None:
        if self._header_dirty or self.live.state in ("running", "starting"):
            self._render_header()
            self._header_dirty = False

    def set_stalls(self, decisions: dict) -> None:
        """The stall watch's decisions (run id → StallDecision), after each of its checks."""
        self.stalls = dict(decisions)
        self._header_dirty = True

    def _render_header(self) -> None:
        live = self.live
        self._show_empty(self.run_id is None)
        active = self.run_id is not None and live.state not in FINAL_STATES
        self.stop_button.setEnabled(active)
        self.stall.show_decision(self.stalls.get(self.run_id) if active and live.state == "running" else None)
        self.state.setText(live.state if self.run_id else "")
        if self.state.property("state") != live.state:
            self.state.setProperty("state", live.state)
            self.state.style().unpolish(self.state)
            self.state.style().polish(self.state)
        if self.run_id is None:
            self.title.setText("No run selected")
            self.overlaid.setVisible(False)
            self.stats.setText("Select a run in the table, or launch one.")
            self.error.setVisible(False)
            self.advice.setVisible(False)
            return
        primary = self.traces[self.run_id]
        others = [t.name for t in self.traces.values() if t is not primary]
        self.title.setText(primary.name)
        self.overlaid.setText(f"+{len(others)} overlaid")
        self.overlaid.setToolTip("Overlaid on the plots:\n" + "\n".join(others))
        self.overlaid.setVisible(bool(others))
        self.series.show_placeholders()  # a run that ended before its first point says so
        slurm = self.slurm.get(self.run_id)
        self.stats.setText(queued_text(live.message) if live.state == "queued"
                           else stats_line(live, active, primary.script))
        self.nodes.setVisible(primary.multinode or slurm is not None)
        if slurm is not None:  # each node's state, by its Slurm name once the job has placed it
            self.nodes.setText(slurm_node_line(live.state, primary.nodes, slurm))
        elif primary.multinode:
            self.nodes.setText(node_line(primary.nodes))
        if live.message and live.state == "failed":
            self.error.setText(f"<b>{live.message}</b>" + (f"<br>Hint: {live.hint}" if live.hint else ""))
            self.error.setVisible(True)
        else:
            self.error.setVisible(False)
        hint = f"Hint: {live.hint}" if live.state == "queued" and live.hint else live.pipeline_hint
        self.advice.setVisible(bool(hint))
        if hint:
            self.advice.setText(hint)

    def header_details(self, details: str) -> None:
        """Rich text the header's tooltip shows under its lines (the primary run's series and their sources)."""
        for label in (self.title, self.stats):
            label.set_details(details)

    def find_in_log(self) -> bool:
        return self.log_tail.find()

    def _show_empty(self, empty: bool) -> None:
        """No run: one clear empty state instead of a blank header, empty plots and controls with nothing to do."""
        self.empty.setVisible(empty)
        for widget in (self.title, self.state, self.stats, self.stop_button, self.options, self.split):
            widget.setVisible(not empty)

    def open_logs(self, run_id: str):
        """The run's full logs in a viewer (Open logs): each node's stdout and stderr, searchable, following the run."""
        from ..dialogs.log_viewer import LogViewer

        viewer = LogViewer(self.store, run_id, read=self._read, parent=self.window())
        self.viewers.append(viewer)
        viewer.finished.connect(lambda _: viewer in self.viewers and self.viewers.remove(viewer))
        viewer.show()
        return viewer
