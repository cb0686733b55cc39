"""The launch form for the selected host(s): choices bounded by what the hosts' probes found.

With two or more hosts selected the run is multi-node: the processes count is per node,
bounded by the smallest node, and a precision any node cannot run is refused.  On a Slurm
cluster the run asks for a number of nodes; nodes and processes per node are bounded by the
profile's partition (from the probe's ``sinfo``) and the request is checked against it
(:func:`~ddpgui.core.slurm.partitions.request_problems`), the refusal shown on the control at fault.
"""
from __future__ import annotations

import shlex

from PySide6.QtCore import QMargins, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.errors import describe
from ddpgui.core.gpus.launching import without_gpu_env
from ddpgui.core.hosts.precisions import precision_problems
from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.core.names import run_label_problem
from ddpgui.core.runs.advice import launch_advice
from ddpgui.core.runs.multinode import max_processes
from ddpgui.core.slurm.partitions import request_problems
from remote_runner.config import (
    BACKENDS,
    COMPILE_MODES,
    MODEL_SIZES,
    OPTIMIZERS,
    PRECISIONS,
    WORKLOADS,
    ConfigError,
    config_from_dict,
)

from ..dialogs.script_mapping import MappingDialog
from .field_marks import FieldMarks
from .gpu_picker import GpuPicker
from .launch_tips import apply_tips
from .process_guess import guess_tip, process_limit, show_processes
from .script_reading import ScriptReading
from .script_settings import ScriptSettings
from .slurm_view import (
    MAX_NODES_UNKNOWN,
    ElidedLabel,
    cluster_partition,
    limits_text,
    processes_per_node,
    uses_gpus,
    world_text,
)

SCRIPT = "my own script"
LENGTH_UNITS = ("steps", "epochs", "minutes")
#: The length of a script that runs as long as it does (unknown to us: steps and rate, no total or ETA).
SCRIPT_LENGTH = "as the script runs"


class LaunchPanel(FieldMarks, QWidget):
    launch_requested = Signal(dict)
    _progress = Signal(int, int, str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.host = "local"
        self.nodes: list[str] = [self.host]
        self.price_per_hour: float | None = None
        self.problems: dict[str, str | None] = {p: None for p in PRECISIONS}
        self.workload = QComboBox(objectName="workload")
        self.workload.addItems([*WORKLOADS, SCRIPT])
        self.script_dir = QLineEdit(placeholderText="folder with your training script")
        browse = QPushButton("…", maximumWidth=32, toolTip="Pick the script folder")
        browse.clicked.connect(self._pick_dir)
        self.script_entry = QLineEdit("train.py")
        self.script_args = QLineEdit(placeholderText="--epochs 3 --lr 1e-3")
        self.metric_regex = QLineEdit(placeholderText=r"optional, e.g. loss[=: ]+(?P<loss>[\d.eE+-]+)")
        self.reading = ScriptReading(self.metric_regex, self)  # Advanced, for a script: loss series, try a log
        self.nproc = QSpinBox(objectName="nproc", minimum=1, maximum=2, value=2)
        self.nproc_label = ElidedLabel()
        self.gpu_picker = GpuPicker()  # "GPUs": all visible, any N free, or chosen (the processes follow)
        self.gpu_picker.bind_processes(self.nproc)
        self.cluster: SlurmOptions | None = None  # the Slurm options when the host is a cluster
        self.partitions: list = []  # the cluster's partitions from its probe
        self.nnodes = QSpinBox(objectName="nnodes", minimum=1, maximum=MAX_NODES_UNKNOWN, value=1,
                               toolTip="Nodes the job asks Slurm for (sbatch --nodes)")
        self.nnodes_label = ElidedLabel(objectName="nnodes_label")
        self.world = ElidedLabel(objectName="world_label")
        self.limits = QLabel(objectName="partition_limits", wordWrap=True, visible=False)
        self.limits.setMinimumWidth(1)  # a long partition name is cut, never widens the window
        #: The field (as request_problems names it) whose control is marked refused, if any.
        self.invalid_field: str | None = None
        self._marked: QWidget | None = None
        self.compile = QComboBox(objectName="compile")
        self.compile.addItems(COMPILE_MODES)
        self.precision = QComboBox(objectName="precision")
        self.precision.addItems(PRECISIONS)
        self.batch = QSpinBox(objectName="batch_size", minimum=1, maximum=1 << 20, value=32)
        # for a script: "as the script does" first, what will be passed, greyed values and "Map a setting…"
        self.script_settings = ScriptSettings(self.compile, self.precision, self.batch, self)
        self.script_settings.map_requested.connect(self._map_setting)
        self.global_batch = QLabel(objectName="global_batch")
        self.length = QSpinBox(objectName="length", minimum=1, maximum=10 ** 9, value=200)
        self.length_unit = QComboBox(objectName="length_unit")
        self.length_unit.addItems(LENGTH_UNITS)
        self.name = QLineEdit(objectName="run_name", placeholderText="default: workload, processes, precision")
        self.tags = QLineEdit(objectName="run_tags", placeholderText="comma-separated")
        self.advanced = QGroupBox("Advanced", checkable=True, checked=False, objectName="advanced")
        self.model_size = QComboBox(objectName="model_size")
        self.model_size.addItems(MODEL_SIZES)
        self.lr = QDoubleSpinBox(decimals=6, minimum=1e-6, maximum=10.0, singleStep=1e-4, value=1e-3)
        self.optimizer = QComboBox()
        self.optimizer.addItems(OPTIMIZERS)
        self.optimizer.setCurrentText("adamw")
        self.grad_accum = QSpinBox(minimum=1, maximum=1024, value=1)
        self.num_workers = QSpinBox(minimum=0, maximum=64, value=0)
        self.seed = QSpinBox(minimum=0, maximum=2 ** 31 - 1, value=0)
        self.backend = QComboBox()
        self.backend.addItems(BACKENDS)
        self.warmup = QSpinBox(minimum=0, maximum=10 ** 6, value=5)
        self.env = QPlainTextEdit(placeholderText="NAME=value, one per line", maximumHeight=60)
        self.outputs_dir = QLineEdit(objectName="outputs_dir", placeholderText="where it writes files, for Download outputs…")
        self.keep_outputs = QCheckBox("Keep outputs (download them as it ends)", objectName="keep_outputs")
        self.advanced_body = QWidget(self.advanced, objectName="advanced_body", visible=False)
        QVBoxLayout(self.advanced, contentsMargins=QMargins()).addWidget(self.advanced_body)  # shown/hidden whole
        adv = QFormLayout(self.advanced_body)
        for label, widget in (("Model size", self.model_size), ("Learning rate", self.lr), ("Optimizer", self.optimizer),
                              ("Gradient accumulation", self.grad_accum), ("DataLoader workers", self.num_workers),
                              ("Seed", self.seed), ("Backend", self.backend), ("Warm-up steps", self.warmup),
                              ("Environment", self.env), ("Outputs folder", self.outputs_dir), ("", self.keep_outputs),
                              ("Loss series", self.reading.loss_series),
                              ("", self.reading.button)):
            adv.addRow(label, widget)
        self.advanced_form = adv
        self.advanced.toggled.connect(self.advanced_body.setVisible)
        self.error = QLabel(objectName="error_label", wordWrap=True)
        self.hint = QLabel(objectName="hint_label", wordWrap=True)
        self.warning = QLabel(objectName="warning_label", wordWrap=True, visible=False)
        self.nodes_label = QLabel(objectName="nodes_label", wordWrap=True, visible=False)
        for label in (self.error, self.hint, self.warning, self.nodes_label):
            label.setMinimumWidth(1)  # a long word (a path, a partition's name) is cut, never widens the window
        self.cost = QLabel(objectName="cost_label")
        self.progress = QProgressBar(objectName="launch_progress", visible=False, textVisible=True)
        self.launch_button = QPushButton("Launch", objectName="launch_button", toolTip="Launch the run (Ctrl+Return)")
        self.launch_button.setDefault(True)
        self.launch_button.clicked.connect(self.request_launch)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Workload", self.workload)
        dir_row = QHBoxLayout()
        dir_row.addWidget(self.script_dir)
        dir_row.addWidget(browse)
        self.script_box = QWidget()
        script_form = QFormLayout(self.script_box)
        script_form.setContentsMargins(0, 0, 0, 0)
        script_form.addRow("Folder", dir_row)
        script_form.addRow("Entry file", self.script_entry)
        script_form.addRow("Arguments", self.script_args)
        script_form.addRow("Metric regex", self.metric_regex)
        form.addRow(self.script_box)
        self.nnodes_row = QHBoxLayout()
        self.nnodes_row.addWidget(self.nnodes)
        self.nnodes_row.addWidget(self.nnodes_label, 1)
        form.addRow("Nodes", self.nnodes_row)
        self.nproc_row = QHBoxLayout()
        self.nproc_row.addWidget(self.nproc)
        self.nproc_row.addWidget(self.nproc_label, 1)
        form.addRow("Processes", self.nproc_row)
        form.addRow("GPUs", self.gpu_picker)
        form.addRow("", self.world)
        form.addRow("Compile", self.compile)
        form.addRow("Precision", self.precision)
        batch_row = QHBoxLayout()
        batch_row.addWidget(self.batch)
        batch_row.addWidget(self.global_batch, 1)
        form.addRow("Batch per process", batch_row)
        form.addRow(self.script_settings.row)
        length_row = QHBoxLayout()
        length_row.addWidget(self.length)
        length_row.addWidget(self.length_unit)
        form.addRow("Length", length_row)
        form.addRow("Name", self.name)
        form.addRow("Tags", self.tags)
        self.form = form
        self.title = ElidedLabel("Launch on This computer", objectName="panel_title")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.nodes_label)
        layout.addWidget(self.limits)
        layout.addLayout(form)
        layout.addWidget(self.advanced)
        layout.addWidget(self.error)
        layout.addWidget(self.hint)
        layout.addWidget(self.warning)
        layout.addWidget(self.cost)
        layout.addStretch(1)
        layout.addWidget(self.progress)
        layout.addWidget(self.launch_button)

        for signal in (self.workload.currentTextChanged, self.nproc.valueChanged, self.nnodes.valueChanged,
                       self.compile.currentTextChanged, self.model_size.currentTextChanged,
                       self.precision.currentTextChanged, self.batch.valueChanged, self.length.valueChanged,
                       self.length_unit.currentTextChanged, self.name.textChanged, self.tags.textChanged,
                       self.script_dir.textChanged, self.script_entry.textChanged, self.script_args.textChanged,
                       self.metric_regex.textChanged, self.lr.valueChanged, self.grad_accum.valueChanged,
                       self.num_workers.valueChanged, self.seed.valueChanged, self.backend.currentTextChanged,
                       self.warmup.valueChanged, self.env.textChanged, self.optimizer.currentTextChanged,
                       self.gpu_picker.changed, self.reading.loss_series.textChanged, self.keep_outputs.toggled):
            signal.connect(self.validate)
        self._progress.connect(self.show_progress, Qt.ConnectionType.QueuedConnection)
        apply_tips(self)
        self.set_host("local", None)

    # ---- host ------------------------------------------------------------------------------
    def set_host(self, name: str, probe: dict | None, display_name: str | None = None,
                 price_per_hour: float | None = None, cluster: SlurmOptions | None = None) -> None:
        """Bound the choices by what the host's probe found (everything allowed when not probed yet);
        ``cluster``: the host is a Slurm cluster with these options."""
        self.set_nodes([name], [probe], [display_name or name], price_per_hour, cluster)

    def set_nodes(self, names: list[str], probes: list[dict | None], display_names: list[str],
                  price_per_hour: float | None = None, cluster: SlurmOptions | None = None) -> None:
        """One host, or the nodes of a multi-node run (node 0 first): the choices are bounded by every
        node's probe (the smallest node's processes; a precision any node cannot run is refused).
        ``cluster`` (one host only): a Slurm cluster, bounded by its partition instead of its login node."""
        self.host, self.nodes, self.probe, self.price_per_hour = names[0], list(names), probes[0], price_per_hour
        self.cluster = cluster if len(names) == 1 else None
        self.show_warnings([])
        self.gpu_picker.set_nodes(names, probes, display_names, self.cluster is not None)
        self.form.setRowVisible(self.nnodes_row, self.cluster is not None)
        self.form.setRowVisible(self.world, self.cluster is not None)
        self.form.labelForField(self.nproc_row).setText("Processes per node" if self.cluster else "Processes")
        self.limits.setVisible(self.cluster is not None)
        if self.cluster is not None:
            self._set_cluster(display_names[0], probes[0])
        else:
            self.partitions = []
            limit, what = min(max_processes(p) for p in probes)
            self.nproc.setMaximum(limit)  # a guess until every node is probed: "2?", greyed words
            show_processes(self.nproc, self.nproc_label, *process_limit(limit, what, len(names), [
                d for d, p in zip(display_names, probes) if not p]))
        if self.cluster is None and len(names) == 1:
            self.title.setText(f"Launch on {display_names[0]}")
            self.nodes_label.setVisible(False)
        elif self.cluster is None:
            self.title.setText(f"Launch on {len(names)} nodes")
            self.nodes_label.setText(f"{len(names)} nodes: {display_names[0]} (node 0), " + ", ".join(display_names[1:]))
            self.nodes_label.setVisible(True)
        self.problems = precision_problems(list(zip(display_names, probes)), self.cluster)  # as the sweep dialog's
        if self.problems.get(self.precision.currentText()):
            self.precision.setCurrentIndex(0)  # fp32, or a script's "as the script does"
        self.validate()

    def _set_cluster(self, display_name: str, probe: dict | None) -> None:
        """A Slurm cluster: nodes and processes per node bounded by the profile's partition (when probed)."""
        options = self.cluster
        part, self.partitions = cluster_partition(probe, options)
        self.title.setText(f"Launch on cluster {display_name} (Slurm)")
        self.nodes_label.setVisible(False)
        self.limits.setText(limits_text(part, options, self.partitions))
        self.limits.setToolTip(self.limits.text())
        self.nnodes.setMaximum(max(1, part.nodes) if part else MAX_NODES_UNKNOWN)
        self.nnodes_label.setText(f"of {part.nodes} in partition {part.name}" if part else
                                  "(Test connection to know the partition's nodes)")
        limit, what = processes_per_node(part, options)
        self.nproc.setMaximum(limit)
        where = f"per node in partition {part.name}" if part else "per node (Test connection to know)"
        show_processes(self.nproc, self.nproc_label, f"of {limit}{'' if part else '?'} {what} {where}",
                       "" if part else guess_tip([display_name]))

    def set_gpu_snapshot(self, host: str, snapshot) -> None:
        """The latest HostSnapshot of ``host`` (its host monitor's): the GPU row's states and warnings."""
        self.gpu_picker.set_snapshot(host, snapshot)

    def _pick_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Script folder")
        if path:
            self.script_dir.setText(path)

    def _map_setting(self, setting: str, value: str) -> MappingDialog:
        """Give ``setting`` ``value`` the script's words (the folder's ddpgui.toml), then show what it passes."""
        dialog = MappingDialog(self.script_dir.text().strip(), setting, value, self)
        dialog.accepted.connect(self.validate)
        dialog.open()
        self.mapping_dialog = dialog  # the one open (a test's handle)
        return dialog

    # ---- settings --------------------------------------------------------------------------
    def settings(self) -> dict:
        """The run settings as the RunManager takes them (may not validate); a script's own settings are None."""
        unit = self.length_unit.currentText()
        own = self.script_settings.value
        settings: dict = {"nproc_per_node": self.nproc.value(), "compile": own("compile"),
                          "precision": own("precision"), "batch_size": own("batch_size"),
                          "name": self.name.text().strip(),
                          "tags": [t.strip() for t in self.tags.text().split(",") if t.strip()]}
        if self.cluster is not None:  # never for other hosts: an SSH multi-node run is one host per node
            settings["nnodes"] = self.nnodes.value()
        if self.gpu_picker.value(self.nproc.value()) is not None:  # indices, or "free:N" (picked at launch)
            settings["gpus"] = self.gpu_picker.value(self.nproc.value())
        if unit != SCRIPT_LENGTH:
            settings[unit] = float(self.length.value()) if unit == "minutes" else self.length.value()
        if self.workload.currentText() == SCRIPT:
            settings["mode"] = "script"
            try:
                args = shlex.split(self.script_args.text())
            except ValueError:
                args = self.script_args.text().split()
            settings["script"] = {"dir": self.script_dir.text().strip(), "entry": self.script_entry.text().strip(),
                                  "args": args, "metric_regex": self.metric_regex.text().strip() or None}
        else:
            settings["workload"] = self.workload.currentText()
        if self.advanced.isChecked():
            env = {}
            for line in self.env.toPlainText().splitlines():
                if line.strip():
                    key, _, value = line.partition("=")
                    env[key.strip()] = value.strip()
            if "workload" in settings:
                settings["model_size"] = self.model_size.currentText()
            settings.update(lr=self.lr.value(), optimizer=self.optimizer.currentText(),
                            grad_accum=self.grad_accum.value(), num_workers=self.num_workers.value(),
                            seed=self.seed.value(), backend=self.backend.currentText(),
                            warmup_steps=self.warmup.value(), env=env, outputs_dir=self.outputs_dir.text().strip() or None,
                            keep_outputs=self.keep_outputs.isChecked())
            if "script" in settings and self.reading.value():
                settings["script"]["loss_series"] = self.reading.value()
        return settings

    def apply_settings(self, settings: dict) -> None:
        """Fill the form from saved or duplicated settings (unknown keys are ignored)."""
        settings = without_gpu_env(settings)  # a stored run's CUDA_VISIBLE_DEVICES came from its ``gpus``
        script = settings.get("script")
        self.workload.setCurrentText(SCRIPT if settings.get("mode") == "script" else settings.get("workload", "mlp"))
        if script:
            self.script_dir.setText(script.get("dir", ""))
            self.script_entry.setText(script.get("entry", "train.py"))
            self.script_args.setText(shlex.join(script.get("args") or []))
            self.metric_regex.setText(script.get("metric_regex") or "")
            self.reading.loss_series.setText(script.get("loss_series") or "")
        self.nproc.setValue(int(settings.get("nproc_per_node", 1)))
        self.nnodes.setValue(int(settings.get("nnodes", 1)))
        self.gpu_picker.set_value(settings.get("gpu_choice") or settings.get("gpus"))  # "free:2" picks again
        self.script_settings.set_mode(bool(script) and settings.get("mode") == "script")
        if self.script_settings.on:  # what the run gave its script; the rest "as the script does"
            self.script_settings.apply(settings)
        else:
            self.compile.setCurrentText(settings.get("compile") or "off")
            if not self.problems.get(settings.get("precision") or "fp32"):
                self.precision.setCurrentText(settings.get("precision") or "fp32")
            self.batch.setValue(int(settings.get("batch_size") or 32))
        for unit in LENGTH_UNITS:
            if settings.get(unit) is not None:
                self.length_unit.setCurrentText(unit)
                self.length.setValue(max(1, int(settings[unit])))
                break
        else:
            if script:
                self._offer_script_length(True)
                self.length_unit.setCurrentText(SCRIPT_LENGTH)
        self.name.setText(settings.get("name", ""))
        self.tags.setText(", ".join(settings.get("tags") or []))
        advanced = {"lr": self.lr.setValue, "grad_accum": self.grad_accum.setValue,
                    "num_workers": self.num_workers.setValue, "seed": self.seed.setValue,
                    "warmup_steps": self.warmup.setValue, "optimizer": self.optimizer.setCurrentText,
                    "backend": self.backend.setCurrentText, "model_size": self.model_size.setCurrentText}
        for key, setter in advanced.items():
            if key in settings:
                setter(settings[key])
        self.outputs_dir.setText(settings.get("outputs_dir") or "")
        self.keep_outputs.setChecked(bool(settings.get("keep_outputs")))
        if settings.get("env"):
            self.env.setPlainText("\n".join(f"{k}={v}" for k, v in settings["env"].items()))
        self.advanced.setChecked(any(k in settings for k in advanced) or bool(script and script.get("loss_series")))
        self.validate()

    def validate(self) -> bool:
        """Inline validation through the runner's own config check; returns whether Launch may go."""
        self.script_box.setVisible(self.workload.currentText() == SCRIPT)
        self.script_settings.set_mode(self.workload.currentText() == SCRIPT)
        for widget in (self.reading.loss_series, self.reading.button):
            self.advanced_form.setRowVisible(widget, self.workload.currentText() == SCRIPT)
        self.advanced_form.setRowVisible(self.model_size, self.workload.currentText() != SCRIPT)
        self._offer_script_length(self.workload.currentText() == SCRIPT)
        nnodes = self.nnodes.value() if self.cluster is not None else len(self.nodes)
        world = self.nproc.value() * nnodes
        self.world.setText(world_text(nnodes, self.nproc.value()))
        global_batch = self.batch.value() * world * (self.grad_accum.value() if self.advanced.isChecked() else 1)
        self.global_batch.setText(f"global batch {global_batch}" if global_batch else "")
        error, hint, field = "", "", None
        script_error = self.script_settings.refresh(self.script_dir.text().strip(), self.script_entry.text().strip(),
                                                    self.problems)
        checked = {k: v for k, v in self.settings().items() if v is not None and not (k == "gpus" and
                                                                                    isinstance(v, str))}
        if self.cluster is not None:
            checked["scheduler"] = "slurm"  # the rendezvous is found on the job's first node
        try:
            config_from_dict(checked)
        except ConfigError as exc:
            error, field = str(exc), getattr(exc, "field", None)
        except (TypeError, ValueError) as exc:
            error = str(exc)
        if not error:
            error, field = run_label_problem(self.name.text().strip(), checked.get("tags") or []) or (error, field)
        if not error and self.cluster is not None and self.partitions:
            problems = request_problems(self.partitions, self.cluster, self.nnodes.value(), self.nproc.value(),
                                        uses_gpus(self.cluster))
            if problems:
                field, error, hint = problems[0]
        if not error and self.problems.get(self.precision.currentText()):
            error = self.problems[self.precision.currentText()]
        if not error and script_error:
            error = script_error
        if not error and self.workload.currentText() == SCRIPT and not self.script_dir.text().strip():
            error = "pick the folder of your script"
        self.error.setText(error)
        self.error.setToolTip(error)
        self.error.setVisible(bool(error))
        self._mark(field if error else None, error, hint)
        gpus = uses_gpus(self.cluster) if self.cluster is not None else self.probe and bool(self.probe.get("gpus"))
        if hint:
            hint = f"Hint: {hint}"
        else:
            hint = launch_advice(checked, world, global_batch, gpus)
        self.hint.setText(hint)
        self.hint.setVisible(bool(hint))
        self.cost.setText(self._cost_text())
        self.launch_button.setEnabled(not error)
        return not error

    def _offer_script_length(self, script: bool) -> None:
        """A script may run as long as it does: that length is offered (and chosen) when a script is picked."""
        index = self.length_unit.findText(SCRIPT_LENGTH)
        self.length_unit.blockSignals(True)  # called from validate(): no second validation
        if script and index < 0:
            self.length_unit.addItem(SCRIPT_LENGTH)
            self.length_unit.setCurrentText(SCRIPT_LENGTH)
        elif not script and index >= 0:
            self.length_unit.removeItem(index)
        self.length_unit.blockSignals(False)
        self.length.setEnabled(self.length_unit.currentText() != SCRIPT_LENGTH)

    def _cost_text(self) -> str:
        if not self.price_per_hour:
            return ""
        if self.length_unit.currentText() == "minutes":
            return f"Estimated cost: {self.price_per_hour * self.length.value() / 60:.2f} (at {self.price_per_hour:g}/h)"
        return f"This host costs {self.price_per_hour:g}/h while it is rented."

    def show_error(self, exc: BaseException, prefix: str = "Launch failed") -> None:
        """An error inline, its hint apart (what a preflight or a launch raised); the control of the field
        it names (a Slurm request the cluster refused) is marked."""
        message, hint = describe(exc)
        self.error.setText(f"{prefix}: {message}")
        self.error.setToolTip(self.error.text())
        self.error.setVisible(True)
        self.hint.setText(f"Hint: {hint}" if hint else "")
        self.hint.setVisible(bool(hint))
        self._mark(getattr(exc, "field", None), message, hint)

    def show_warnings(self, warnings: list[str]) -> None:
        """Warnings that do not block a launch (e.g. the nodes have different torch versions)."""
        self.warning.setText("\n".join(f"Warning: {w}" for w in warnings))
        self.warning.setVisible(bool(warnings))

    def request_launch(self) -> None:
        if self.validate():
            self.launch_requested.emit(self.settings())

    def set_busy(self, busy: bool, text: str = "") -> None:
        self.progress.setVisible(busy)
        if busy:
            self.progress.setRange(0, 0)
            self.progress.setFormat(text)
        self.launch_button.setEnabled(not busy and self.validate())

    def post_progress(self, done: int, total: int, text: str) -> None:
        """Thread-safe progress from a launch worker."""
        self._progress.emit(int(done), int(total), text)

    def show_progress(self, done: int, total: int, text: str) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(text)
