"""The launch form's GPU row: "All visible", "Any N free" or "Choose…" among the host's GPUs.

What it gives the run settings (``gpus``, see :mod:`ddpgui.core.gpus.launching`): nothing for "All visible"
(the host's default), ``"free:N"`` for "Any N free" (N is the form's processes per node, one process per
GPU; the GPUs are picked when the run starts, on a fresh snapshot), a list of indices for "Choose…" (the
processes per node follow the number chosen).  "Choose…" lists the GPUs of the latest snapshot of the host
(:meth:`GpuPicker.set_snapshot`, from its host monitor) with each one's state: a busy one may be chosen and
is warned about inline, naming who holds it; a lost one cannot be.  Before any snapshot the list is the
probe's GPUs, their state unknown (the launch checks them).  On a host without GPUs, or a Slurm cluster
(its scheduler gives a job its GPUs), the row is disabled and its tooltip says why.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.gpus.picker import GpuChoiceError, check_indices
from ddpgui.core.gpus.snapshot import GpuState, HostSnapshot

from .gpu_parts import format_mib, owner, short_command, state_text, state_tip
from .slurm_view import ElidedLabel

ALL, FREE, CHOOSE = "All visible", "Any N free", "Choose…"
MODES = (ALL, FREE, CHOOSE)
#: The list shows at most this many rows before it scrolls (an 8-GPU host fits).
LIST_ROWS = 8
_WARNING_STYLE = "color: #b06000;"
_TIPS = {ALL: "The run sees the host's GPUs as the host sets them (CUDA_VISIBLE_DEVICES untouched)",
         FREE: "Any free GPUs, one per process: picked when the run starts (fewest processes, least memory used)",
         CHOOSE: "Choose the GPUs by nvidia-smi's index; the processes per node follow the number chosen"}


def gpu_item_text(gpu: GpuState) -> str:
    """``0 · free``, ``3 · busy: alice's python (15.6 GiB)``, ``1 · busy: 9.8 GiB used, 86%``, ``5 · lost: …``
    (``? · lost: Unknown Error (bus 0000:0B:00.0)`` for one whose index the host no longer gives)."""
    index = "?" if gpu.index is None else str(gpu.index)
    if gpu.state != "ok":
        bus = f" (bus {gpu.bus_id})" if gpu.index is None and gpu.bus_id else ""
        return f"{index} · {gpu.state}" + (f": {gpu.message}" if gpu.message else "") + bus
    if gpu.is_free():
        return f"{index} · free"
    if gpu.processes:
        first = gpu.processes[0]
        command = short_command(first.command)
        memory = "" if first.gpu_mem_mib is None else f" ({format_mib(first.gpu_mem_mib)})"
        more = f" +{len(gpu.processes) - 1} more" if len(gpu.processes) > 1 else ""
        return f"{index} · busy: {owner(first)}'s {command}{memory}{more}"
    util = "" if gpu.util_pct is None else f", {gpu.util_pct:g}%"
    return f"{index} · busy: {format_mib(gpu.mem_used_mib)} used{util}"


class GpuPicker(QWidget):
    """The GPU row of the launch form; :meth:`value` is what the settings' ``gpus`` get."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent, objectName="gpu_picker")
        self.mode = QComboBox(objectName="gpu_mode")
        self.mode.addItems(MODES)
        for row, mode in enumerate(MODES):
            self.mode.setItemData(row, _TIPS[mode], Qt.ItemDataRole.ToolTipRole)
        self.summary = ElidedLabel(objectName="gpu_summary")
        self.list = QListWidget(objectName="gpu_list", visible=False)
        self.list.setUniformItemSizes(True)
        self.warning = QLabel(objectName="gpu_warning", wordWrap=True, visible=False, styleSheet=_WARNING_STYLE)
        self.warning.setMinimumWidth(1)  # a long holder's command is wrapped or cut, never widens the window
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.mode)
        row.addWidget(self.summary, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.list)
        layout.addWidget(self.warning)
        #: host → its latest snapshot (the host monitor's).
        self.snapshots: dict[str, HostSnapshot] = {}
        self.nodes: list[str] = ["local"]
        self.names: list[str] = ["This computer"]
        self.probes: list[dict | None] = [None]
        #: Why the row is disabled (a CPU host, a Slurm cluster), None when it is not.
        self.reason: str | None = None
        self.chosen: list[int] = []
        self._nproc: QSpinBox | None = None
        self._cluster = False
        self.mode.currentTextChanged.connect(self._mode_changed)
        self.list.itemChanged.connect(self._item_changed)
        self._refresh()

    # ---- wiring ----------------------------------------------------------------------------
    def bind_processes(self, nproc: QSpinBox) -> None:
        """The form's processes per node: N of "Any N free", and following the GPUs chosen."""
        self._nproc = nproc
        nproc.valueChanged.connect(self._refresh_text)
        self._follow()

    def set_nodes(self, names: list[str], probes: list[dict | None], display_names: list[str],
                  cluster: bool) -> None:
        """The run's host(s) (node 0 first) and their probes; ``cluster``: a Slurm cluster."""
        self.nodes, self.probes, self.names = list(names), list(probes), list(display_names)
        self._cluster = cluster
        self._refresh()

    def set_snapshot(self, host: str, snapshot: HostSnapshot | None) -> None:
        """The latest snapshot of ``host`` (its state in the list, the warnings, whether it has GPUs)."""
        if snapshot is None:
            self.snapshots.pop(host, None)
        else:
            self.snapshots[host] = snapshot
        if host in self.nodes:
            self._refresh()

    # ---- the choice ------------------------------------------------------------------------
    def value(self, nproc: int) -> list[int] | str | None:
        """The settings' ``gpus``: None ("All visible", or disabled), ``"free:N"``, or the chosen indices."""
        if self.reason is not None or self.mode.currentText() == ALL:
            return None
        return f"free:{nproc}" if self.mode.currentText() == FREE else list(self.chosen)

    def set_value(self, value: object) -> None:
        """Show a stored choice (the settings' ``gpus``): indices, ``"free:N"`` or None."""
        if isinstance(value, str) and value.strip().lower().startswith("free"):
            mode, self.chosen = FREE, []
        elif isinstance(value, str):
            parts = [p.strip() for p in value.split(",")]
            mode, self.chosen = (CHOOSE, [int(p) for p in parts]) if all(p.isdigit() for p in parts) else (ALL, [])
        elif isinstance(value, (list, tuple)):
            mode, self.chosen = CHOOSE, [int(i) for i in value]
        else:
            mode, self.chosen = ALL, []
        self.mode.blockSignals(True)
        self.mode.setCurrentText(mode)
        self.mode.blockSignals(False)
        self._refresh()

    def warnings(self) -> list[str]:
        """What the inline warning says, one line each (busy chosen GPUs with their holders, ...)."""
        text = self.warning.text()
        return text.split("\n") if text and self.warning.isVisibleTo(self) else []

    # ---- inside ----------------------------------------------------------------------------
    def _mode_changed(self, mode: str) -> None:
        if mode == CHOOSE and not self.chosen:
            free = self._free_now()
            count = self._nproc.value() if self._nproc is not None else 1
            self.chosen = free[:count]
        self._refresh()
        self.changed.emit()

    def _item_changed(self, item: QListWidgetItem) -> None:
        index = item.data(Qt.ItemDataRole.UserRole)
        checked = item.checkState() == Qt.CheckState.Checked
        if checked and index not in self.chosen:
            self.chosen.append(index)
        elif not checked and index in self.chosen:
            self.chosen.remove(index)
        self._follow()
        self._refresh_text()
        self.changed.emit()

    def _snapshot(self) -> HostSnapshot | None:
        return self.snapshots.get(self.nodes[0])

    def _free_now(self) -> list[int]:
        snapshot = self._snapshot()
        if snapshot is None:
            return [gpu["index"] for gpu in (self.probes[0] or {}).get("gpus") or [] if "index" in gpu]
        return [gpu.index for gpu in snapshot.free_gpus() if gpu.index is not None]

    def _unavailable(self) -> str | None:
        if self._cluster:
            return ("On a Slurm cluster the scheduler gives each job its GPUs: set the GPUs per node in the host "
                    "profile's Slurm options")
        for host, name, probe in zip(self.nodes, self.names, self.probes):
            snapshot = self.snapshots.get(host)
            if snapshot is not None and not snapshot.gpus:
                return f"{name} has no GPUs (its GPU monitor finds none): the run uses its CPUs"
            if snapshot is None and probe and not probe.get("gpus"):
                return f"{name} has no GPUs (Test connection found none): the run uses its CPUs"
        return None

    def _refresh(self) -> None:
        self.reason = self._unavailable()
        self.setEnabled(self.reason is None)
        self.setToolTip(self.reason or "")
        self.mode.setToolTip(self.reason or _TIPS[self.mode.currentText()])
        choosing = self.reason is None and self.mode.currentText() == CHOOSE
        self.list.setVisible(choosing)
        if choosing:
            self._fill_list()
        self._follow()
        self._refresh_text()

    def _fill_list(self) -> None:
        """The list of GPUs to check; updated in place while it lists the same GPUs (a snapshot every 2 s must
        not scroll it back to the top or swallow a click), rebuilt when they change."""
        snapshot = self._snapshot()
        entries: list[tuple] = []  # (index, text, usable, tooltip, colour)
        shown: set[int] = set()
        if snapshot is not None:
            for gpu in snapshot.gpus:
                usable = gpu.state == "ok" and gpu.index is not None
                entries.append((gpu.index, gpu_item_text(gpu), usable,
                                f"{gpu.name or 'GPU'}: {state_tip(gpu)}" + ("" if usable else " It cannot be chosen."),
                                state_text(gpu)[1]))
                shown.add(gpu.index)
        else:
            for gpu in (self.probes[0] or {}).get("gpus") or []:
                if gpu.get("index") is not None:
                    entries.append((gpu["index"], f"{gpu['index']} · {gpu.get('name') or 'GPU'} (state not known yet)",
                                    True, "The host's GPU monitor has not reported yet: the launch checks this GPU",
                                    None))
                    shown.add(gpu["index"])
        for index in self.chosen:
            if index not in shown:  # a stored choice of a GPU not seen here: shown, so it can be unchosen
                entries.append((index, f"{index} · not on {self.names[0]}" if snapshot else
                                f"{index} · not checked yet", True,
                                "The launch checks this GPU on a fresh snapshot of the host", None))
        if not entries:
            entries.append((None, "no GPUs known yet: Test connection, or use Any N free", False,
                            "Neither a probe nor the host's GPU monitor has listed this host's GPUs yet", None))
        self.list.blockSignals(True)
        same = [self.list.item(row).data(Qt.ItemDataRole.UserRole) for row in range(self.list.count())] == \
            [entry[0] for entry in entries]
        if not same:
            self.list.clear()
        for row, entry in enumerate(entries):
            self._add_item(*entry, item=self.list.item(row) if same else None)
        rows = max(1, min(LIST_ROWS, self.list.count()))
        row_height = self.list.sizeHintForRow(0) if self.list.count() else 0
        self.list.setFixedHeight(rows * (row_height if row_height > 0 else self.fontMetrics().height() + 2)
                                 + 2 * self.list.frameWidth() + 2)
        self.list.blockSignals(False)

    def _add_item(self, index: int | None, text: str, usable: bool, tip: str, color: QColor | None = None,
                  item: QListWidgetItem | None = None) -> None:
        """A row of the list (``item``: the row to update in place; a new one is added without)."""
        new = item is None
        item = QListWidgetItem(text) if new else item
        item.setText(text)
        item.setForeground(color if color is not None else self.list.palette().text().color())
        item.setData(Qt.ItemDataRole.UserRole, index)
        item.setToolTip(tip)
        flags = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable if usable else Qt.ItemFlag.NoItemFlags
        item.setFlags(flags)
        item.setCheckState(Qt.CheckState.Checked if usable and index in self.chosen else Qt.CheckState.Unchecked)
        if new:
            self.list.addItem(item)

    def _follow(self) -> None:
        """The processes per node follow the GPUs chosen (and are not set apart while they do)."""
        if self._nproc is None:
            return
        choosing = self.reason is None and self.mode.currentText() == CHOOSE
        self._nproc.setEnabled(not choosing)
        if choosing and self.chosen:
            self._nproc.setValue(len(self.chosen))

    def _refresh_text(self) -> None:
        mode, snapshot = self.mode.currentText(), self._snapshot()
        now = f" · {snapshot.summary()} now" if snapshot is not None and snapshot.gpus else ""
        warnings: list[str] = []
        if self.reason is not None:  # the whole reason is the tooltip
            summary = "the Slurm scheduler gives them" if self._cluster else self.reason.split(" (")[0]
        elif mode == ALL:
            summary = f"the host's default{now}"
        elif mode == FREE:
            count = self._nproc.value() if self._nproc is not None else 1
            summary = f"{count} free, picked at launch{now}"
            free = len(self._free_now())
            if snapshot is not None and snapshot.gpus and free < count:
                warnings.append(f"{self.names[0]} has {free} of {len(snapshot.gpus)} GPUs free now: the launch "
                                f"refuses {count} free ones unless some are freed (or choose them)")
        else:
            summary = f"GPU{'s' if len(self.chosen) != 1 else ''} {','.join(map(str, self.chosen))}, one process " \
                      "each" if self.chosen else "check the GPUs to run on"
            warnings = self._chosen_warnings()
        self.summary.setText(summary)
        self.warning.setText("\n".join(warnings))
        self.warning.setVisible(bool(warnings))

    def _chosen_warnings(self) -> list[str]:
        """Each chosen GPU that is busy (naming who holds it), lost or missing, on every node with a snapshot."""
        said = []
        known = [(host, name) for host, name in zip(self.nodes, self.names) if host in self.snapshots]
        for host, name in known:
            prefix = f"{name}: " if len(self.nodes) > 1 else ""
            for index in self.chosen:
                try:
                    said.extend(prefix + warning for warning in check_indices(self.snapshots[host], (index,)))
                except GpuChoiceError as exc:
                    said.append(f"{prefix}{exc}: the launch refuses it")
        return said
