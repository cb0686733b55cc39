"""A damaged run store after opening (issue 23, item 6): a real store file with a b-tree page overwritten, a
store on a file system mounted read-only, an empty store file.

Every command through the real ``python -m ddpgui`` says which file, what is wrong and what to do (SQLite's
``.recover``, ``ddpgui adopt HOST``), never a traceback; the app shows its dialog.
"""
import os
import subprocess

import pytest
from helpers.cli_process import cli_env, run_cli
from helpers.damaged_store import damage
from helpers.recorded_runs import put_recorded
from helpers.small_disk import small_tmpfs

from ddpgui.core.store import STORE_FILE, RunStore, StoreCorruptError, StoreReadOnlyError

MALFORMED = "cannot be read (database disk image is malformed)"


@pytest.fixture
def env(tmp_path):
    env = cli_env(tmp_path)
    os.makedirs(env["DDPGUI_DATA_DIR"])
    return env


def damaged_store(env, table):
    """The recorded runs in the CLI's store, then ``table``'s root page damaged; (path, a run id)."""
    path = os.path.join(env["DDPGUI_DATA_DIR"], STORE_FILE)
    with RunStore(path) as store:
        ids = put_recorded(store, "ordinary")
    damage(path, table)
    return path, ids[0]


def assert_said_once_what_to_do(rc, out, err, path, what):
    assert rc == 1 and "Traceback" not in err, out + err
    message, hint = err.splitlines()
    assert message == f"ddpgui: the run store {path} {what}", err
    assert hint.startswith("hint: move it aside") and ".recover" in hint and "ddpgui adopt HOST" in hint, err


COMMANDS = {
    "runs": lambda run: ["runs"],
    "show": lambda run: ["show", run],
    "series": lambda run: ["series", run],
    "export": lambda run: ["export", run, "--out", "exported"],
    "follow": lambda run: ["follow", run],
    "delete": lambda run: ["delete", run, "--yes"],
    "launch": lambda run: ["launch", "local", "--workload", "mlp", "--steps", "5"],
}


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"series"}))
def test_a_damaged_page_of_the_runs_is_said_with_what_to_do_by_every_command(env, tmp_path, command):
    path, run = damaged_store(env, "runs")
    before = open(path, "rb").read()
    rc, out, err = run_cli(COMMANDS[command](run), env, timeout=120)
    assert_said_once_what_to_do(rc, out, err, path, MALFORMED)
    assert open(path, "rb").read() == before  # nothing written over what .recover could still get back


@pytest.mark.parametrize("command", ["series", "export"])
def test_a_damaged_page_of_the_points_is_said_where_the_runs_list_still_works(env, command):
    path, run = damaged_store(env, "blocks")
    rc, out, err = run_cli(["runs"], env, timeout=120)
    assert rc == 0 and run[:8] in out, out + err
    rc, out, err = run_cli(COMMANDS[command](run), env, timeout=120)
    assert_said_once_what_to_do(rc, out, err, path, MALFORMED)


def test_an_empty_store_file_says_how_to_take_the_runs_back(env):
    path = os.path.join(env["DDPGUI_DATA_DIR"], STORE_FILE)
    open(path, "wb").close()
    rc, out, err = run_cli(["runs"], env, timeout=120)
    assert rc == 1 and "Traceback" not in err, out + err
    message, hint = err.splitlines()
    assert message == f"ddpgui: the run store {path} is an empty file (0 bytes): the runs it held are gone from " \
                      "this computer"
    assert "ddpgui adopt HOST" in hint, err
    assert os.path.getsize(path) == 0  # left as it was: no empty store made over it in silence
    with pytest.raises(StoreCorruptError, match="empty file"):
        RunStore(path)


def test_a_store_on_a_read_only_file_system_says_read_only(tmp_path):
    with small_tmpfs(tmp_path / "disk") as disk:
        env = cli_env(tmp_path, DDPGUI_DATA_DIR=str(disk / "data"))
        (disk / "data").mkdir()
        with RunStore(disk / "data" / STORE_FILE) as store:
            store.create_run("r")
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        assert remounted.returncode == 0, remounted.stderr
        rc, out, err = run_cli(["runs"], env, timeout=120)
        assert rc == 1 and "Traceback" not in err, out + err
        message, hint = err.splitlines()
        assert message == (f"ddpgui: the run store {disk / 'data' / STORE_FILE} cannot be written: its folder "
                           f"{disk / 'data'} is on a read-only file system"), err
        assert "DDPGUI_DATA_DIR" in hint
        with pytest.raises(StoreReadOnlyError, match="read-only"):
            RunStore(disk / "data" / STORE_FILE)
