"""Entry point of the desktop app: ``main()`` opens the main window (torch is never imported here)."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication, QMessageBox

from ddpgui.core.errors import describe
from ddpgui.core.hosts import HostError, HostStore
from ddpgui.core.logs import quiet_library_logs
from ddpgui.core.store import RunStore, StoreError, StoreFileError

from . import platform_check

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
        text = qss.read_text(encoding="utf-8")
        if app.styleSheet() != text:  # set again, the same sheet would still repolish every widget
            app.setStyleSheet(text)
    icon = folder / "icons" / "ddpgui.svg"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))


def collect_garbage_on_the_gui_thread(app: QApplication) -> None:
    """Python's cycle collector runs only on the GUI thread, on a timer (pyqtgraph's ``GarbageCollector``).

    Left automatic, it runs on whichever thread allocates: a worker (an export, a follower) can then free the
    wrapper of a dead widget; PySide 6.11 defers that widget's deletion to the GUI thread, and a GUI thread
    deleting it while the worker frees the next one deadlocked both (seen once in 11 loops of the Compare
    export test: ~QMenu in ``runDeletionInMainThread`` against a worker in an import)."""
    from pyqtgraph.util.garbage_collector import GarbageCollector

    if getattr(app, "_ddpgui_gc", None) is None:
        app._ddpgui_gc = GarbageCollector(interval=1.0)


def create_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    collect_garbage_on_the_gui_thread(app)
    app.setApplicationName("ddpgui")
    app.setOrganizationName("ddpgui")
    app.setDesktopFileName("ddpgui")
    apply_theme(app)
    return app


def startup_error_box(exc: Exception, title: str = "ddpgui cannot start",
                      name: str = "startup_error") -> QMessageBox:
    """The dialog for a hosts file or run store that cannot be opened (or used, later: see
    :func:`show_store_errors`): which file, what is wrong, what to do."""
    message, hint = describe(exc)
    box = QMessageBox(QMessageBox.Icon.Critical, title, message[:1].upper() + message[1:],
                      QMessageBox.StandardButton.Close)
    box.setObjectName(name)
    box.setInformativeText((hint[:1].upper() + hint[1:] + ". " if hint else "")
                           + "ddpgui has not changed the file; keep it (or a backup of it) if you want its "
                             "contents back.")
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return box


def show_store_errors(show_error: Callable[[QMessageBox], object]) -> Callable:
    """A run store that fails after opening (a damaged page met by a view, a disk gone read-only) gets the
    start-up dialog, once per kind of failure, instead of a traceback: Qt hands an exception raised in a slot to
    ``sys.excepthook``, and so does a worker for one it raised (``workers``); every other exception still goes to
    the hook that was there (returned, to put back)."""
    previous, said = sys.excepthook, set()

    def hook(kind, exc, tb) -> None:
        if not isinstance(exc, StoreFileError):
            previous(kind, exc, tb)
            return
        message, hint = describe(exc)
        print(f"ddpgui: {message}" + (f"\nhint: {hint}" if hint else ""), file=sys.stderr)
        if kind not in said:
            said.add(kind)
            show_error(startup_error_box(exc, "ddpgui cannot use its run store", "store_error"))

    sys.excepthook = hook
    return previous


def open_stores() -> tuple[RunStore, HostStore]:
    """The user's run store and host profiles (raising StoreError / HostError, never changing a bad file)."""
    store = RunStore()
    try:
        return store, HostStore()
    except BaseException:
        store.close()
        raise


def main(argv: list[str] | None = None,
         show_error: Callable[[QMessageBox], object] = QMessageBox.exec) -> int:
    """Open the main window; 1 when no window can open here or the stores cannot be read.

    ``show_error`` shows the start-up error dialog (tests read and close it instead of blocking).
    """
    quiet_library_logs()  # paramiko's own tracebacks (a host that sends no banner) stay off stderr
    problem = platform_check.problem()
    if problem:  # before QApplication: Qt aborts the process when no platform plugin loads
        print(problem, file=sys.stderr)
        return 1
    app = create_app(argv)
    try:
        store, hosts = open_stores()
        from .main_window import MainWindow

        window = MainWindow(store=store, hosts=hosts)  # reads the runs: a damaged store may show only now
    except (StoreError, HostError, OSError) as exc:  # OSError: a config or data folder that cannot be made
        message, hint = describe(exc)
        print(f"ddpgui: {message}" + (f"\nhint: {hint}" if hint else ""), file=sys.stderr)
        show_error(startup_error_box(exc))
        return 1
    previous_hook = show_store_errors(show_error)
    app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_theme(app))
    window.show()
    if os.environ.get(EXIT_AFTER_SHOW_ENV):
        QTimer.singleShot(0, window.close)
        QTimer.singleShot(0, app.quit)
    else:
        window.probe_at_start()  # This computer's choices (GPUs, precisions) are known from the start
        window.start_gpu_watch()  # the hosts' "3 of 8 GPUs free" while the window is looked at
    try:
        return app.exec()
    finally:
        sys.excepthook = previous_hook


if __name__ == "__main__":
    sys.exit(main())
