""""Map a setting": the arguments (and environment) a script takes for one value of compile, precision or batch.

The words are checked as ddpgui.toml's own are (:func:`~ddpgui.core.scripts.mapping.parse_mapping`: split as a
shell would, never run by one; environment names checked) and written to the folder's ddpgui.toml with what was
there, so the folder remembers them.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
)

from ddpgui.core.scripts import MAPPING_FILE, Mapping, MappingError, read_mapping, write_mapping
from ddpgui.core.scripts.mapping import SETTING_VALUES, join_args, parse_mapping
from remote_runner.config import SCRIPT_SETTINGS

#: What each setting's arguments look like (the field's placeholder).
EXAMPLES = {"precision": "--dtype=bfloat16", "compile": "--compile=True", "batch_size": "--batch_size={}"}


class MappingDialog(QDialog):
    """One setting's value → the script's arguments and environment; Save writes the folder's ddpgui.toml."""

    def __init__(self, folder: str | Path, setting: str = "precision", value: str = "bf16", parent=None):
        super().__init__(parent)
        self.setWindowTitle("Map a setting to your script's arguments")
        self.setObjectName("mapping_dialog")
        self.folder = Path(folder).expanduser()
        self.setting = QComboBox(objectName="mapping_setting")
        self.setting.addItems(SCRIPT_SETTINGS)
        self.value = QComboBox(objectName="mapping_value")
        self.args = QLineEdit(objectName="mapping_args")
        self.env = QLineEdit(objectName="mapping_env", placeholderText="optional: NAME=value NAME2=value")
        self.error = QLabel(objectName="mapping_error", wordWrap=True, styleSheet="color: #d93025", visible=False)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.save_button = self.buttons.button(QDialogButtonBox.StandardButton.Save)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("Setting", self.setting)
        form.addRow("Value", self.value)
        form.addRow("Arguments", self.args)
        form.addRow("Environment", self.env)
        layout = QVBoxLayout(self)
        intro = QLabel(f"What your script takes for this value; kept in {self.folder / MAPPING_FILE}. For a batch "
                       "size, {} is the number.", wordWrap=True)
        intro.setMinimumWidth(1)  # a long folder wraps or is cut, never widens the dialog
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        self.setting.currentTextChanged.connect(self._fill_values)
        self.value.currentTextChanged.connect(self._fill_words)
        self.args.textChanged.connect(self.validate)
        self.env.textChanged.connect(self.validate)
        self.mapping: Mapping | None = None
        try:
            self.mapping = read_mapping(self.folder) or Mapping()
        except MappingError as exc:  # never overwrite a file the user is writing by hand
            self._refuse(f"{exc}: fix it by hand first")
        self.setting.setCurrentText(setting)
        self._fill_values(setting)
        self.value.setCurrentText(value)
        self._fill_words()
        self.resize(520, self.sizeHint().height())

    def _fill_values(self, setting: str) -> None:
        self.value.blockSignals(True)
        self.value.clear()
        self.value.addItems(SETTING_VALUES[setting])
        self.value.blockSignals(False)
        self.args.setPlaceholderText(f"e.g. {EXAMPLES[setting]}")
        self._fill_words()

    def _fill_words(self) -> None:
        """The words the mapping has for the value now, to edit."""
        words = (self.mapping.settings.get(self.setting.currentText()) or {}).get(self.value.currentText()) \
            if self.mapping is not None else None
        self.args.setText(join_args(words.args) if words is not None else "")  # split back as it was
        self.env.setText(" ".join(f"{k}={v}" for k, v in words.env) if words is not None else "")
        self.validate()

    def _refuse(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(True)
        self.save_button.setEnabled(False)

    def words_table(self) -> dict:
        """The value's entry as ddpgui.toml holds it."""
        env = {}
        for part in self.env.text().split():
            name, _, value = part.partition("=")
            env[name] = value
        return {"args": self.args.text().strip(), "env": env}

    def checked(self) -> Mapping:
        """The folder's mapping with this value's words (raises MappingError for words that cannot be used)."""
        if self.mapping is None:
            raise MappingError(self.error.text())
        setting, value = self.setting.currentText(), self.value.currentText()
        if any("=" not in part for part in self.env.text().split()):
            raise MappingError("each environment variable is NAME=value")
        new = parse_mapping({"settings": {setting: {value: self.words_table()}}}, "this mapping").settings
        tables = {s: dict(t) for s, t in self.mapping.settings.items()}
        tables.setdefault(setting, {})[value] = new[setting][value]
        return Mapping(tables)

    def validate(self) -> bool:
        if self.mapping is None:
            return False
        try:
            self.checked()
        except MappingError as exc:
            self.error.setText(str(exc).replace("this mapping: ", ""))
            self.error.setVisible(bool(self.args.text().strip() or self.env.text().strip()))
            self.save_button.setEnabled(False)
            return False
        self.error.setVisible(False)
        self.save_button.setEnabled(True)
        return True

    def accept(self) -> None:
        if not self.validate():
            return
        try:
            write_mapping(self.folder, self.checked())
        except OSError as exc:
            self._refuse(f"{self.folder / MAPPING_FILE} cannot be written: {exc.strerror or exc}")
            return
        super().accept()


__all__ = ["MappingDialog"]
