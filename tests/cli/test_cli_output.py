"""What the CLI writes: user text escaped, closed pipes and silent hosts without tracebacks (real CLI processes)."""
import os
import socket
import subprocess
import sys
import threading

import pytest
from helpers.cli_process import cli_env, run_cli

from ddpgui.cli.common import terminal_text
from ddpgui.core.store import RunStore, SweepRecord

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTILE = "evil\x1b[31mRED\x1b[0m\rover\nline\tTAB\u202eGNP.exe\u2066x\u2069\x07\x9b"
RAW = ("\x1b", "\r", "\t", "\u202e", "\u2066", "\u2069", "\x07", "\x9b")


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))


def _store(env) -> RunStore:
    os.makedirs(env["DDPGUI_DATA_DIR"], exist_ok=True)
    return RunStore(os.path.join(env["DDPGUI_DATA_DIR"], "runs.sqlite3"))


def _ddpgui(args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _piped_to_head(args, env, timeout=180):
    """``ddpgui ARGS 2>err | head -1`` in a real shell: (ddpgui's exit code, its stderr, what head printed)."""
    command = " ".join([sys.executable, "-m", "ddpgui", *args]) + ' 2>"$ERR" | head -1; exit "${PIPESTATUS[0]}"'
    os.makedirs(env["DDPGUI_DATA_DIR"], exist_ok=True)
    err_path = os.path.join(env["DDPGUI_DATA_DIR"], "stderr.txt")
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=dict(env, ERR=err_path), capture_output=True,
                          text=True, timeout=timeout)
    with open(err_path) as fh:
        return proc.returncode, fh.read(), proc.stdout


def test_terminal_text_escapes_controls_and_bidi_and_leaves_plain_text_alone():
    assert terminal_text("mlp × 2 — ünïcode C:\\data") == "mlp × 2 — ünïcode C:\\data"
    shown = terminal_text(HOSTILE)
    assert not any(ch in shown for ch in (*RAW, "\n")), shown
    assert shown.startswith("evil\\x1b[31mRED\\x1b[0m\\rover\\nline\\tTAB\\u202eGNP.exe\\u2066x\\u2069\\x07\\x9b")
    assert terminal_text("a\\b\x1b") == "a\\\\b\\x1b"  # with escapes, a backslash is doubled: unambiguous
    assert terminal_text("two\nlines\x1b", multiline=True) == "two\nlines\\x1b"


def test_runs_and_show_print_hostile_names_escaped(env):
    with _store(env) as store:
        store.create_run("20261201-000000-aaaaaa", name=HOSTILE, tags=["t\x1b]0;title\x07ag"], hosts=["local"],
                         config={"workload": "mlp", "nproc_per_node": 2, "name": HOSTILE}, state="failed")
        store.update_run("20261201-000000-aaaaaa", message="the host said \x1b[2Jcleared", hint="fix\u202eit")
    listing = _ddpgui(["runs"], env)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert len(lines) == 2, lines  # the header and one row: the name's \n and \r did not break the table
    assert not any(ch in listing.stdout for ch in RAW)
    assert terminal_text(HOSTILE)[:32] in lines[1]

    shown = _ddpgui(["show", "20261201-000000-aaaaaa"], env)
    assert shown.returncode == 0, shown.stderr
    assert not any(ch in shown.stdout for ch in RAW), shown.stdout
    assert shown.stdout.startswith(terminal_text(HOSTILE) + "  (20261201-000000-aaaaaa)")
    assert "\\x1b[2Jcleared" in shown.stdout and "fix\\u202eit" in shown.stdout and "t\\x1b]0;title\\x07ag" in shown.stdout


@pytest.mark.parametrize("args", [["runs"], ["runs", "--json"], ["show", "20261201-000000-000000", "--json"],
                                  ["sweeps"], ["sweeps", "--json"]])
def test_output_into_a_closed_pipe_ends_quietly(env, args):
    with _store(env) as store:
        # Far more than a pipe holds: ddpgui is still writing when head has gone.
        for i in range(1200):
            store.create_run(f"20261201-000000-{i:06d}", name=f"run {i} " + "x" * 60, hosts=["local"],
                             config={"workload": "mlp", "notes": "y" * (300_000 if i == 0 else 0)}, state="finished")
        for i in range(1200 if args[0] == "sweeps" else 0):
            store.create_sweep(SweepRecord(id=f"20261201-000000-s{i:05d}", name=f"sweep {i} " + "z" * 60,
                                           hosts=["local"], base={}, matrix={"precision": ["fp32", "bf16"]}), [])
    code, err, head = _piped_to_head(args, env)
    assert code == 0 and err == "", (code, err)
    assert head.strip(), "head printed nothing"


@pytest.mark.slow
def test_probe_json_into_a_closed_pipe_ends_quietly(env):
    code, err, head = _piped_to_head(["probe", "local", "--json"], env)
    # Only our own note may be there (the first probe of a fresh data dir uploads the runner).
    assert code == 0 and all(line.startswith("uploaded the runner") for line in err.splitlines()), (code, err)
    assert head.strip() == "{", head


@pytest.fixture
def silent_port():
    """A real listening socket that accepts connections and never sends a byte (no SSH banner)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("command", [["hosts", "test", "silent"], ["probe", "silent", "--json"]])
def test_a_silent_host_gives_our_message_and_hint_only(env, silent_port, command):
    added = _ddpgui(["hosts", "add", "silent", "--host", "127.0.0.1", "--port", str(silent_port), "--user", "nobody"],
                    env)
    assert added.returncode == 0, added.stderr
    result = _ddpgui(command, env)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr  # no paramiko "Exception (client): ...", no traceback
    assert lines[0].startswith(f"ddpgui: 127.0.0.1:{silent_port} accepted the connection but sent no SSH banner")
    assert lines[1].startswith("hint: ")
    assert "Traceback" not in result.stderr and "paramiko" not in result.stderr


def test_ddpgui_debug_shows_the_library_log(env, silent_port):
    _ddpgui(["hosts", "add", "silent", "--host", "127.0.0.1", "--port", str(silent_port), "--user", "nobody"], env)
    result = _ddpgui(["hosts", "test", "silent"], dict(env, DDPGUI_DEBUG="1"))
    assert result.returncode == 1 and "paramiko.transport" in result.stderr, result.stderr


def test_the_app_keeps_paramiko_off_stderr_too(env, silent_port):
    """The desktop app's main sets up logging the same way: a probe of a silent host (as the app's worker
    runs it, after the real main opened and closed its window offscreen) leaves no library text on stderr."""
    _ddpgui(["hosts", "add", "silent", "--host", "127.0.0.1", "--port", str(silent_port), "--user", "nobody"], env)
    script = (
        "from ddpgui.ui import app\n"
        "assert app.main([]) == 0\n"
        "from ddpgui.core.hosts import HostStore\n"
        "from ddpgui.core.targets.factory import open_target\n"
        "try:\n"
        "    open_target('silent', HostStore()).probe()\n"
        "except Exception as exc:\n"
        "    print('refused:', exc)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env=dict(env, QT_QPA_PLATFORM="offscreen", DDPGUI_EXIT_AFTER_SHOW="1"))
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "sent no SSH banner" in result.stdout, result.stdout
    assert "paramiko" not in result.stderr and "Traceback" not in result.stderr and "Exception" not in result.stderr, \
        result.stderr


def test_a_profile_name_with_a_trailing_newline_is_refused(env):
    """``$`` in a regex also matches before a final newline: names are matched whole."""
    result = _ddpgui(["hosts", "add", "gpu1\n", "--host", "gpu1.example"], env)
    assert result.returncode == 2 and "name" in result.stderr, result.stderr
    assert "gpu1" not in _ddpgui(["hosts", "list"], env).stdout


def test_a_data_folder_that_cannot_be_made_is_one_message_not_a_traceback(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    env = cli_env(tmp_path, DDPGUI_DATA_DIR=str(blocker / "data"))
    rc, out, err = run_cli(["runs"], env, timeout=60)
    assert rc == 1 and "Traceback" not in err, err
    lines = err.splitlines()
    assert lines[0] == f"ddpgui: cannot use {blocker / 'data'}: not a directory", err
    assert lines[1].startswith("hint: check that the path exists") and "DDPGUI_DATA_DIR" in lines[1]
    assert blocker.read_text() == "not a folder\n"
