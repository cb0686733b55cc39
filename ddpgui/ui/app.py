"""Entry point of the desktop app: ``main()`` opens the main window (torch is never imported here)."""
from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication

#: Set to quit right after the window is first shown (cold-start benchmark, smoke tests).
EXIT_AFTER_SHOW_ENV = "DDPGUI_EXIT_AFTER_SHOW"


def resources_dir() -> Path:
    """Icons and the stylesheet: installed as package data, or the repository's resources/ folder."""
    try:
        packaged = resources.files("ddpgui") / "resources"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "resources"


def dark_mode(app: QGuiApplication) -> bool:
    return app.styleHints().colorScheme() == Qt.ColorScheme.Dark


def apply_theme(app: QApplication) -> None:
    """A small stylesheet on top of the platform style; plot colours follow the system's light/dark."""
    import pyqtgraph as pg

    dark = dark_mode(app)
    pg.setConfigOptions(antialias=False, background="#1e1f22" if dark else "w", foreground="#c9ccd1" if dark else "#3c4043")
    folder = resources_dir()
    qss = folder / "style.qss"
    if qss.is_file():
        app.setStyleSheet(qss.read_text(encoding="utf-8"))
    icon = folder / "icons" / "ddpgui.svg"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))


def create_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("ddpgui")
    app.setOrganizationName("ddpgui")
    app.setDesktopFileName("ddpgui")
    apply_theme(app)
    return app


def main(argv: list[str] | None = None) -> int:
    app = create_app(argv)
    from .main_window import MainWindow

    window = MainWindow()
    app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_theme(app))
    window.show()
    if os.environ.get(EXIT_AFTER_SHOW_ENV):
        QTimer.singleShot(0, window.close)
        QTimer.singleShot(0, app.quit)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
