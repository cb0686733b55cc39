"""The host dialog's "Release when idle" box (an SSH host only): the action that releases a rented instance once
nothing of ddpgui is left to do (core/hosts/release.py), decided on the host, so it happens with the laptop closed.

A preset names the action in the provider's own words and fills the command, where it runs and whether it keeps the
disk; editing any of them makes the action "Custom…".  A SkyPilot profile (``provider`` skypilot) offers SkyPilot's
own actions first, its cluster's name in them.  An action that destroys the disk says so in the error colour, and
"destroy even if not collected" is an explicit choice with its own warning.  :meth:`ReleaseBox.policy` is the
policy the box describes (a :class:`HostError` names the field at fault, ``release.<field>``)."""
from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QWidget,
)

from ddpgui.core.hosts import HostError
from ddpgui.core.hosts.release import DEFAULT_AFTER_MIN, PRESETS, ReleasePolicy

NONE, CUSTOM = "", "custom"
ON_CHOICES = (("On the host", "host"), ("On this computer", "local"))
DISK_CHOICES = (("Keeps the disk (a stop)", "stop"), ("Destroys the disk (a terminate)", "terminate"))
#: SkyPilot's own actions, offered first (and marked) for a SkyPilot cluster's profile.
SKYPILOT = ("sky-down", "sky-stop")
#: Hours after which a terminate destroys what no client collected, when the user first ticks the choice.
FORCE_HOURS_DEFAULT = 24.0
_CLUSTER = re.compile(r"\bCLUSTER\b")
_WARNING = "color: #d93025;"
_NOTE = "color: #5f6368;"

TIPS = {
    "preset": "What releases this instance when nothing of ddpgui is left to do on it: None keeps it running; a "
              "preset is the provider's own command; Custom… is a command line of yours. The host itself decides "
              "when, so it releases with the app closed",
    "command": "The command that releases the instance, one line: it runs on the host with /bin/sh (sudo needs a "
               "rule that asks no password) or, for an action on this computer, in your shell here",
    "on": "On the host: the host's own watcher runs the command. On this computer: the host says when it is due "
          "and the app runs the command here while it is open (or ddpgui hosts release NAME), e.g. sky down",
    "kind": "Keeps the disk: a stop, the runs and outputs wait on the stopped instance. Destroys the disk: a "
            "terminate, so the release waits until a client has collected every record and the outputs to keep",
    "after": "Release once the host has been idle this long: no run active, no queued cell waiting and nobody "
             "logged in (0: as soon as it is idle)",
    "force": "Only for an action that destroys the disk: destroy it even if no client collected every record, "
             "this many hours after the host became idle (what was not collected is lost)",
    "force_hours": "Hours of idle time after which the disk is destroyed even with records or outputs not "
                   "collected",
}


class ReleaseBox(QWidget):
    """``policy``: the profile's (None: never released); ``cluster``: a SkyPilot profile's cluster ("" for others)."""

    def __init__(self, policy: ReleasePolicy | None = None, cluster: str = "", parent=None):
        super().__init__(parent, objectName="release_box")
        self.cluster = cluster
        self.preset = ElidedCombo(objectName="release_preset", toolTip=TIPS["preset"])
        self.preset.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset.setMinimumContentsLength(24)  # a long preset never widens the dialog: its list shows it whole
        self.preset.addItem("None: never release this host", NONE)
        first = SKYPILOT if cluster else ()
        for name in (*first, *(n for n in PRESETS if n not in first)):
            suggested = " (suggested for this SkyPilot cluster)" if name in first else ""
            self.preset.addItem(PRESETS[name].label.replace("CLUSTER", cluster or "CLUSTER") + suggested, name)
            self.preset.setItemData(self.preset.count() - 1, PRESETS[name].command, Qt.ItemDataRole.ToolTipRole)
        self.preset.addItem("Custom…", CUSTOM)
        self.preset.view().setMinimumWidth(self.preset.view().sizeHintForColumn(0) + 24)
        self.command = QLineEdit(objectName="release_command", toolTip=TIPS["command"],
                                 placeholderText="e.g. sudo shutdown -h now")
        self.on = _combo("release_on", ON_CHOICES, TIPS["on"])
        self.kind = _combo("release_kind", DISK_CHOICES, TIPS["kind"])
        self.after = QDoubleSpinBox(objectName="release_after", toolTip=TIPS["after"], decimals=2, minimum=0,
                                    maximum=30 * 24 * 60, suffix=" min idle", value=DEFAULT_AFTER_MIN)
        self.force = QCheckBox("Destroy even if not collected, after", objectName="release_force",
                               toolTip=TIPS["force"])
        self.force_hours = QDoubleSpinBox(objectName="release_force_hours", toolTip=TIPS["force_hours"], decimals=1,
                                          minimum=0, maximum=100000, suffix=" h", value=FORCE_HOURS_DEFAULT)
        force_row = QWidget()
        row = QHBoxLayout(force_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.force)
        row.addWidget(self.force_hours)
        row.addStretch(1)
        self.warning = QLabel(objectName="release_warning", wordWrap=True, styleSheet=_WARNING, visible=False)
        self.note = QLabel(objectName="release_note", wordWrap=True, styleSheet=_NOTE, visible=False)
        for label in (self.warning, self.note):
            label.setMinimumWidth(1)  # long words never widen the dialog
        self.form = form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        for label, widget in (("Action", self.preset), ("Command", self.command), ("Runs", self.on),
                              ("Disk", self.kind), ("Release after", self.after), ("Not collected", force_row)):
            form.addRow(label, widget)
        form.addRow(self.warning)
        form.addRow(self.note)
        self.intro = QLabel("When no run is active, no queued cell waits and nobody is logged in for the time "
                            "below, the host runs this action by itself: the laptop may be closed.",
                            objectName="release_intro", wordWrap=True, styleSheet=_NOTE)
        self.intro.setMinimumWidth(1)
        form.insertRow(0, self.intro)
        #: the HostError field names (``release.<field>``) → the control at fault
        self.fields: dict[str, QWidget] = {
            "release": self.preset, "release.command": self.command, "release.on": self.on,
            "release.kind": self.kind, "release.after_min": self.after,
            "release.destroy_uncollected_after_h": self.force_hours}
        self.set_policy(policy)
        self.preset.activated.connect(self._preset_chosen)
        self.command.textEdited.connect(self._edited)
        self.on.activated.connect(self._edited)
        self.kind.activated.connect(self._edited)
        self.force.toggled.connect(self._update)
        self.force_hours.valueChanged.connect(self._update)

    # ---- the policy ------------------------------------------------------------------------------
    def set_policy(self, policy: ReleasePolicy | None) -> None:
        if policy is None:
            self.preset.setCurrentIndex(self.preset.findData(NONE))
        else:
            self.command.setText(policy.command)
            self.on.setCurrentIndex(self.on.findData(policy.on))
            self.kind.setCurrentIndex(self.kind.findData(policy.kind))
            self.after.setValue(policy.after_min)
            forced = policy.destroy_uncollected_after_h
            self.force.setChecked(forced is not None)
            self.force_hours.setValue(FORCE_HOURS_DEFAULT if forced is None else forced)
            self.preset.setCurrentIndex(self.preset.findData(self._matching_preset()))
        self._update()

    def policy(self) -> ReleasePolicy | None:
        """The policy the box describes (None: never released); a HostError names the field at fault."""
        if self.preset.currentData() == NONE:
            return None
        command = self.command.text().strip()
        if not command:
            raise HostError("release.command", "the release command is empty",
                            "pick a preset, or write the line that releases the instance, e.g. sudo shutdown -h now")
        if _CLUSTER.search(command):
            raise HostError("release.command", "replace CLUSTER with the name of your SkyPilot cluster",
                            "sky status lists your clusters")
        terminate = self.kind.currentData() == "terminate"
        return ReleasePolicy(command=command, on=self.on.currentData(), kind=self.kind.currentData(),
                             after_min=round(self.after.value(), 2),
                             destroy_uncollected_after_h=self.force_hours.value()
                             if terminate and self.force.isChecked() else None)

    def _preset_command(self, name: str) -> str:
        return PRESETS[name].command.replace("CLUSTER", self.cluster) if self.cluster else PRESETS[name].command

    def _matching_preset(self) -> str:
        """The preset the command, where it runs and the disk choice are (Custom… when none is)."""
        for name, preset in PRESETS.items():
            if (self._preset_command(name), preset.on, preset.kind) == (
                    self.command.text().strip(), self.on.currentData(), self.kind.currentData()):
                return name
        return CUSTOM

    def _preset_chosen(self) -> None:
        name = self.preset.currentData()
        if name in PRESETS:
            preset = PRESETS[name]
            self.command.setText(self._preset_command(name))
            self.on.setCurrentIndex(self.on.findData(preset.on))
            self.kind.setCurrentIndex(self.kind.findData(preset.kind))
        elif name == CUSTOM and not self.command.text().strip():
            self.command.setFocus()
        self._update()

    def _edited(self) -> None:
        """The command, where it runs or the disk choice edited: the preset it now is, or Custom…"""
        self.preset.setCurrentIndex(self.preset.findData(self._matching_preset()))
        self._update()

    def _update(self) -> None:
        """Fields enabled with an action; the warnings and notes of the action chosen."""
        active = self.preset.currentData() != NONE
        terminate = self.kind.currentData() == "terminate"
        for widget in (self.command, self.on, self.kind, self.after):
            widget.setEnabled(active)
        self.force.setEnabled(active and terminate)
        self.force_hours.setEnabled(active and terminate and self.force.isChecked())
        warning = ""
        if active and terminate:
            warning = ("This action destroys the instance and everything on its disk. The release waits until a "
                       "client has collected every record and the outputs you asked to keep (the app does while "
                       "it is open, or ddpgui adopt).")
            if self.force.isChecked():
                warning += (f" With the box ticked, {self.force_hours.value():g} h after the host became idle it "
                            "destroys the disk anyway: what no client collected by then is lost for good.")
        self.warning.setText(warning)
        self.warning.setVisible(bool(warning))
        notes = []
        if active and self.on.currentData() == "local":
            notes.append("On this computer: when the host says the release is due, the app runs the command here "
                         "after a minute's notice you can cancel (while the app is open; or ddpgui hosts release "
                         "NAME).")
        if not active and self.cluster:
            notes.append(f"For the SkyPilot cluster {self.cluster}: SkyPilot's sky stop / sky down are first in "
                         "the list.")
        self.note.setText(" ".join(notes))
        self.note.setVisible(bool(notes))


class ElidedCombo(QComboBox):
    """A combo box whose current text is elided at its end when it does not fit (its list shows it whole)."""

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)
        option.currentText = self.fontMetrics().elidedText(option.currentText, Qt.TextElideMode.ElideRight,
                                                           field.width())
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)


def _combo(name: str, choices: tuple, tip: str) -> QComboBox:
    combo = QComboBox(objectName=name, toolTip=tip)
    for text, value in choices:
        combo.addItem(text, value)
    return combo
