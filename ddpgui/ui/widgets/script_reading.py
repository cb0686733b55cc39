"""The launch form's settings for reading a script's metrics (in its Advanced settings, for a script only):
the loss series (``script.loss_series``; empty: the first loss-like series) and "Try reading a log…", which picks
a log file or a folder of TensorBoard/CSV logs and asks for it to be read (:signal:`ScriptReading.requested`; the
window reads it on a worker, see :func:`ddpgui.ui.dialogs.parse_log.try_reading`)."""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QLineEdit, QMenu, QPushButton

LOSS_TIP = ("The series read as the run's loss (a printed key, a TensorBoard tag, a CSV column: train_loss, "
            "val_loss, train/loss); empty: the first loss-like series the script gives (loss, train_loss, …)")
TRY_TIP = ("Read a log as a run of this script would be read, before launching it: the script's printed output "
           "saved to a file, a TensorBoard event file or CSV log, or a folder of them; the Metric regex and Loss "
           "series above are used")


class ScriptReading(QObject):
    """The Loss series field and the Try reading a log… button (the form lays them out); ``requested`` carries
    the path of the log or folder the user picked."""

    requested = Signal(str)

    def __init__(self, metric_regex: QLineEdit, parent=None):
        super().__init__(parent)
        self.metric_regex = metric_regex
        self.loss_series = QLineEdit(objectName="loss_series_field", placeholderText="empty: the first loss-like "
                                     "series", toolTip=LOSS_TIP)
        self.button = QPushButton("Try reading a log…", objectName="try_log", toolTip=TRY_TIP)
        self.menu = QMenu(self.button, objectName="try_log_menu")
        self.menu.addAction("A log file (printed output, event file, CSV)…", self.pick_file).setObjectName(
            "try_log_file")
        self.menu.addAction("A folder of TensorBoard or CSV logs…", self.pick_folder).setObjectName("try_log_folder")
        self.button.setMenu(self.menu)

    def options(self) -> tuple[str, str]:
        """(metric regex, loss series) as the form holds them now."""
        return self.metric_regex.text(), self.loss_series.text()

    def value(self) -> str | None:
        return self.loss_series.text().strip() or None

    def pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.button.window(), "A log to read",
                                              filter="Logs (*.log *.txt *.out *.err *.csv *tfevents*);;All files (*)")
        if path:
            self.requested.emit(path)

    def pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self.button.window(), "A folder of TensorBoard or CSV logs")
        if path:
            self.requested.emit(path)
