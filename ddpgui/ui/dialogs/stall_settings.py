"""Settings ▸ Stall detection…: the thresholds of docs/STALLS.md, checked by StallPolicy before they are kept.

The numbers are plain text fields (a spin box would quietly clamp a value the user typed); OK reads them with
:meth:`StallPolicy.from_dict`, and a value it refuses is marked and named under the form, the dialog left open.
"""
from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QVBoxLayout

from ddpgui.core.runs.stalls import StallPolicy, StallPolicyError

#: The policy's numeric fields: (name, label, what it means).
FIELDS = (
    ("silence_factor", "Silence factor", "stalled when no metric came for this many times the run's usual interval"),
    ("min_silence_s", "Minimum silence (s)", "…and for at least this many seconds"),
    ("gpu_idle_pct", "GPU idle below (%)", "a GPU under this utilisation counts as idle"),
    ("gpu_idle_s", "GPU idle time (s)", "stalled when every GPU of the run idled this long after warm-up"),
    ("auto_stop_after_s", "Automatic stop after (s)", "stop a stalled run this long after it was flagged; "
                                                      "empty: never (the default)"),
)
#: How a field the policy refuses is marked.
BAD_STYLE = "border: 1px solid #d93025;"


def _text(value) -> str:
    return "" if value is None else f"{value:g}"


class StallSettingsDialog(QDialog):
    """The thresholds of ``policy``; after OK, :attr:`policy` is the policy the fields give."""

    def __init__(self, policy: StallPolicy, parent=None):
        super().__init__(parent, objectName="stall_settings", windowTitle="Stall detection")
        self.policy = policy
        self.enabled = QCheckBox("Flag runs that stop making progress (\"stalled?\")", objectName="stall_enabled",
                                 checked=policy.enabled)
        form = QFormLayout()
        form.addRow(self.enabled)
        self.fields: dict[str, QLineEdit] = {}
        values = policy.to_dict()
        for name, label, tip in FIELDS:
            edit = QLineEdit(_text(values[name]), objectName=f"stall_{name}", toolTip=tip)
            if name == "auto_stop_after_s":
                edit.setPlaceholderText("off")
            edit.textEdited.connect(lambda _text, e=edit: e.setStyleSheet(""))
            self.fields[name] = edit
            form.addRow(label, edit)
        self.labels = {name: label for name, label, _ in FIELDS}
        self.error = QLabel(objectName="stall_error", wordWrap=True, visible=False)
        self.error.setStyleSheet("color: #d93025;")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("A run is flagged \"stalled?\" when its metrics stop for much longer than usual, or "
                                "its GPUs idle, while its processes live; a phase it announced (evaluation, "
                                "compiling) is no stall.", wordWrap=True))
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def values(self) -> dict:
        """The fields as StallPolicy.from_dict reads them (text; empty automatic stop: none)."""
        out = {"enabled": self.enabled.isChecked()}
        out.update({name: edit.text().strip() for name, edit in self.fields.items()})
        return out

    def accept(self) -> None:
        for edit in self.fields.values():
            edit.setStyleSheet("")
        try:
            policy = StallPolicy.from_dict(self.values())
        except StallPolicyError as exc:
            edit = self.fields.get(exc.field)
            if edit is not None:
                edit.setStyleSheet(BAD_STYLE)
                edit.setFocus()
            what = str(exc).split(": ", 1)[-1]
            self.error.setText(f"{self.labels.get(exc.field, exc.field)}: {what}"
                               + (f"\nHint: {exc.hint}" if exc.hint else ""))
            self.error.setVisible(True)
            return
        self.error.setVisible(False)
        self.policy = policy
        super().accept()
