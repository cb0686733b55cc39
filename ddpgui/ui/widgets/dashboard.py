"""Live dashboard of one run: header, loss (EMA + faint raw), throughput, device use, log tail, Stop."""
from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (QCheckBox, QComboBox, QGridLayout, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit,
                               QPushButton, QSlider, QSplitter, QVBoxLayout, QWidget)

from ddpgui.core.live import LiveRun, format_duration, format_rate
from ddpgui.core.manager import RunUpdate
from ddpgui.core.store import RunNotFound, RunStore

from ..plots.buffer import SeriesBuffer, SmoothedBuffer
from ..plots.live_plot import LivePlot

#: Redraw period: at most 20 Hz whatever the data rate.
REDRAW_MS = 50
LOG_LINES = 2000
DEVICE_METRICS = {"GPU utilization %": "util_pct", "GPU memory GiB": "mem_used_gib", "GPU power W": "power_w",
                  "GPU temperature °C": "temp_c"}
CPU_METRICS = ("cpu_pct", "proc_cpu_pct")


def alpha_of(slider_value: int) -> float:
    """Slider 0 (no smoothing) .. 99 (heavy) → EMA weight of the newest point."""
    return max(0.005, 1.0 - slider_value / 100.0)


class Dashboard(QWidget):
    stop_requested = Signal(str)

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.store = store
        self.run_id: str | None = None
        self.live = LiveRun()
        self.t0: float | None = None
        self.loss = SmoothedBuffer(alpha=alpha_of(60))
        self.throughput = SeriesBuffer()
        self.device: dict[tuple[str, int], SeriesBuffer] = {}
        self.gpu_names: dict[int, str] = {}
        self._header_dirty = True

        self.title = QLabel("No run selected", objectName="run_title")
        self.state = QLabel(objectName="run_state")
        self.stats = QLabel(objectName="run_stats")
        self.error = QLabel(objectName="run_error", wordWrap=True, visible=False)
        self.stop_button = QPushButton("Stop", objectName="stop_button", toolTip="Stop the run (Ctrl+.)",
                                       enabled=False)
        self.stop_button.clicked.connect(lambda: self.run_id and self.stop_requested.emit(self.run_id))
        self.smoothing = QSlider(Qt.Orientation.Horizontal, objectName="ema_slider", minimum=0, maximum=99, value=60,
                                 toolTip="EMA smoothing of the loss (the raw curve stays faint behind)")
        self.smoothing.setMaximumWidth(140)
        self.smoothing.valueChanged.connect(self._set_smoothing)
        self.log_y = QCheckBox("log y", objectName="log_y")
        self.log_y.toggled.connect(lambda on: self.loss_plot.getPlotItem().setLogMode(y=on))
        self.device_metric = QComboBox(objectName="device_metric")
        self.device_metric.currentTextChanged.connect(self._show_device_metric)

        self.loss_plot = LivePlot("Loss", "loss", "step")
        self.loss_plot.add_curve("raw", self.loss, None, "#4c8df6", width=1, alpha=70)
        self.loss_plot.add_curve("ema", self.loss.smooth, "loss (EMA)", "#4c8df6", width=2)
        self.rate_plot = LivePlot("Throughput", "samples/s", "seconds")
        self.rate_plot.add_curve("rate", self.throughput, "samples/s", "#f28e2b")
        self.device_plot = LivePlot("Device", "", "seconds")
        self.plots = (self.loss_plot, self.rate_plot, self.device_plot)

        self.log = QPlainTextEdit(objectName="log_tail", readOnly=True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log_find = QLineEdit(objectName="log_find", placeholderText="Search the log", clearButtonEnabled=True)
        self.log_find.returnPressed.connect(self.find_in_log)

        head = QGridLayout()
        head.addWidget(self.title, 0, 0)
        head.addWidget(self.state, 0, 1, Qt.AlignmentFlag.AlignRight)
        head.addWidget(self.stop_button, 0, 2)
        head.addWidget(self.stats, 1, 0, 1, 3)
        head.addWidget(self.error, 2, 0, 1, 3)
        head.setColumnStretch(0, 1)
        options = QHBoxLayout()
        options.addWidget(QLabel("Smoothing"))
        options.addWidget(self.smoothing)
        options.addWidget(self.log_y)
        options.addStretch(1)
        options.addWidget(self.device_metric)
        plots = QGridLayout()
        plots.addWidget(self.loss_plot, 0, 0, 1, 2)
        plots.addWidget(self.rate_plot, 1, 0)
        plots.addWidget(self.device_plot, 1, 1)
        plots_box = QWidget()
        plots_box.setLayout(plots)
        log_box = QWidget()
        log_layout = QVBoxLayout(log_box)
        log_layout.setContentsMargins(0, 0, 0, 0)
        log_layout.addWidget(self.log_find)
        log_layout.addWidget(self.log)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(plots_box)
        split.addWidget(log_box)
        split.setSizes([600, 160])
        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addLayout(options)
        layout.addWidget(split, 1)

        self.timer = QTimer(self, interval=REDRAW_MS)
        self.timer.timeout.connect(self.redraw)
        self.timer.start()

    # ---- loading ---------------------------------------------------------------------------
    def set_run(self, run_id: str | None) -> None:
        """Show ``run_id``: everything stored so far, then live updates."""
        self.run_id = run_id
        self.loss.clear()
        self.throughput.clear()
        self.device.clear()
        self.gpu_names.clear()
        self.device_plot.remove_curves()
        self.log.clear()
        self.t0 = None
        if run_id is None:
            self.live = LiveRun()
            self.title.setText("No run selected")
            self._header_dirty = True
            return
        try:
            run = self.store.get_run(run_id)
        except RunNotFound:
            self.set_run(None)
            return
        cfg = run.config or {}
        self.live = LiveRun(total_steps=run.total_steps, total_minutes=cfg.get("minutes"), state=run.state,
                            message=run.message, hint=run.hint, summary=run.summary or {})
        self.title.setText(run.name or run.id)
        gpus = (run.environment or {}).get("gpu")
        if gpus:
            self.gpu_names[0] = gpus
        metrics = self.store.series(run_id, "metrics.jsonl")
        if len(metrics.get("step", ())):
            self.t0 = float(metrics["t"][0])
            train = np.ones(len(metrics["step"]), dtype=bool)
            if "phase" in metrics and metrics["phase"].dtype == object:
                train = metrics["phase"] != "inference"
            self.loss.extend(metrics["step"][train], metrics.get("loss", np.full(len(train), np.nan))[train])
            rate = metrics.get("samples_per_s")
            if rate is not None:
                self.throughput.extend(metrics["t"][train] - self.t0, rate[train])
            self.live.step = int(metrics["step"][-1])
            for key in ("loss", "samples_per_s", "mem_peak_gib"):
                if key in metrics and metrics[key][-1] == metrics[key][-1]:
                    setattr(self.live, key, float(metrics[key][-1]))
            self.live.started_t = self.t0
            self.live.last_t = float(metrics["t"][-1])
            self.live.first_metric = (self.t0, int(metrics["step"][0]))
        for event in self.store.events(run_id):
            self.live.add_event(event)
        self.live.state, self.live.message, self.live.hint = run.state, run.message, run.hint
        telemetry = self.store.series(run_id, "telemetry.jsonl")
        if len(telemetry.get("t", ())):
            self.t0 = self.t0 if self.t0 is not None else float(telemetry["t"][0])
            self._load_telemetry(telemetry)
        for spool in ("stdout.log", "stderr.log"):
            tail = self.store.log_tail(run_id, spool)
            if tail:
                self.log.appendPlainText(tail.decode("utf-8", "replace").rstrip("\n"))
        self._fill_metric_choices()
        for plot in self.plots:
            plot.mark_dirty()
            plot.enableAutoRange()
        self._header_dirty = True

    # ---- live updates ----------------------------------------------------------------------
    def on_update(self, update: RunUpdate) -> None:
        if update.run_id != self.run_id or self.run_id is None:
            return
        for spool, records in update.records.items():
            for rec in records:
                self.live.add(spool, rec)
                if spool == "metrics.jsonl" and rec.get("step") is not None and rec.get("phase") != "inference":
                    if self.t0 is None:
                        self.t0 = rec.get("t", time.time())
                    loss = rec.get("loss")
                    self.loss.append(rec["step"], np.nan if loss is None else loss)
                    if rec.get("samples_per_s") is not None:
                        self.throughput.append(rec.get("t", time.time()) - self.t0, rec["samples_per_s"])
                    self.loss_plot.mark_dirty()
                    self.rate_plot.mark_dirty()
                elif spool == "telemetry.jsonl":
                    if self.t0 is None:
                        self.t0 = rec.get("t", time.time())
                    self._add_telemetry(rec)
        for spool, data in update.logs.items():
            self.log.appendPlainText(data.decode("utf-8", "replace").rstrip("\n"))
        if update.run is not None:
            self.live.state, self.live.message, self.live.hint = update.run.state, update.run.message, update.run.hint
            if update.run.summary:
                self.live.summary = update.run.summary
        self._header_dirty = True

    def _load_telemetry(self, telemetry: dict[str, np.ndarray]) -> None:
        """Stored telemetry into the device buffers: one extend per (metric, GPU), not a loop per sample."""
        t = telemetry["t"] - (self.t0 or 0.0)
        kinds = telemetry.get("kind")
        is_gpu = kinds == "gpu" if kinds is not None else np.zeros(len(t), dtype=bool)
        groups = [(-1, ~is_gpu, CPU_METRICS)]
        if is_gpu.any():
            gpu_ids = np.nan_to_num(telemetry.get("gpu", np.zeros(len(t))), nan=0.0).astype(int)
            names = telemetry.get("name")
            for gpu in np.unique(gpu_ids[is_gpu]).tolist():
                rows = is_gpu & (gpu_ids == gpu)
                named = [n for n in names[rows] if n] if names is not None else []
                if named:
                    self.gpu_names[gpu] = named[-1]
                groups.append((gpu, rows, DEVICE_METRICS.values()))
        for gpu, rows, metrics in groups:
            for metric in metrics:
                values = telemetry.get(metric)
                if values is None or values.dtype != np.float64:
                    continue
                keep = rows & ~np.isnan(values)
                if keep.any():
                    self.device.setdefault((metric, gpu), SeriesBuffer()).extend(t[keep], values[keep])
        self.device_plot.mark_dirty()

    def _add_telemetry(self, rec: dict) -> None:
        t = float(rec.get("t", 0.0)) - (self.t0 or 0.0)
        if rec.get("kind") == "gpu":
            gpu = int(rec.get("gpu", 0) or 0)
            if rec.get("name"):
                self.gpu_names[gpu] = rec["name"]
            metrics = DEVICE_METRICS.values()
        else:
            gpu = -1
            metrics = CPU_METRICS
        new = False
        for metric in metrics:
            value = rec.get(metric)
            if value is None or (isinstance(value, float) and value != value):
                continue
            key = (metric, gpu)
            if key not in self.device:
                self.device[key] = SeriesBuffer()
                new = True
            self.device[key].append(t, value)
        if new:
            self._fill_metric_choices()
        self.device_plot.mark_dirty()

    def _fill_metric_choices(self) -> None:
        gpus = any(g >= 0 for _, g in self.device)
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
        if label in DEVICE_METRICS:
            metric = DEVICE_METRICS[label]
            item.setTitle(label)
            for (name, gpu), buffer in sorted(self.device.items(), key=lambda kv: kv[0][1]):
                if name == metric:
                    self.device_plot.add_curve(f"gpu{gpu}", buffer, f"GPU {gpu} {self.gpu_names.get(gpu, '')}".strip())
        else:
            item.setTitle("CPU use %")
            for metric, label_text in (("cpu_pct", "host CPU %"), ("proc_cpu_pct", "run's processes CPU %")):
                if (metric, -1) in self.device:
                    self.device_plot.add_curve(metric, self.device[(metric, -1)], label_text)
        self.device_plot.mark_dirty()

    def _set_smoothing(self, value: int) -> None:
        self.loss.set_alpha(alpha_of(value))
        self.loss_plot.mark_dirty()

    # ---- drawing ---------------------------------------------------------------------------
    def redraw(self) -> None:
        """Timer tick: push changed buffers to their curves and refresh the header."""
        for plot in self.plots:
            plot.redraw()
        if self._header_dirty or (self.live.state in ("running", "starting")):
            self._render_header()
            self._header_dirty = False

    def _render_header(self) -> None:
        live = self.live
        active = self.run_id is not None and live.state not in ("finished", "failed", "stopped")
        self.stop_button.setEnabled(active)
        self.state.setText(live.state if self.run_id else "")
        self.state.setProperty("state", live.state)
        self.state.style().unpolish(self.state)
        self.state.style().polish(self.state)
        if self.run_id is None:
            self.stats.setText("Select a run in the table, or launch one.")
            self.error.setVisible(False)
            return
        steps_per_s = None
        if live.first_metric and live.last_t and live.last_t > live.first_metric[0]:
            steps_per_s = (live.step - live.first_metric[1]) / (live.last_t - live.first_metric[0])
        total = f"/{live.total_steps}" if live.total_steps else ""
        loss = f"{live.loss:.4f}" if live.loss is not None else "–"
        parts = [f"step {live.step}{total}", f"loss {loss}", f"elapsed {format_duration(live.elapsed_s)}",
                 f"ETA {format_duration(live.eta_s) if active else '–'}",
                 f"{steps_per_s:.2f} steps/s" if steps_per_s else "– steps/s",
                 format_rate(live.steady_samples_per_s or live.samples_per_s, "samples/s")]
        if live.compile_s is not None:
            parts.append(f"compile {live.compile_s:.1f} s")
        if live.mem_peak_gib:
            parts.append(f"peak mem {live.mem_peak_gib:.2f} GiB")
        self.stats.setText("   ·   ".join(parts))
        if live.message and live.state == "failed":
            self.error.setText(f"<b>{live.message}</b>" + (f"<br>Hint: {live.hint}" if live.hint else ""))
            self.error.setVisible(True)
        else:
            self.error.setVisible(False)

    def find_in_log(self) -> bool:
        text = self.log_find.text()
        if not text:
            return False
        if self.log.find(text):
            return True
        self.log.moveCursor(QTextCursor.MoveOperation.Start)
        return self.log.find(text)
