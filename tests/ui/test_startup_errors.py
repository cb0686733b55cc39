"""A corrupt hosts file or run store at start-up: a dialog naming the file and what to do; the file untouched."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from ddpgui.core.store import STORE_FILE, RunStore
from ddpgui.ui import app


@pytest.fixture
def dirs(tmp_path, monkeypatch, themed_module):
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    data.mkdir()
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(config))
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(data))
    yield config, data


def _newer_store(path):
    RunStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = version + 5")
    conn.close()


CASES = {
    "hosts_wrong_shape": ("config", "hosts.json", lambda p: p.write_text(json.dumps({"schema": 1, "hosts": 5})),
                          ['"hosts" must be a list of host objects, got 5', "move it aside"]),
    "hosts_not_json": ("config", "hosts.json", lambda p: p.write_text('{"schema": 1, "hosts": ['),
                       ["is not valid JSON", "move it aside"]),
    "store_not_a_database": ("data", STORE_FILE, lambda p: p.write_bytes(b"this is not an SQLite file\n" * 100),
                             ["cannot be read (file is not a database)", "Move it aside"]),
    "store_newer_schema": ("data", STORE_FILE, _newer_store, ["written by a newer ddpgui", "Update ddpgui"]),
}


def _make(dirs, case):
    where, name, make, expected = CASES[case]
    path = (dirs[0] if where == "config" else dirs[1]) / name
    make(path)
    return path, expected, (path.read_bytes(), path.stat().st_mtime_ns)


@pytest.mark.parametrize("case", sorted(CASES))
def test_startup_shows_a_dialog_naming_the_file_and_leaves_it(dirs, case):
    path, expected, before = _make(dirs, case)
    shown = []
    assert app.main([], show_error=lambda box: shown.append((box.text(), box.informativeText()))) == 1
    [(text, informative)] = shown
    assert str(path) in text
    for words in expected:
        assert words in text + " " + informative
    assert "ddpgui has not changed the file" in informative
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_the_real_modal_dialog_is_shown_and_closes(dirs):
    path, _, before = _make(dirs, "store_not_a_database")
    seen = []

    def read_and_close():
        box = QApplication.activeModalWidget()
        if box is None:
            QTimer.singleShot(50, read_and_close)
            return
        seen.append((box.objectName(), box.windowTitle(), box.text()))
        box.close()

    QTimer.singleShot(50, read_and_close)
    assert app.main([]) == 1
    assert seen == [("startup_error", "ddpgui cannot start", seen[0][2])] and str(path) in seen[0][2]
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_says_one_message_and_hint_without_traceback(dirs, case):
    path, expected, before = _make(dirs, case)
    command = ["hosts", "list"] if case.startswith("hosts") else ["runs"]
    done = subprocess.run([sys.executable, "-m", "ddpgui", *command], env=dict(os.environ), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.startswith("ddpgui: ") and str(path) in done.stderr.splitlines()[0]
    assert len(done.stderr.splitlines()) <= 2
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_a_data_folder_that_cannot_be_made_is_a_dialog_not_a_traceback(dirs, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(blocker / "data"))
    shown = []
    assert app.main([], show_error=lambda box: shown.append(box.text())) == 1
    assert len(shown) == 1 and str(blocker / "data") in shown[0]
