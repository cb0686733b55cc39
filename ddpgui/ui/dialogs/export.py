"""The Compare tab's export dialog: folder, formats and figure width, remembered in the window's QSettings."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
)

from ddpgui.core.outputs.export import FORMATS as ALL_FORMATS


class ExportDialog(QDialog):
    """Folder, formats and figure width of an export; remembered in the window's QSettings."""

    def __init__(self, settings: QSettings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Export comparison")
        self.setObjectName("export_dialog")
        self.settings = settings
        self.folder = QLineEdit(str(settings.value("compare/export_dir", str(Path.home() / "ddpgui-export"))),
                                objectName="export_folder")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        chosen = str(settings.value("compare/export_formats", ",".join(ALL_FORMATS))).split(",")
        self.formats = {fmt: QCheckBox(fmt, objectName=f"export_{fmt}", checked=fmt in chosen) for fmt in ALL_FORMATS}
        self.single = QRadioButton("single column (3.5 in)", objectName="export_single")
        self.double = QRadioButton("double column (7 in)", objectName="export_double")
        widths = QButtonGroup(self)
        widths.addButton(self.single)
        widths.addButton(self.double)
        (self.double if settings.value("compare/export_width", "single") == "double" else self.single).setChecked(True)
        self.error = QLabel(objectName="export_error", wordWrap=True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Export")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        format_row = QHBoxLayout()
        for box in self.formats.values():
            format_row.addWidget(box)
            box.toggled.connect(self._validate)
        width_row = QHBoxLayout()
        width_row.addWidget(self.single)
        width_row.addWidget(self.double)
        form = QFormLayout(self)
        form.addRow("Folder", folder_row)
        form.addRow("Formats", format_row)
        form.addRow("Figure width", width_row)
        form.addRow(self.error)
        form.addRow(self.buttons)
        self.folder.textChanged.connect(self._validate)
        self._validate()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export to folder", self.folder.text())
        if folder:
            self.folder.setText(folder)

    def chosen_formats(self) -> list[str]:
        return [fmt for fmt, box in self.formats.items() if box.isChecked()]

    def width(self) -> str:
        return "double" if self.double.isChecked() else "single"

    def _validate(self) -> bool:
        error = ""
        if not self.folder.text().strip():
            error = "Choose a folder for the files."
        elif not self.chosen_formats():
            error = "Tick at least one format."
        self.error.setText(error)
        self.error.setVisible(bool(error))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not error)
        return not error

    def accept(self) -> None:
        if not self._validate():
            return
        self.settings.setValue("compare/export_dir", self.folder.text().strip())
        self.settings.setValue("compare/export_formats", ",".join(self.chosen_formats()))
        self.settings.setValue("compare/export_width", self.width())
        super().accept()
