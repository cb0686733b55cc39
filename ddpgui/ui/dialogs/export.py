"""The Compare tab's export dialog: what ``ddpgui compare`` offers, remembered in the window's QSettings.

Folder, formats, figure width, the loss curves' x axis, PNG resolution, caption, each repeat's faint curve and N
of "time to N steps" — the options of ``ddpgui compare`` (``--out --format --width --x --dpi --caption
--individual-runs --steps``); :meth:`ExportDialog.options` are the keyword arguments of
:func:`ddpgui.core.outputs.export.export_steps`, the writer both use.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
)

from ddpgui.core.outputs.export import FORMATS as ALL_FORMATS
from ddpgui.core.outputs.figures import FORMATS as FIGURE_FORMATS
from ddpgui.core.outputs.figures import MIN_DPI, X_LABELS

#: What each data format writes (the checkbox's tooltip).
DATA_TIPS = {"csv": "points.csv, telemetry.csv and summary.csv", "tex": "summary.tex: a booktabs table",
             "json": "runs.json: the runs, to import elsewhere (ddpgui import)",
             "curves": "curves.csv: each setting's loss curve and its interval"}


def _on(value: object, default: bool) -> bool:
    return default if value is None else str(value).lower() == "true"


class ExportDialog(QDialog):
    """The export's options; ``x``, ``individual`` and ``n_steps`` start as the Compare tab shows them."""

    def __init__(self, settings: QSettings, parent=None, x: str = "step", individual: bool = True,
                 n_steps: int | None = None):
        super().__init__(parent)
        self.setWindowTitle("Export comparison")
        self.setObjectName("export_dialog")
        self.settings = settings
        self.folder = QLineEdit(str(settings.value("compare/export_dir", str(Path.home() / "ddpgui-export"))),
                                objectName="export_folder")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        chosen = str(settings.value("compare/export_formats", ",".join(ALL_FORMATS))).split(",")
        self.formats = {fmt: QCheckBox(fmt, objectName=f"export_{fmt}", checked=fmt in chosen,
                                       toolTip=DATA_TIPS.get(fmt, f"every figure as {fmt.upper()}"))
                        for fmt in ALL_FORMATS}
        self.single = QRadioButton("single column (3.5 in)", objectName="export_single")
        self.double = QRadioButton("double column (7 in)", objectName="export_double")
        widths = QButtonGroup(self)
        widths.addButton(self.single)
        widths.addButton(self.double)
        (self.double if settings.value("compare/export_width", "single") == "double" else self.single).setChecked(True)
        self.x_axis = QComboBox(objectName="export_x", toolTip="x axis of the loss curves (and of curves.csv)")
        for key, words in X_LABELS.items():
            self.x_axis.addItem(words, key)
        self.x_axis.setCurrentIndex(max(0, self.x_axis.findData(x)))
        self.dpi = QSpinBox(objectName="export_dpi", minimum=MIN_DPI, maximum=1200, singleStep=50, suffix=" dpi",
                            value=int(settings.value("compare/export_dpi", 300)),
                            toolTip=f"Resolution of the PNG figures (300 is print quality; at least {MIN_DPI})")
        self.caption = QCheckBox("a line with GPU, driver, CUDA and torch under each figure", objectName="export_caption",
                                 checked=_on(settings.value("compare/export_caption"), True))
        self.individual = QCheckBox("each repeat faintly under its setting's loss curve",
                                    objectName="export_individual", checked=individual)
        self.steps = QSpinBox(objectName="export_steps", minimum=0, maximum=10**9, singleStep=100,
                              toolTip='N of "time to N steps" in the tables (as the Compare tab: the fewest steps '
                                      "any compared run reached)")
        self.steps.setSpecialValueText(f"as compared ({n_steps})" if n_steps else "as compared")
        self.compared_steps = n_steps
        self.error = QLabel(objectName="export_error", wordWrap=True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Export")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        figure_row, data_row = QHBoxLayout(), QHBoxLayout()
        for fmt, box in self.formats.items():
            (figure_row if fmt in FIGURE_FORMATS else data_row).addWidget(box)
            box.toggled.connect(self._validate)
        figure_row.addStretch(1)
        data_row.addStretch(1)
        width_row = QHBoxLayout()
        width_row.addWidget(self.single)
        width_row.addWidget(self.double)
        width_row.addStretch(1)
        form = QFormLayout(self)
        form.addRow("Folder", folder_row)
        form.addRow("Figures", figure_row)
        form.addRow("Tables, data", data_row)
        form.addRow("Figure width", width_row)
        form.addRow("Loss x axis", self.x_axis)
        form.addRow("PNG resolution", self.dpi)
        form.addRow("Caption", self.caption)
        form.addRow("Each run", self.individual)
        form.addRow("Time to N steps", self.steps)
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

    def options(self) -> dict:
        """The keyword arguments of :func:`~ddpgui.core.outputs.export.export_steps` after its folder."""
        return {"formats": self.chosen_formats(), "width": self.width(), "x": self.x_axis.currentData(),
                "dpi": self.dpi.value(), "caption": self.caption.isChecked(),
                "individual": self.individual.isChecked()}

    def n_steps(self) -> int | None:
        """N of "time to N steps" when the user chose one other than the comparison's (None: as compared)."""
        n = self.steps.value()
        return n if n and n != self.compared_steps else None

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
        self.settings.setValue("compare/export_dpi", self.dpi.value())
        self.settings.setValue("compare/export_caption", "true" if self.caption.isChecked() else "false")
        super().accept()

