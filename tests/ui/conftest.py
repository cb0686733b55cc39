"""A main window on private stores and settings, closed (workers awaited) after each test."""
import pytest
from PySide6.QtCore import QSettings

from ddpgui.core.hosts import HostStore
from ddpgui.core.store import RunStore


@pytest.fixture
def window(qtbot, tmp_path):
    from ddpgui.ui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                     settings=settings)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
