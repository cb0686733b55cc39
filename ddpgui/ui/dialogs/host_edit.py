"""Add or edit a host profile (an SSH host or a Slurm cluster); validation errors are shown inline: the message
under the form, and the field at fault marked and focused.  "Test connection" tries the profile as the form
describes it, before it is saved, on a worker thread: the result (the probe in short, or the error and its hint)
is said in the dialog, in the error colour with what to change when the host cannot run (no torch for its Python:
the Python field is marked).  Saved after a successful test of the same connection, the profile keeps that test's
probe (:attr:`HostEditDialog.result_probe`): the hosts list shows it as if the host had been probed.

An SSH host's release action ("Release when idle", dialogs/release_box.py) is on a page of its own beside the
connection's; This computer and a Slurm cluster have none (the tab bar is hidden for them)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import QThreadPool
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.errors import describe
from ddpgui.core.hosts import AUTH_METHODS, HostError, HostProfile, HostStore, SlurmOptions
from ddpgui.core.hosts.slurm_options import TIME_FORMATS
from ddpgui.core.ssh.known_hosts import KnownHosts

from ..prompts import Prompts
from ..texts import required_or, without_class_name
from ..widgets.dashboard_header import never_widening
from ..workers import GeneratorWorker
from .host_test import check_profile, probe_summary, problem_lines, problems_of, torch_missing
from .release_box import ReleaseBox

KIND_CHOICES = (("SSH host", "ssh"), ("Slurm cluster", "slurm"))
#: The login methods in words; the profile stores the identifiers (AUTH_METHODS).
AUTH_LABELS = {"agent": "SSH agent", "key": "Key file", "key_passphrase": "Key file with passphrase",
               "password": "Password"}
AUTH_CHOICES = tuple((AUTH_LABELS.get(method, method), method) for method in AUTH_METHODS)
#: The dialog is never narrower: a key file's path and the placeholders fit.
MIN_WIDTH = 520
GPU_FLAG_CHOICES = (("--gres=gpu:N", "gres"), ("--gpus-per-node=N", "gpus-per-node"))
_INVALID_LABEL = "color: #d93025; font-weight: 600;"
_TEST_STYLES = {"ok": "color: #188038;", "error": "color: #d93025;", "busy": "color: #5f6368;"}
#: Profile fields that do not change what a test finds: a probe tested with other values of these still holds.
_NOT_CONNECTION = frozenset({"name", "notes", "price_per_hour", "release"})


class HostEditDialog(QDialog):
    """``hosts``: the saved profiles (a tested profile's jump hosts come from them; default: the user's);
    ``known_hosts``: the host keys a test trusts (default: OpenSSH's files and the app's)."""

    def __init__(self, profile: HostProfile | None = None, parent=None, hosts: HostStore | None = None,
                 known_hosts: KnownHosts | None = None):
        super().__init__(parent)
        self._hosts, self._known_hosts = hosts, known_hosts
        self._prompts = None
        self._test_worker: GeneratorWorker | None = None
        self.setWindowTitle("Edit host" if profile else "Add host")
        self.setObjectName("host_edit_dialog")
        self._original = profile
        local = profile is not None and profile.is_local
        self.form = form = QFormLayout()
        self.name = QLineEdit(profile.display_name if profile else "")  # This computer: its id stays "local"
        self.kind = QComboBox(objectName="host_kind",
                              toolTip="A Slurm cluster is reached over SSH through its login node; its runs are "
                                      "jobs that Slurm schedules")
        for text, kind in KIND_CHOICES:
            self.kind.addItem(text, kind)
        self.kind.setCurrentIndex(self.kind.findData(profile.kind if profile else "ssh"))
        self.hostname = QLineEdit(profile.hostname if profile else "")
        self.port = QSpinBox(maximum=65535, minimum=1, value=profile.port if profile else 22)
        self.user = QLineEdit(profile.user if profile else "")
        self.auth = QComboBox(objectName="host_auth", toolTip="How to log in: the keys your SSH agent holds, a key "
                              "file (with its passphrase), or a password (asked for, kept in the keyring)")
        for text, method in AUTH_CHOICES:
            self.auth.addItem(text, method)
        self.auth.setCurrentIndex(max(0, self.auth.findData(profile.auth if profile else "agent")))
        self.key_file = QLineEdit(profile.key_file or "" if profile else "", placeholderText="~/.ssh/id_ed25519")
        self.browse_key = QPushButton("Browse…", objectName="browse_key", toolTip="Pick the private key file")
        self.browse_key.clicked.connect(self._pick_key)
        key_row = QWidget()
        key_layout = QHBoxLayout(key_row)
        key_layout.setContentsMargins(0, 0, 0, 0)
        key_layout.addWidget(self.key_file, 1)
        key_layout.addWidget(self.browse_key)
        self.proxy_jump = QLineEdit(", ".join(profile.proxy_jump) if profile else "")
        self.python = QLineEdit(profile.python if profile else "python3")
        self.run_root = QLineEdit(profile.run_root if profile else "~/.ddpgui")
        self.price = QDoubleSpinBox(maximum=10000, decimals=2, suffix=" /h", specialValueText="no price")
        self.price.setValue(profile.price_per_hour or 0 if profile else 0)
        self.notes = QLineEdit(profile.notes if profile else "")
        self.rdzv_address = QLineEdit(profile.rdzv_address or "" if profile else "", placeholderText="the hostname",
                                      toolTip="Multi-node runs: this host's address as the other nodes reach it "
                                              "(e.g. its private address), when it is not the hostname above")
        self.nccl_env = QLineEdit(" ".join(f"{k}={v}" for k, v in (profile.nccl_env if profile else {}).items()),
                                  placeholderText="NCCL_SOCKET_IFNAME=eth0",
                                  toolTip="Environment variables for runs on this host (space separated KEY=VALUE)")
        rows = [("Name", self.name), ("Kind", self.kind), ("Hostname", self.hostname), ("Port", self.port),
                ("User", self.user), ("Login", self.auth), ("Key file", key_row),
                ("ProxyJump", self.proxy_jump), ("Python", self.python), ("Run folder", self.run_root),
                ("Price", self.price), ("Address for other nodes", self.rdzv_address),
                ("Node environment", self.nccl_env), ("Notes", self.notes)]
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        wide = self.fontMetrics().horizontalAdvance("x" * 36)
        for label, widget in rows:
            form.addRow(label, widget)
            widget.setMinimumWidth(wide)
            if local and widget not in (self.python, self.run_root, self.price, self.notes, self.nccl_env,
                                        self.rdzv_address):
                widget.setEnabled(False)
        self.slurm_box = self._slurm_group(profile.slurm if profile else None)
        self._local = local  # This computer is never released: no release box
        self.release_box = ReleaseBox(profile.release if profile else None,
                                      profile.cluster if profile and profile.provider == "skypilot" else "")
        connection = QWidget()
        connection.setLayout(form)
        # an SSH host's release action on a page of its own: the dialog stays one column (and fits 1024 x 700)
        self.pages = QTabWidget(objectName="host_pages", documentMode=True)
        self.pages.addTab(connection, "Connection")
        self.pages.addTab(self.release_box, "Release when idle")
        self.pages.setTabToolTip(1, "Release a rented instance by itself once nothing of ddpgui is left to do on it")
        columns = QHBoxLayout()
        columns.addWidget(self.pages, 1)
        columns.addWidget(self.slurm_box, 1)
        self.error = QLabel(objectName="error_label", wordWrap=True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        self.test_button = buttons.addButton("Test connection", QDialogButtonBox.ButtonRole.ActionRole)
        self.test_button.setObjectName("host_test")
        self.test_button.setToolTip("Connect with these settings (before saving): check the host key, log in, "
                                    "and probe the host's GPUs and torch")
        self.test_button.clicked.connect(self.test_connection)
        self.test_result = never_widening(QLabel(objectName="test_result", wordWrap=True))
        self.test_result.setVisible(False)
        self.test_state = ""  # "", "busy", "ok" or "error": the last test's
        layout = QVBoxLayout(self)
        layout.addLayout(columns)
        layout.addWidget(self.error)
        layout.addWidget(self.test_result)
        layout.addWidget(buttons)
        self.result_profile: HostProfile | None = None
        #: The probe of the last successful test, when it tested the saved profile's connection (set by Save).
        self.result_probe: dict | None = None
        self._tested_probe: tuple[HostProfile, dict] | None = None  # the last successful test's profile and probe
        #: The field (as a HostError names it) marked invalid by the last save, if any.
        self.invalid_field: str | None = None
        self._fields: dict[str, QWidget] = {
            "name": self.name, "kind": self.kind, "hostname": self.hostname, "port": self.port, "user": self.user,
            "auth": self.auth, "key_file": self.key_file, "proxy_jump": self.proxy_jump, "python": self.python,
            "run_root": self.run_root, "price_per_hour": self.price, "rdzv_address": self.rdzv_address,
            "nccl_env": self.nccl_env, "notes": self.notes, "slurm": self.partition,
            **{f"slurm.{name}": widget for name, widget in self._slurm_fields.items()}, **self.release_box.fields}
        self.setMinimumWidth(MIN_WIDTH)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self._kind_changed()

    def _pick_key(self) -> None:
        start = self.key_file.text().strip() or "~/.ssh"
        path, _ = QFileDialog.getOpenFileName(self, "Private key file", str(Path(start).expanduser()))
        if path:
            self.key_file.setText(path)

    def _slurm_group(self, options: SlurmOptions | None) -> QGroupBox:
        """The Slurm options' group box (shown for a Slurm cluster only)."""
        o = options or SlurmOptions(partition="default")
        self.partition = QLineEdit(options.partition if options else "", placeholderText="e.g. gpu, or gpu,gpu-long",
                                   toolTip="The partition (queue) jobs are submitted to; `sinfo -s` lists them")
        self.account = QLineEdit(o.account, placeholderText="your default account")
        self.qos = QLineEdit(o.qos, placeholderText="the default QoS")
        self.time_limit = QLineEdit(o.time_limit, placeholderText="the partition's, e.g. 2:00:00",
                                    toolTip=f"Each job's time limit: {TIME_FORMATS}")
        self.gpus_per_node = QSpinBox(minimum=0, maximum=1024, value=o.gpus_per_node,
                                      specialValueText="none (CPU jobs)")
        self.gpu_flag = QComboBox(toolTip="How a job asks for its GPUs")
        for text, flag in GPU_FLAG_CHOICES:
            self.gpu_flag.addItem(text, flag)
        self.gpu_flag.setCurrentIndex(self.gpu_flag.findData(o.gpu_flag))
        gpus = QWidget()
        row = QHBoxLayout(gpus)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.gpus_per_node, 1)
        row.addWidget(self.gpu_flag, 1)
        self.cpus_per_task = QSpinBox(minimum=0, maximum=4096, value=o.cpus_per_task or 0,
                                      specialValueText="Slurm's default",
                                      toolTip="CPUs of each node's task: the run's supervisor and its processes")
        self.mem = QLineEdit(o.mem, placeholderText="the partition's, e.g. 32G (0: all)")
        self.sbatch_lines = self._lines_edit(o.sbatch_lines, "--constraint=a100\n--exclusive",
                                             "Extra #SBATCH options, one per line (the #SBATCH is optional)")
        self.setup_lines = self._lines_edit(o.setup_lines, "module load cuda\nsource ~/venv/bin/activate",
                                            "Shell lines each node runs before the run starts, one per line")
        self.max_queued_jobs = QSpinBox(minimum=1, maximum=10000, value=o.max_queued_jobs,
                                        toolTip="A sweep keeps at most this many of its jobs in the queue at once")
        self._slurm_fields: dict[str, QWidget] = {
            "partition": self.partition, "account": self.account, "qos": self.qos, "time_limit": self.time_limit,
            "gpus_per_node": self.gpus_per_node, "gpu_flag": self.gpu_flag, "cpus_per_task": self.cpus_per_task,
            "mem": self.mem, "sbatch_lines": self.sbatch_lines, "setup_lines": self.setup_lines,
            "max_queued_jobs": self.max_queued_jobs}
        box = QGroupBox("Slurm", objectName="slurm_box")
        self.slurm_form = form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        for label, widget in (("Partition", self.partition), ("Account", self.account), ("QoS", self.qos),
                              ("Time limit", self.time_limit), ("GPUs per node", gpus),
                              ("CPUs per task", self.cpus_per_task), ("Memory per node", self.mem),
                              ("#SBATCH lines", self.sbatch_lines), ("Setup lines", self.setup_lines),
                              ("Max queued jobs", self.max_queued_jobs)):
            form.addRow(label, widget)
        return box

    def _lines_edit(self, lines: list[str], placeholder: str, tip: str) -> QPlainTextEdit:
        edit = QPlainTextEdit("\n".join(lines), placeholderText=placeholder, toolTip=tip)
        edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        edit.setTabChangesFocus(True)
        margins = edit.contentsMargins()
        edit.setFixedHeight(edit.fontMetrics().lineSpacing() * 4 + 2 * edit.frameWidth() + margins.top()
                            + margins.bottom() + 8)
        return edit

    def is_slurm(self) -> bool:
        return self.kind.currentData() == "slurm"

    def _kind_changed(self) -> None:
        """Show the Slurm options for a cluster (and call its host the login node); keep the dialog on screen."""
        slurm = self.is_slurm()
        self.slurm_box.setVisible(slurm)
        releasable = not slurm and not self._local  # a cluster's nodes are Slurm's to free
        self.pages.setTabVisible(1, releasable)
        self.pages.tabBar().setVisible(releasable)
        self.form.labelForField(self.hostname).setText("Login node" if slurm else "Hostname")
        self.hostname.setPlaceholderText("the cluster's login node, e.g. login.hpc.example.org" if slurm else "")
        self.form.labelForField(self.run_root).setText("Run folder (shared)" if slurm else "Run folder")
        self.run_root.setToolTip("A folder on the cluster's shared filesystem, seen by the login node and every "
                                 "compute node" if slurm else "Where runs live on the host")
        self.form.setRowVisible(self.rdzv_address, not slurm)  # a job's first node hosts the rendezvous
        self._fit_screen()

    def _fit_screen(self) -> None:
        self.layout().activate()  # the tab bar just shown or hidden counts in the size
        self.adjustSize()
        screen = self.screen()
        if screen is None:
            return
        room = screen.availableGeometry()
        self.resize(min(self.width(), room.width()), min(self.height(), room.height()))
        if self.isVisible():
            frame = self.frameGeometry()
            x = max(room.left(), min(frame.left(), room.right() - frame.width()))
            y = max(room.top(), min(frame.top(), room.bottom() - frame.height()))
            if (x, y) != (frame.left(), frame.top()):
                self.move(x, y)

    def profile(self) -> HostProfile:
        """The profile the form describes (validated as a whole: a HostError names the bad field)."""
        values = dict(
            name=self._original.name if self._original and self._original.is_local else self.name.text().strip(),
            hostname=self.hostname.text().strip(), port=self.port.value(),
            user=self.user.text().strip(), auth=self.auth.currentData(), key_file=self.key_file.text().strip() or None,
            proxy_jump=[p.strip() for p in self.proxy_jump.text().split(",") if p.strip()],
            python=self.python.text().strip() or "python3", run_root=self.run_root.text().strip() or "~/.ddpgui",
            price_per_hour=self.price.value() or None, notes=self.notes.text(),
            rdzv_address=self.rdzv_address.text().strip() or None, nccl_env=self._env(),
            kind=self.kind.currentData(), slurm=self.slurm_options() if self.is_slurm() else None,
            release=None if self.is_slurm() or self._local else self.release_box.policy())
        return dataclasses.replace(self._original, **values) if self._original else HostProfile(**values)

    def slurm_options(self) -> SlurmOptions:
        """The Slurm options the group box describes (a HostError names the field, ``slurm.<name>``)."""
        return SlurmOptions(
            partition=self.partition.text().strip(), account=self.account.text().strip(), qos=self.qos.text().strip(),
            time_limit=self.time_limit.text().strip(), gpus_per_node=self.gpus_per_node.value(),
            gpu_flag=self.gpu_flag.currentData(), cpus_per_task=self.cpus_per_task.value() or None,
            mem=self.mem.text().strip(), sbatch_lines=_lines(self.sbatch_lines), setup_lines=_lines(self.setup_lines),
            max_queued_jobs=self.max_queued_jobs.value())

    def _env(self) -> dict[str, str]:
        env = {}
        for part in self.nccl_env.text().split():
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise HostError("nccl_env", f"node environment: write KEY=VALUE pairs separated by spaces, "
                                            f"got {part!r}")
            env[key] = value
        return env

    def _forms(self) -> tuple[QFormLayout, ...]:
        return self.form, self.slurm_form, self.release_box.form

    def _label_of(self, widget: QWidget | None) -> QLabel | None:
        """The form label of a field, or of the row it sits in (the GPUs row's spin box)."""
        for form in self._forms():
            for candidate in (widget, widget.parentWidget() if widget is not None else None):
                label = form.labelForField(candidate) if candidate is not None else None
                if label is not None:
                    return label
        return None

    def _mark(self, field: str | None) -> None:
        """Mark the field at fault (its label red, the field focused); ``None`` clears the mark."""
        for form in self._forms():
            for row in range(form.rowCount()):
                label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                if label is not None and label.widget() is not None:
                    label.widget().setStyleSheet("")
        for widget in self._fields.values():
            widget.setProperty("invalid", False)
        self.invalid_field = field if field in self._fields else None
        if self.invalid_field is None:
            return
        widget = self._fields[self.invalid_field]
        widget.setProperty("invalid", True)
        if field.startswith("release"):
            self.pages.setCurrentWidget(self.release_box)
        label = self._label_of(widget)
        if label is not None:
            label.setStyleSheet(_INVALID_LABEL)
        widget.setFocus()

    def _label(self, field: str | None) -> str:
        """The form's label of a field (its name when it has none)."""
        label = self._label_of(self._fields.get(field or ""))
        if label is not None and label.text():
            return label.text()
        return (field or "a field").removeprefix("slurm.")

    def _valid_profile(self) -> HostProfile | None:
        """The form's profile, validated; None (the error said, the field marked) when it is not valid."""
        try:
            profile = self.profile()
            profile.validate()
        except HostError as exc:
            label = self._label(exc.field)
            if exc.field.startswith("release"):  # "Release command: …", not "release.command: …"
                label = f"Release {label.lower()}"
            message = required_or(label, str(exc))
            if exc.field.startswith("release") and message.startswith(f"{exc.field}: "):
                message = f"{label}: {message.removeprefix(exc.field + ': ')}"
            self.error.setText(f"{message}\n{exc.hint}".strip())
            self._mark(exc.field)
            return None
        self.error.setText("")
        self._mark(None)
        return profile

    def _save(self) -> None:
        profile = self._valid_profile()
        if profile is None:
            return
        self.result_profile = profile
        self.result_probe = self._probe_of(profile)
        self.accept()

    def _probe_of(self, profile: HostProfile) -> dict | None:
        """The last successful test's probe if it tested this profile's connection (host, login, Python, run
        folder…: what the test found may differ when one of them changed since)."""
        if self._tested_probe is None:
            return None
        tested, probe = self._tested_probe
        connection = [{k: v for k, v in dataclasses.asdict(p).items() if k not in _NOT_CONNECTION}
                      for p in (tested, profile)]
        return probe if connection[0] == connection[1] else None

    # ---- testing the connection ---------------------------------------------------------
    def test_connection(self) -> GeneratorWorker | None:
        """Test the profile as the form describes it (not saved) on a worker; the result is said under the form.
        Returns the worker (None when the form is not valid)."""
        profile = self._valid_profile()
        if profile is None:
            return None
        if self._prompts is None:  # host-key and password questions, asked from the worker
            self._prompts = Prompts(self)
        connect = {"confirm_host_key": self._prompts.confirm_host_key, "ask_secret": self._prompts.ask_secret,
                   "known_hosts": self._known_hosts}
        worker = self._test_worker = GeneratorWorker(check_profile, profile, self._hosts or HostStore(), **connect)
        where = profile.display_name if profile.is_local else profile.hostname
        worker.yielded.connect(lambda step: self._tested(worker, "busy", f"Testing {where}: {step}…"))
        worker.returned.connect(lambda probe: self._tested(worker, "ok", self._ok_text(where, probe), (profile, probe)))
        worker.errored.connect(lambda exc: self._tested(worker, "error", self._error_text(exc)))
        self.test_button.setEnabled(False)
        self._tested(worker, "busy", f"Testing {where}…")
        QThreadPool.globalInstance().start(worker)
        return worker

    @staticmethod
    def _ok_text(where: str, probe: dict) -> str:
        """The probe in a line, then each thing the host cannot run and what to change."""
        return "\n".join([f"Connected to {where}: " + probe_summary(probe).replace("\n", " · "), *problem_lines(probe)])

    @staticmethod
    def _error_text(exc: BaseException) -> str:
        message, hint = describe(exc)
        return f"Could not connect: {without_class_name(message)}" + (f"\nHint: {hint}" if hint else "")

    def _tested(self, worker: GeneratorWorker, state: str, text: str,
                tested: tuple[HostProfile, dict] | None = None) -> None:
        """Say a test's step or result; ``tested``: the profile and probe of a successful one.  Connected to a
        host that cannot run (the probe's errors) is said in the error colour; no torch marks the Python field."""
        if worker is not self._test_worker:  # an older test's (the form was tested again, or closed)
            return
        self.test_state = state
        self._tested_probe = tested
        self.test_result.setText(text)
        cannot_run = tested is not None and bool(problems_of(tested[1]))
        self.test_result.setStyleSheet(_TEST_STYLES["error" if cannot_run else state])
        self.test_result.setVisible(True)
        if tested is not None and torch_missing(tested[1]):
            self._mark("python")
        if state != "busy":
            self.test_button.setEnabled(True)

    def done(self, result: int) -> None:
        """Closing: a test still running is stopped (at its next step) and its result dropped."""
        if self._test_worker is not None:
            self._test_worker.abort()
            self._test_worker = None
        if self._prompts is not None:
            self._prompts.close()
        super().done(result)


def _lines(edit: QPlainTextEdit) -> list[str]:
    """The non-blank lines of a multi-line field, without surrounding blanks."""
    return [line.strip() for line in edit.toPlainText().splitlines() if line.strip()]
