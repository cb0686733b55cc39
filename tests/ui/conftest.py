"""A main window on private stores and settings, closed (workers awaited) after each test; a run store and a
dashboard alone on it (shown, 1000 × 700), or a Compare tab (1400 × 900)."""
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


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


@pytest.fixture
def board(qtbot, store):
    from ddpgui.ui.widgets.dashboard import Dashboard

    widget = Dashboard(store)
    qtbot.addWidget(widget)
    widget.resize(1000, 700)
    widget.show()
    return widget


@pytest.fixture
def settings(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def view(qtbot, store, settings, tmp_path):
    """A Compare tab alone on the run store (shown, 1400 × 900); its workers awaited after the test."""
    from ddpgui.ui.widgets.compare import CompareView
    from ddpgui.ui.workers import WorkerPool

    pool = WorkerPool()
    widget = CompareView(store, HostStore(tmp_path / "hosts.json"), settings, pool.start)
    qtbot.addWidget(widget)
    widget.resize(1400, 900)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget
    pool.shutdown(5000)


@pytest.fixture(scope="module")
def themed_module(qapp):
    """For a file whose tests call ``create_app`` (which themes the shared QApplication): the stylesheet the
    session had is put back once, when the file is done.  Put back after each test instead, every test set it
    again, and each change of the stylesheet repolishes every widget the session still holds (~1-2 s a test)."""
    style = qapp.styleSheet()
    yield
    qapp.setStyleSheet(style)
