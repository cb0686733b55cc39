"""The launch form's compile, precision and batch size for a user's own script, in the script's own words.

For a script the three settings start at "as the script does" (nothing is passed: the script runs as written).
A value the user picks is turned into the script's framework's own arguments or environment variables
(:mod:`ddpgui.core.scripts`), and the form shows exactly what will be passed ("precision bf16 → --bf16 True").
A value the script cannot be given (no framework word, no mapping in the folder's ddpgui.toml) is greyed out
with the reason as its tooltip; "Map a setting…" gives it words once (:class:`~ddpgui.ui.dialogs.script_mapping.
MappingDialog`), written to the folder's ddpgui.toml, so the folder remembers it.

The entry file and the mapping are read again only when they change (:func:`~ddpgui.core.scripts.script_knobs`
keeps them: the form validates on every keystroke).
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout, QWidget

from ddpgui.core.scripts import MAPPING_FILE, MappingError, ScriptKnobs, given_settings, script_knobs
from remote_runner.config import SCRIPT_SETTINGS

#: The first choice of each setting for a script: nothing is passed for it.
SCRIPT_OWN = "as the script does"
#: Each setting as the form names it.
SHOWN = {"compile": "compile", "precision": "precision", "batch_size": "batch"}


class ScriptSettings(QObject):
    """The three settings' script mode on the launch form's own controls, the "passed" line and the Map button."""

    #: The user asked to map ``setting`` ``value`` (the form opens the mapping dialog).
    map_requested = Signal(str, str)

    def __init__(self, compile_box: QComboBox, precision_box: QComboBox, batch: QSpinBox, parent=None):
        super().__init__(parent)
        self.boxes = {"compile": compile_box, "precision": precision_box}
        self.batch = batch
        self.on = False
        self.knobs: ScriptKnobs | None = None
        self.mapping_error = ""  # the folder's ddpgui.toml cannot be used: why
        self.words = QLabel(objectName="script_words", wordWrap=True)
        self.words.setMinimumWidth(1)  # a long word (a path, an argument) is cut, never widens the window
        self.map_button = QPushButton("Map a setting…", objectName="map_setting",
                                      toolTip=f"Give a setting the arguments your script takes for it (kept in the "
                                              f"folder's {MAPPING_FILE})")
        self.map_button.clicked.connect(self._ask_map)
        self.row = QWidget(objectName="script_settings_row")  # the form's full width: the words, then the button
        layout = QVBoxLayout(self.row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.words)
        button_row = QHBoxLayout()
        button_row.addStretch(1)
        button_row.addWidget(self.map_button)
        layout.addLayout(button_row)

    # ---- mode --------------------------------------------------------------------------------
    def set_mode(self, on: bool) -> None:
        """A script (each setting gets "as the script does", chosen) or a built-in workload (it goes)."""
        if on == self.on:
            return
        self.on = on
        for box, default in ((self.boxes["compile"], "off"), (self.boxes["precision"], "fp32")):
            box.blockSignals(True)
            if on:
                box.insertItem(0, SCRIPT_OWN)
                box.setCurrentIndex(0)
            else:
                was_own = box.currentText() == SCRIPT_OWN
                box.removeItem(box.findText(SCRIPT_OWN))
                if was_own:
                    box.setCurrentText(default)
            box.blockSignals(False)
        self.batch.blockSignals(True)
        if on:
            self.batch.setMinimum(0)
            self.batch.setSpecialValueText(SCRIPT_OWN)
            self.batch.setValue(0)
        else:
            self.batch.setSpecialValueText("")
            self.batch.setMaximum(1 << 20)
            self.batch.setMinimum(1)
            if self.batch.value() <= 1:
                self.batch.setValue(32)
        self.batch.blockSignals(False)

    def value(self, setting: str):
        """The form's value of ``setting`` (None: the script's own, nothing passed)."""
        if setting == "batch_size":
            return None if self.on and self.batch.value() == 0 else self.batch.value()
        text = self.boxes[setting].currentText()
        return None if text == SCRIPT_OWN else text

    def apply(self, settings: dict) -> None:
        """Set the three from a script run's settings: those it gave its script; the others its own."""
        given = given_settings(settings, settings.get("script") or {})
        for setting, box in self.boxes.items():
            box.setCurrentText(str(settings[setting]) if setting in given else SCRIPT_OWN)
        self.batch.setValue(int(settings["batch_size"]) if "batch_size" in given else 0)

    # ---- what the script takes ---------------------------------------------------------------
    def read(self, folder: str, entry: str) -> None:
        """What the entry file in ``folder`` takes (core keeps it until the file or its ddpgui.toml changes)."""
        self.knobs, self.mapping_error = None, ""
        if not folder:
            return
        try:
            self.knobs = script_knobs(folder, entry or "train.py")
        except MappingError as exc:
            self.mapping_error = str(exc)

    def refresh(self, folder: str, entry: str, host_problems: dict[str, str | None]) -> str:
        """Grey out what cannot be given (with the reason), show what will be passed; returns the error of a
        chosen value the script cannot be given ("" when none)."""
        model: QStandardItemModel = self.boxes["precision"].model()
        for row in range(model.rowCount()):  # the host's own refusals, whatever the mode
            item = model.item(row)
            reason = host_problems.get(item.text())
            item.setEnabled(reason is None)
            item.setToolTip(reason or ("nothing is passed: the script uses its own precision"
                                       if item.text() == SCRIPT_OWN else f"{item.text()} runs on this host"))
        self.row.setVisible(self.on)
        if not self.on:
            for row in range(self.boxes["compile"].count()):
                self.boxes["compile"].model().item(row).setEnabled(True)
            return ""
        self.read(folder, entry)
        knobs = self.knobs
        for setting, box in self.boxes.items():
            box_model: QStandardItemModel = box.model()
            for row in range(box_model.rowCount()):
                item = box_model.item(row)
                if item.text() == SCRIPT_OWN:
                    continue
                words, why = knobs.preview(setting, item.text()) if knobs else (None, self._unread_reason())
                if words is None:
                    item.setEnabled(False)
                    item.setToolTip(why)
                elif setting == "compile" or host_problems.get(item.text()) is None:
                    item.setToolTip(f"passed as {words.text()}")
        batch_words, batch_why = knobs.preview("batch_size", 1) if knobs else (None, self._unread_reason())
        self.batch.setMaximum(1 << 20 if batch_words is not None else 0)
        self.batch.setToolTip("Batch per process passed to your script" if batch_words is not None else batch_why)
        self.map_button.setEnabled(knobs is not None and not self.mapping_error)
        error, lines = "", []
        for setting in SCRIPT_SETTINGS:
            value = self.value(setting)
            if value is None or knobs is None:
                continue
            words, why = knobs.preview(setting, value)
            if words is None:
                error = error or why
            else:
                lines.append(f"  {SHOWN[setting]} {value} → {words.text()}")
        if self.mapping_error:
            text = f"{self.mapping_error}: fix it, or move it away to pass nothing"
            error = error or (text if any(self.value(s) is not None for s in SCRIPT_SETTINGS) else "")
        elif knobs is None:
            text = "Pick the script's folder to see what it can be given"
        elif lines:
            text = "\n".join([f"Passed to the script ({knobs.described}):", *lines])
        else:
            text = self._takes_text(knobs)
        self.words.setText(text)
        self.words.setToolTip(text)
        return error

    def _takes_text(self, knobs: ScriptKnobs) -> str:
        """What the script can be given, by setting: all, some ("precision bf16; batch"), or none."""
        parts, every = [], True
        for setting, box in self.boxes.items():
            values = [box.itemText(i) for i in range(box.count()) if box.itemText(i) != SCRIPT_OWN]
            takes = [v for v in values if knobs.preview(setting, v)[0] is not None]
            every = every and len(takes) == len(values)
            if takes:
                parts.append(f"{SHOWN[setting]} {', '.join(takes)}")
        if knobs.preview("batch_size", 1)[0] is not None:
            parts.append("batch")
        else:
            every = False
        described = knobs.described[0].upper() + knobs.described[1:]
        if every:
            return f"{described}: every compile, precision and batch value can be passed to it"
        if parts:
            return f"{described}: it can be given {'; '.join(parts)} (a greyed value says why not)"
        return ("ddpgui does not recognise the script's framework: map a setting to pass it (a greyed value says "
                "why)")

    def _unread_reason(self) -> str:
        return self.mapping_error or "pick the script's folder first"

    def _ask_map(self) -> None:
        """Map the first value the script cannot be given yet (precision bf16 when it can be given all)."""
        knobs = self.knobs
        for setting, value in [(s, v) for s, box in self.boxes.items() for v in
                               (box.itemText(i) for i in range(box.count())) if v != SCRIPT_OWN] + [("batch_size", 1)]:
            if knobs is not None and knobs.preview(setting, value)[0] is None:
                self.map_requested.emit(setting, "any" if setting == "batch_size" else value)
                return
        self.map_requested.emit("precision", "bf16")


__all__ = ["SCRIPT_OWN", "ScriptSettings"]
