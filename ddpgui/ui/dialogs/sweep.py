"""The "New sweep…" dialog: the launch form's settings as the base, plus the axes, checked live by plan_sweep.

A precision the checked hosts are not offered (the launch form's rule, :mod:`ddpgui.core.hosts.precisions`) is
greyed and unticked, its reason as its tooltip and under the list; plan_sweep refuses it too."""
from __future__ import annotations

import shlex

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QVBoxLayout,
)

from ddpgui.core.hosts import HostStore, host_display_name
from ddpgui.core.hosts.precisions import precision_problems
from ddpgui.core.sweeps import SweepError, SweepSpec, plan_sweep
from ddpgui.core.sweeps.plan import arg_option, put_named_axes
from remote_runner.config import COMPILE_MODES, PRECISIONS

#: Checkable axes: (config field, title, choices).
CHECK_AXES = (("compile", "Compile modes", COMPILE_MODES), ("precision", "Precisions", PRECISIONS))
#: Comma-list axes: (config field, title, example).
COMMA_AXES = (("nproc_per_node", "Process counts", "1,2,4"), ("batch_size", "Batch sizes per process", "32,64"))
#: The launch form's own run identity: a sweep names its runs itself.
_NOT_BASE = ("name", "run_id")


def _checkable(values, checked) -> QListWidget:
    widget = QListWidget()
    for value in values:
        item = QListWidgetItem(value)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked if value in checked else Qt.CheckState.Unchecked)
        widget.addItem(item)
    rows = max(1, min(4, len(values)))  # as tall as its rows (4 at most, then it scrolls)
    widget.setFixedHeight(rows * max(widget.sizeHintForRow(0), widget.fontMetrics().height()) + 2 * widget.frameWidth() + 2)
    return widget


def _checked(widget: QListWidget) -> list[str]:
    return [widget.item(i).data(Qt.ItemDataRole.UserRole) or widget.item(i).text() for i in range(widget.count())
            if widget.item(i).checkState() == Qt.CheckState.Checked]


def parse_pairs(text: str, script: bool) -> list[tuple[str, str]]:
    """``--lr=1e-4,3e-4 --model=small,base`` (``script``) or ``OMP_NUM_THREADS=1,4 A=x`` → (name, values text)
    pairs; a value with spaces is quoted as in a shell (split, never run by one)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SweepError(f"{text!r} cannot be split: {exc}", "close the quotes") from None
    pairs = []
    for word in words:
        if script:
            try:
                pairs.append(arg_option(word))
            except ValueError as exc:
                raise SweepError(str(exc), "e.g. --lr=1e-4,3e-4 --model=small,base") from None
        else:
            name, sep, values = word.partition("=")
            if not sep or not name:
                raise SweepError(f"expected NAME=VALUES, got {word!r}", "e.g. OMP_NUM_THREADS=1,4")
            pairs.append((name, values))
    return pairs


def parse_counts(text: str, what: str) -> list[int]:
    """``"1, 2,4"`` → [1, 2, 4]; a clear error naming ``what`` for anything else."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            values.append(int(part))
        except ValueError:
            raise SweepError(f"{what}: {part!r} is not a whole number", "give whole numbers separated by commas, "
                             "e.g. 1,2,4") from None
    return values


class SweepDialog(QDialog):
    """Axes over the launch form's settings; Start stays disabled while :func:`plan_sweep` refuses the sweep."""

    def __init__(self, base: dict, hosts: HostStore, current_host: str = "local", parent=None,
                 probes: dict[str, dict] | None = None):
        """``probes``: host → its probe report (the hosts panel's), which bounds the precisions offered."""
        super().__init__(parent)
        self.setWindowTitle("New sweep")
        self.setObjectName("sweep_dialog")
        self.base = {k: v for k, v in base.items() if k not in _NOT_BASE}
        self.hosts = hosts
        self.probes = dict(probes or {})
        self.cells = 0
        self.name = QLineEdit(objectName="sweep_name", placeholderText="default: the axes and the date")
        self.checks = {key: _checkable(choices, [str(self.base.get(key, ""))])
                       for key, _, choices in CHECK_AXES}
        self.commas = {key: QLineEdit("" if self.base.get(key) is None else str(self.base[key]), objectName=f"sweep_{key}",
                                      placeholderText=f"comma list, e.g. {example}")
                       for key, _, example in COMMA_AXES}
        self.script = self.base.get("mode") == "script"
        self.args = QLineEdit(objectName="sweep_args", placeholderText="e.g. --lr=1e-4,3e-4 --model=small,base",
                              toolTip="Your script's named arguments, each --NAME=VALUES: several values are an "
                                      "axis, one is passed to every run (\\, is a comma inside a value)")
        self.env = QLineEdit(objectName="sweep_env", placeholderText="e.g. OMP_NUM_THREADS=1,4",
                             toolTip="Environment variables, each NAME=VALUES: several values are an axis")
        self.repeats = QSpinBox(objectName="sweep_repeats", minimum=1, maximum=100, value=1)
        self.host_list = _checkable(hosts.names(), [current_host])
        self.host_list.setObjectName("sweep_hosts")
        for row in range(self.host_list.count()):  # This computer as the user reads it; the host's id as its data
            item = self.host_list.item(row)
            item.setData(Qt.ItemDataRole.UserRole, item.text())
            item.setText(host_display_name(item.text()))
        self.parallel = QCheckBox("Run cells side by side: on a GPU host each on free GPUs of its own",
                                  objectName="sweep_parallel",
                                  toolTip="Each cell gets one free GPU per process when it starts (never one another "
                                          "cell of the sweep holds); a cell that does not fit waits and says why. "
                                          "A host without GPUs runs as many cells as its CPUs hold.")
        self.precision_note = QLabel(objectName="sweep_precision_note", wordWrap=True, visible=False,
                                     styleSheet="color: palette(placeholder-text)")
        self.error = QLabel(objectName="sweep_error", wordWrap=True, styleSheet="color: #d93025")
        self.count = QLabel(objectName="sweep_count")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.start_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.start_button.setText("Start sweep")
        self.start_button.setObjectName("sweep_start")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        form = QFormLayout()
        form.addRow("Name", self.name)
        for key, title, _ in CHECK_AXES:
            self.checks[key].setObjectName(f"sweep_{key}")
            form.addRow(title, self.checks[key])
            if key == "precision":
                form.addRow("", self.precision_note)
        for key, title, _ in COMMA_AXES:
            form.addRow(title, self.commas[key])
        if self.script:
            form.addRow("Script arguments", self.args)
        else:
            self.args.setVisible(False)
        form.addRow("Environment", self.env)
        form.addRow("Repeats", self.repeats)
        form.addRow("Hosts", self.host_list)
        form.addRow(self.parallel)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Every other setting comes from the launch form. An axis with several values "
                                "is swept; with one value it is fixed.", wordWrap=True))
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.count)
        layout.addWidget(self.buttons)

        self.name.textChanged.connect(self.validate)
        for widget in (*self.checks.values(), self.host_list):
            widget.itemChanged.connect(self.validate)
        for edit in (*self.commas.values(), self.args, self.env):
            edit.textChanged.connect(self.validate)
        self.repeats.valueChanged.connect(self.validate)
        self.parallel.toggled.connect(self.validate)
        self.validate()

    def spec(self) -> SweepSpec:
        """The sweep the form describes (raises SweepError for an unreadable value)."""
        base = dict(self.base)
        matrix: dict[str, list] = {}
        values: dict[str, list] = {key: _checked(widget) for key, widget in self.checks.items()}
        for key, title, _ in COMMA_AXES:
            values[key] = parse_counts(self.commas[key].text(), title.lower())
        for key, chosen in values.items():
            if not chosen:
                continue  # nothing chosen: the launch form's value
            base.pop(key, None)
            if len(chosen) == 1:
                base[key] = chosen[0]
            else:
                matrix[key] = chosen
        put_named_axes(base, matrix, parse_pairs(self.args.text(), True) if self.script else [],
                       parse_pairs(self.env.text(), False))
        return SweepSpec(hosts=_checked(self.host_list), base=base, matrix=matrix, repeats=self.repeats.value(),
                         parallel=self.parallel.isChecked(), name=self.name.text().strip())

    def validate(self) -> bool:
        """Plan the sweep as it stands: the refusal inline and Start disabled, or the number of runs."""
        error = ""
        self._bound_precisions()
        try:
            _, cells = plan_sweep(self.spec(), self.hosts, {h: self.probes.get(h) for h in self.hosts.names()})
        except SweepError as exc:
            error = str(exc) + (f" — {exc.hint}" if exc.hint else "")
            cells = []
        self.cells = len(cells)
        self.error.setText(error)
        self.error.setVisible(bool(error))
        self.count.setText("" if error else self._count_text(cells))
        self.start_button.setEnabled(not error)
        return not error

    def _bound_precisions(self) -> None:
        """Grey (and untick) the precisions the checked hosts are not offered, the reason as tooltip and note."""
        nodes = [(self.hosts.get(h).display_name, self.probes.get(h)) for h in _checked(self.host_list)]
        problems = precision_problems(nodes) if nodes else {}
        widget, refused = self.checks["precision"], []
        widget.blockSignals(True)
        for i in range(widget.count()):
            item = widget.item(i)
            reason = problems.get(item.text())
            enabled = Qt.ItemFlag.ItemIsEnabled
            item.setFlags(item.flags() & ~enabled if reason else item.flags() | enabled)
            item.setToolTip(reason or "")
            if reason:
                item.setCheckState(Qt.CheckState.Unchecked)
                refused.append(item.text())
        widget.blockSignals(False)
        where = ", ".join(name for name, _ in nodes)
        self.precision_note.setText(f"{', '.join(refused)}: not offered on {where} (hover for why)" if refused else "")
        self.precision_note.setToolTip("\n".join(f"{p}: {problems[p]}" for p in refused))
        self.precision_note.setVisible(bool(refused))

    def _count_text(self, cells) -> str:
        text = f"{len(cells)} run{'s' if len(cells) != 1 else ''}"
        minutes = self.base.get("minutes")
        if minutes and not self.parallel.isChecked():
            per_host = max(sum(c.host == h for c in cells) for h in {c.host for c in cells})
            text += f", about {per_host * float(minutes):.0f} min of training"
        elif self.parallel.isChecked():
            text += ", side by side where the hosts have room"
        else:
            text += ", one at a time per host"
        return text

    def accept(self) -> None:
        if self.validate():
            super().accept()
