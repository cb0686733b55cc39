"""One host's GPUs as nvitop shows them: a device table, a small utilisation history and the processes on
each GPU; on a CPU host its load, memory and busiest processes.

Fed with :class:`~ddpgui.core.gpus.snapshot.HostSnapshot` objects on the GUI thread.  A snapshot updates the
tables in place (the rows are rebuilt only when the GPUs themselves change); a problem keeps the last data,
marked stale, with what happened and what to do.
"""
from __future__ import annotations

import html
import time

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from ...core.gpus.snapshot import GpuProcess, GpuState, HostSnapshot
from ...core.runs.stalls import format_gpus
from .dashboard_header import ElidedLabel, never_widening
from .gpu_parts import (
    BUSY_COLOR,
    LOST_COLOR,
    STALE_COLOR,
    BarDelegate,
    History,
    Meter,
    age_text,
    cell,
    copyable,
    exact_memory,
    format_memory,
    format_mib,
    fraction,
    gpu_color,
    gpu_label,
    level_color,
    mig_text,
    one_line,
    set_cell,
    state_text,
    state_tip,
)

RIGHT = Qt.AlignmentFlag.AlignRight
DEVICE_COLUMNS = (("GPU", "The GPU's index on that host (CUDA_VISIBLE_DEVICES counts these)", 48),
                  ("Name", "The GPU's model", 150),
                  ("Utilisation", "How busy the GPU's cores were over the last sample", 110),
                  ("Memory", "GPU memory used of its total", 150),
                  ("Power", "Power drawn now, watts", 60),
                  ("Temp", "GPU temperature, °C", 52),
                  ("MIG", "Multi-Instance GPU mode: the GPU split into smaller devices", 96),
                  ("State", "Free: no compute process and under 1 GiB of memory used", 0))
PROCESS_COLUMNS = (("GPU", "The GPU the process runs on", 48), ("PID", "The process id on that host", 72),
                   ("User", "Who runs it; ? when the owner could not be read (hover for why)", 96),
                   ("Command", "The process's command line", 0), ("GPU memory", "GPU memory the process holds", 96))
TOP_COLUMNS = (("User", "Who runs it", 96), ("PID", "The process id on that host", 72),
               ("Command", "The process's command line", 0), ("CPU %", "CPU used; 100% is one core", 64),
               ("RSS", "Resident memory", 88))
#: Hosts whose utilisation history is kept (the GPU view switches between hosts).
HISTORY_HOSTS = 32


def _table(columns, name: str, delegate_columns=()) -> QTableWidget:
    table = QTableWidget(0, len(columns), objectName=name)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideRight)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
    table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    header = table.horizontalHeader()
    for i, (title, tip, width) in enumerate(columns):
        item = cell(title, tip)
        table.setHorizontalHeaderItem(i, item)
        if width:
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.Interactive)
            table.setColumnWidth(i, width)
        else:
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.Stretch)
    header.setMinimumSectionSize(36)
    copyable(table)
    if delegate_columns:
        delegate = BarDelegate(table)
        for column in delegate_columns:
            table.setItemDelegateForColumn(column, delegate)
    return table


def _fill_rows(table: QTableWidget, rows: int, aligns=()) -> bool:
    """``rows`` rows of cells; returns whether the row count changed (existing cells are kept)."""
    before = table.rowCount()
    if before == rows:
        return False
    table.setRowCount(rows)
    for row in range(before, rows):
        for column in range(table.columnCount()):
            table.setItem(row, column, cell(align=RIGHT if column in aligns else None))
    return True


def _number(value: float | None, unit: str, digits: int = 0) -> str:
    return "–" if value is None else f"{value:.{digits}f}{unit}"


class GpuView(QWidget):
    """One host: header, problem line, GPUs and their processes, or a CPU host's load and top processes."""

    connect_requested = Signal(str)  # the Connect button of a host not connected

    def __init__(self, parent=None):
        super().__init__(parent)
        self.host: str | None = None
        self.display = ""
        self.snapshot: HostSnapshot | None = None
        self.received: float | None = None  # time.monotonic() when the snapshot shown arrived
        self.stale = False
        self._status = ""
        self._shape: tuple | None = None
        self._histories: dict[str, History] = {}
        self.header = ElidedLabel(objectName="gpu_header")
        font = self.header.font()
        font.setBold(True)
        self.header.setFont(font)
        self.problem = never_widening(QLabel(objectName="gpu_problem", wordWrap=True, visible=False))
        self.problem.setTextFormat(Qt.TextFormat.RichText)
        self.cpu_line = ElidedLabel(objectName="gpu_cpu_line")
        self.notes = ElidedLabel(objectName="gpu_notes", visible=False)  # what the monitor could not read
        self.notes.setStyleSheet(f"color: {BUSY_COLOR.name()}")

        self.devices = _table(DEVICE_COLUMNS, "gpu_devices", delegate_columns=(2, 3))
        self.processes = _table(PROCESS_COLUMNS, "gpu_processes")
        self.process_note = ElidedLabel(objectName="gpu_process_note", visible=False)
        self.plot = pg.PlotWidget(objectName="gpu_history", background=None)
        self.plot.setToolTip("GPU utilisation over the last 5 minutes, one line per GPU in the colour of its index")
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        item = self.plot.getPlotItem()
        item.hideAxis("bottom")
        item.getAxis("left").setWidth(44)
        item.getAxis("left").setTicks([[(0, "0"), (50, "50%"), (100, "100%")]])
        item.showGrid(x=False, y=True, alpha=0.2)
        self.plot.setYRange(-12, 112, padding=0)
        self.plot.setFixedHeight(100)
        self._curves: list[pg.PlotDataItem] = []

        gpu_page = QWidget()
        gpu_layout = QVBoxLayout(gpu_page)
        gpu_layout.setContentsMargins(0, 0, 0, 0)
        # the GPUs as tall as their rows (the table's maximum) unless the page is short; the processes the rest
        gpu_layout.addWidget(self.devices, 5)
        gpu_layout.addWidget(self.plot)
        gpu_layout.addWidget(QLabel("Processes on the GPUs", objectName="panel_title",
                                    toolTip="Every compute process on this host's GPUs, as its driver lists them"))
        gpu_layout.addWidget(self.processes, 2)
        gpu_layout.addWidget(self.process_note)

        cpu_page = QWidget()
        cpu_layout = QVBoxLayout(cpu_page)
        cpu_layout.setContentsMargins(0, 0, 0, 0)
        meters = QHBoxLayout()
        self.load_meter = Meter(tip="Load average over 1 minute against the host's CPU count")
        self.memory_meter = Meter(tip="Memory used (total minus available) of the host's total")
        for title, meter in (("Load", self.load_meter), ("Memory", self.memory_meter)):
            meters.addWidget(QLabel(title, toolTip=meter.toolTip()))
            meters.addWidget(meter, 1)
        cpu_layout.addLayout(meters)
        cpu_layout.addWidget(QLabel("Busiest processes", objectName="panel_title",
                                    toolTip="The host's processes using the most CPU, then memory"))
        self.top = _table(TOP_COLUMNS, "gpu_top_processes")
        cpu_layout.addWidget(self.top, 1)

        self.pages = QStackedWidget()
        self.pages.addWidget(gpu_page)
        self.pages.addWidget(cpu_page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        self.connect_button = QPushButton("Connect", objectName="gpu_connect", visible=False,
                                          toolTip="Connect to this host and start watching its GPUs")
        self.connect_button.clicked.connect(lambda: self.host and self.connect_requested.emit(self.host))
        top.addWidget(self.connect_button)
        layout.addLayout(top)
        layout.addWidget(self.problem)
        layout.addWidget(self.cpu_line)
        layout.addWidget(self.notes)
        layout.addWidget(self.pages, 1)
        self._tick = QTimer(self, interval=1000)
        self._tick.timeout.connect(self._update_header)
        self.clear()

    # --- the API the window uses ----------------------------------------------------------------------------

    def set_host(self, host: str, display: str = "") -> None:
        """Show ``host`` (``display``: its name in the hosts panel); another host's data is cleared."""
        if host != self.host:
            self.clear()
            self.host = host
        self.display = display or host
        self._update_header()

    def show_snapshot(self, host: str, snapshot: HostSnapshot, received: float | None = None) -> None:
        """The host's latest snapshot (``received``: its time.monotonic() arrival, default now)."""
        if host != self.host:
            self.set_host(host)
        self.snapshot, self.received = snapshot, time.monotonic() if received is None else received
        self._status = ""
        self._set_stale(False)
        self.problem.setVisible(False)
        self._show_cpu_line(snapshot)
        self._show_notes(snapshot)
        if snapshot.gpus:
            self.pages.setCurrentIndex(0)
            self._show_devices(snapshot)
            self._show_processes(snapshot)
            self._add_history(host, snapshot)
        else:
            self.pages.setCurrentIndex(1)
            self._show_cpu(snapshot)
        self._update_header()
        if not self._tick.isActive():
            self._tick.start()

    def show_problem(self, host: str, message: str, hint: str) -> None:
        """Something went wrong for ``host``: the last data stays, marked stale, with the problem and the hint."""
        if host != self.host:
            self.set_host(host)
        self._status = "not updating"
        self.problem.setText(f"<span style='color:{LOST_COLOR.name()}'><b>{html.escape(message)}</b></span>"
                             + (f"<br>{html.escape(hint)}" if hint else ""))
        self.problem.setToolTip(message + (f"\n{hint}" if hint else ""))
        self.problem.setVisible(True)
        self._set_stale(self.snapshot is not None)
        self._update_header()

    def show_waiting(self, host: str, text: str) -> None:
        """The host's monitor is on its way (``connecting…``, ``starting the monitor…``)."""
        if host != self.host:
            self.set_host(host)
        self._status = text
        self.problem.setVisible(False)
        self._update_header()

    def set_connected(self, host: str, connected: bool) -> None:
        """Whether ddpgui has a connection to ``host``; not connected shows a Connect button (and says so
        while there is no data)."""
        if host != self.host:
            return
        self.connect_button.setVisible(not connected)
        if not connected and self.snapshot is None:
            self.show_waiting(host, "not connected")
        elif connected and self._status == "not connected":
            self._status = ""
            self._update_header()

    def clear(self) -> None:
        """Nothing shown (no host)."""
        self.host, self.display, self.snapshot, self.received = None, "", None, None
        self._status, self._shape = "", None
        self._tick.stop()
        self.connect_button.setVisible(False)
        self.problem.setVisible(False)
        self.cpu_line.setText("")
        self.cpu_line.setVisible(False)
        self.notes.setVisible(False)
        self.devices.setRowCount(0)
        self.processes.setRowCount(0)
        self.top.setRowCount(0)
        self.process_note.setVisible(False)
        for curve in self._curves:
            self.plot.removeItem(curve)
        self._curves = []
        self._set_stale(False)
        self.pages.setCurrentIndex(0)
        self._update_header()

    def header_text(self) -> str:
        return self.header.text()

    # --- the parts ------------------------------------------------------------------------------------------

    def _update_header(self) -> None:
        if self.host is None:
            self.header.setText("No host selected: choose one in the hosts panel")
            return
        parts = [self.display or self.host]
        snapshot = self.snapshot
        if snapshot is not None:
            parts.append(snapshot.summary() if snapshot.gpus else "CPU host (no GPUs)")
            if snapshot.gpus:
                parts.append(f"from {snapshot.source}")
            if self.received is not None:
                parts.append(age_text(time.monotonic() - self.received))
        elif not self._status:
            parts.append("no data yet")
        if self._status:
            parts.append(self._status)
        text = " · ".join(parts)
        if text != self.header.text():
            self.header.setText(text)
            if snapshot is not None and snapshot.host != self.host:
                self.header.setToolTip(f"{text}\nThe host calls itself {snapshot.host}")

    def _set_stale(self, stale: bool) -> None:
        if stale == self.stale:
            return
        self.stale = stale
        for table in (self.devices, self.processes, self.top):
            palette = table.palette()
            palette.setColor(QPalette.ColorRole.Text, STALE_COLOR if stale else self.palette().text().color())
            table.setPalette(palette)
        self.plot.setEnabled(not stale)

    def _show_cpu_line(self, snapshot: HostSnapshot) -> None:
        cpu = snapshot.cpu
        if cpu is None:
            self.cpu_line.setVisible(False)
            return
        loads = " · ".join(_number(v, "", 2) for v in (cpu.load_1m, cpu.load_5m, cpu.load_15m))
        cpus = f" of {cpu.cpu_count} CPUs" if cpu.cpu_count else ""
        self.cpu_line.setText(f"Load {loads} (1, 5, 15 min){cpus} · memory "
                              f"{format_memory(cpu.mem_used_mib, cpu.mem_total_mib)}")
        self.cpu_line.setVisible(bool(snapshot.gpus))  # a CPU host's meters say it all

    def _show_notes(self, snapshot: HostSnapshot) -> None:
        if snapshot.errors:
            text = "; ".join(snapshot.errors)
            self.notes.setText(f"The monitor says: {text}")
            self.notes.setToolTip("The monitor on the host could not read everything:\n" + "\n".join(snapshot.errors))
        self.notes.setVisible(bool(snapshot.errors))

    def _structure(self, snapshot: HostSnapshot) -> tuple:
        return tuple((gpu.index, gpu.bus_id, len(gpu.mig_devices)) for gpu in snapshot.gpus)

    def _show_devices(self, snapshot: HostSnapshot) -> None:
        shape = self._structure(snapshot)
        table = self.devices
        if shape != self._shape:
            table.setRowCount(0)
            _fill_rows(table, sum(1 + n for _, _, n in shape), aligns=(4, 5))
            self._shape = shape
            # as tall as its rows (with room for a sideways scroll bar): the processes get the rest
            table.setMaximumHeight(table.horizontalHeader().height() + table.rowCount()
                                   * table.verticalHeader().defaultSectionSize() + 2 * table.frameWidth()
                                   + table.horizontalScrollBar().sizeHint().height())
        row = 0
        for position, gpu in enumerate(snapshot.gpus):
            self._device_row(row, position, gpu)
            row += 1
            for mig in gpu.mig_devices:
                items = [table.item(row, c) for c in range(table.columnCount())]
                set_cell(items[0], "", "")
                set_cell(items[1], f"  MIG device {'?' if mig.dev is None else mig.dev}",
                         f"A MIG device of {gpu_label(gpu)}: GPU instance {mig.gi}, compute instance {mig.ci}")
                share = fraction(mig.mem_used_mib, mig.mem_total_mib)
                set_cell(items[3], format_memory(mig.mem_used_mib, mig.mem_total_mib),
                         exact_memory(mig.mem_used_mib, mig.mem_total_mib),
                         bar=None if share is None else (share, level_color(share)))
                set_cell(items[6], f"GI {mig.gi} · CI {mig.ci}", "Its GPU instance and compute instance ids")
                row += 1

    def _device_row(self, row: int, position: int, gpu: GpuState) -> None:
        table = self.devices
        items = [table.item(row, c) for c in range(table.columnCount())]
        label = gpu_label(gpu)
        set_cell(items[0], "?" if gpu.index is None else str(gpu.index),
                 f"{label}" + (f", bus {gpu.bus_id}" if gpu.bus_id else "") + (f"\n{gpu.uuid}" if gpu.uuid else ""),
                 color=gpu_color(position))
        set_cell(items[1], gpu.name or (f"bus {gpu.bus_id}" if gpu.bus_id else "?"),
                 gpu.name or "The host did not report this GPU's name",
                 color=LOST_COLOR if gpu.state != "ok" else None)
        util = None if gpu.util_pct is None else gpu.util_pct / 100
        set_cell(items[2], _number(gpu.util_pct, "%"), f"{label}: {_number(gpu.util_pct, '%')} utilised"
                 if gpu.util_pct is not None else f"{label}: utilisation not reported",
                 bar=None if util is None else (util, level_color(util)))
        share = fraction(gpu.mem_used_mib, gpu.mem_total_mib)
        set_cell(items[3], format_memory(gpu.mem_used_mib, gpu.mem_total_mib),
                 f"{label}: {exact_memory(gpu.mem_used_mib, gpu.mem_total_mib)}",
                 bar=None if share is None else (share, level_color(share)))
        set_cell(items[4], _number(gpu.power_w, " W"), f"{label}: power draw" if gpu.power_w is not None
                 else f"{label}: power not reported")
        set_cell(items[5], _number(gpu.temp_c, " °C"), f"{label}: temperature" if gpu.temp_c is not None
                 else f"{label}: temperature not reported")
        mig_tip = {"enabled": f"{label} is split into {len(gpu.mig_devices)} MIG devices (rows below)",
                   "disabled": f"{label} is not split (MIG off)"}.get(gpu.mig_mode or "", "MIG is not reported")
        set_cell(items[6], mig_text(gpu), mig_tip)
        text, color = state_text(gpu)
        set_cell(items[7], text, state_tip(gpu), color=color)

    def _show_processes(self, snapshot: HostSnapshot) -> None:
        rows: list[tuple[GpuState | None, GpuProcess]] = []
        hidden = []
        for gpu in snapshot.gpus:
            if gpu.processes is None:
                if gpu.state == "ok":
                    hidden.append(gpu.index)
                continue
            rows.extend((gpu, p) for p in sorted(gpu.processes, key=lambda p: -(p.gpu_mem_mib or 0)))
        rows.extend((None, p) for p in snapshot.unplaced_processes)
        table = self.processes
        _fill_rows(table, len(rows), aligns=(1, 4))
        for row, (gpu, process) in enumerate(rows):
            items = [table.item(row, c) for c in range(table.columnCount())]
            if gpu is None:
                set_cell(items[0], "–", "On no GPU this host lists (a GPU of another container or a MIG device "
                                        "the driver does not map)")
            else:
                set_cell(items[0], "?" if gpu.index is None else str(gpu.index), gpu_label(gpu))
            set_cell(items[1], str(process.pid), f"pid {process.pid}")
            unknown = process.user == "?"
            user_tip = process.user if not unknown else "The owner could not be read" + (
                f": {process.problem}" if process.problem else "")
            set_cell(items[2], process.user, user_tip, color=STALE_COLOR if unknown else None)
            command_tip = process.command if not process.problem else f"{process.command}\n({process.problem})"
            set_cell(items[3], one_line(process.command), command_tip)
            set_cell(items[4], format_mib(process.gpu_mem_mib),
                     "GPU memory not reported" if process.gpu_mem_mib is None else f"{process.gpu_mem_mib} MiB")
        note = ""
        if hidden:
            note = (f"The processes on {format_gpus(i for i in hidden if i is not None)} are not visible on this "
                    "host (its driver lists none to this user)")
        elif not rows and snapshot.gpus:
            used = [g.index for g in snapshot.gpus if g.state == "ok" and not g.is_free() and g.index is not None]
            note = "No compute process is listed on any GPU" + (
                f"; the memory used on {format_gpus(used)} belongs to processes the driver does not list here "
                "(another container, or graphics)" if used else "")
        self.process_note.setText(note)
        self.process_note.setVisible(bool(note))

    def _show_cpu(self, snapshot: HostSnapshot) -> None:
        cpu = snapshot.cpu
        if cpu is None:
            self.load_meter.set(None, "not reported")
            self.memory_meter.set(None, "not reported")
            self.top.setRowCount(0)
            return
        load = None if cpu.load_1m is None or not cpu.cpu_count else min(1.0, cpu.load_1m / cpu.cpu_count)
        loads = " · ".join(_number(v, "", 2) for v in (cpu.load_1m, cpu.load_5m, cpu.load_15m))
        self.load_meter.set(load, f"{loads} (1, 5, 15 min) of {cpu.cpu_count or '?'} CPUs",
                            f"Load average {_number(cpu.load_1m, '', 2)} (1 min), {_number(cpu.load_5m, '', 2)} "
                            f"(5 min), {_number(cpu.load_15m, '', 2)} (15 min) on {cpu.cpu_count or '?'} CPUs")
        share = fraction(cpu.mem_used_mib, cpu.mem_total_mib)
        self.memory_meter.set(share, format_memory(cpu.mem_used_mib, cpu.mem_total_mib),
                              f"Memory: {exact_memory(cpu.mem_used_mib, cpu.mem_total_mib)}")
        table = self.top
        _fill_rows(table, len(cpu.top), aligns=(1, 3, 4))
        for row, process in enumerate(cpu.top):
            items = [table.item(row, c) for c in range(table.columnCount())]
            set_cell(items[0], process.user, process.user if process.user != "?" else "The owner could not be read")
            set_cell(items[1], str(process.pid), f"pid {process.pid}")
            set_cell(items[2], one_line(process.command), process.command)
            set_cell(items[3], _number(process.cpu_pct, "", 1), "CPU % appears from the second sample on"
                     if process.cpu_pct is None else f"{process.cpu_pct:.1f}% of one core")
            set_cell(items[4], format_mib(process.rss_mib), "not reported" if process.rss_mib is None
                     else f"{process.rss_mib:.1f} MiB resident")

    def _add_history(self, host: str, snapshot: HostSnapshot) -> None:
        history = self._histories.get(host)
        if history is None or history.gpus != len(snapshot.gpus):
            if len(self._histories) >= HISTORY_HOSTS:
                self._histories.pop(next(iter(self._histories)))
            history = self._histories[host] = History(len(snapshot.gpus))
        history.add(self.received, [gpu.util_pct for gpu in snapshot.gpus])
        if len(self._curves) != history.gpus:
            for curve in self._curves:
                self.plot.removeItem(curve)
            self._curves = [self.plot.plot(pen=pg.mkPen(gpu_color(i), width=1.5), connect="finite")
                            for i in range(history.gpus)]
        t, values = history.window()
        for curve, y in zip(self._curves, values):
            curve.setData(t, y)
        self.plot.setXRange(self.received - history.samples * 2.0, self.received, padding=0)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self.snapshot is not None:
            self._update_header()
            self._tick.start()

    def hideEvent(self, event) -> None:  # noqa: N802
        super().hideEvent(event)
        self._tick.stop()
