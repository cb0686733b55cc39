"""A host whose disk fills up mid-run: a real 6 MB tmpfs as the run root, real CLI processes, real torchrun.

The run must end failed with "the host's disk is full (PATH, N bytes free)", one ``failed`` event, a
``follow`` that exits, and a runner whose every command answers with its own message (no traceback) even
when not a byte is left.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest
from helpers.cli_process import REPO, run_cli
from helpers.small_disk import FILL_SCRIPT, fill, free_bytes, small_tmpfs
from helpers.spools import wait_for

from ddpgui.core.store import RunStore
from ddpgui.core.targets.base import CommandResult, Target
from ddpgui.core.targets.local import LocalTarget
from remote_runner.spools import EVENTS
from remote_runner.status import RESERVE, read_status, write_status

pytestmark = pytest.mark.slow

DISK_FULL = re.compile(r"disk is full \((/[^,]+), (\d+) bytes free\)")


@pytest.fixture
def disk(tmp_path):
    with small_tmpfs(tmp_path / "small disk") as path:
        yield path


@pytest.fixture
def cli_env(tmp_path, disk):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    rc, out, err = run_cli(["hosts", "edit", "local", "--run-root", str(disk / "root")], env, timeout=60)
    assert rc == 0, out + err
    return env


def test_a_run_that_fills_the_disk_ends_failed_with_the_reason_once(tmp_path, disk, cli_env):
    script = disk / "fill"  # on the small disk: the script writes big.bin into its own folder (it runs there)
    script.mkdir()
    (script / "train.py").write_text(FILL_SCRIPT)
    rc, out, err = run_cli(["launch", "local", "--script", str(script), "--nproc", "1", "--follow"], cli_env)
    assert rc == 1, out + err  # failed, and the CLI came back
    assert DISK_FULL.search(out + err), out + err
    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        (record,) = store.list_runs()
        assert (record.state, record.failure) == ("failed", "disk_full"), (record.message, out, err)
        path, free = DISK_FULL.search(record.message).groups()
        assert path.startswith(str(disk)) and int(free) < 64 << 10
        failed = [e for e in store.events(record.id) if e.get("event") == "failed"]
        assert len(failed) == 1, failed
        run_dir = record.run_dirs[0]
    host_events = [json.loads(line) for line in open(os.path.join(run_dir, EVENTS), "rb")]
    assert [e["event"] for e in host_events].count("failed") == 1
    assert read_status(run_dir)["state"] == "failed"

    # The disk is still full: follow, show and stop answer at once with the run's end.
    rc, out, err = run_cli(["follow", record.id], cli_env, timeout=120)
    assert rc == 1 and DISK_FULL.search(out + err) and "Traceback" not in err, out + err
    rc, out, err = run_cli(["stop", record.id], cli_env, timeout=120)
    assert rc == 0 and "already failed" in out and "Traceback" not in err, out + err


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_runner_records_an_end_with_not_a_byte_left(disk):
    """No reserve left, the disk at 0 bytes free: status.json cannot be replaced by rename, the supervisor is
    gone.  ``status`` and ``stop`` still end the run with the disk-full reason, once, and print JSON."""
    target = LocalTarget("local", run_root=str(disk / "root"))
    target.deploy(__import__("ddpgui.core.targets.zipapp", fromlist=["build_runner"]).build_runner())
    run_dir = disk / "root" / "runs" / "r-full"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text("{}")
    write_status(str(run_dir), state="running", pid=_dead_pid())
    with open(run_dir / EVENTS, "wb") as fh:
        fh.write(b'{"event": "started", "seq": 0, "t": 1.0}\n')
    assert not (run_dir / RESERVE).exists()
    fill(disk)
    assert free_bytes(disk) == 0
    stopped = target.stop(str(run_dir))  # the runner's JSON, not a traceback blamed on the interpreter
    assert stopped["state"] == "failed" and stopped["failure"] == "disk_full", stopped
    path, free = DISK_FULL.search(stopped["message"]).groups()
    assert path == str(run_dir) and free == "0"
    assert target.status(str(run_dir))["state"] == "failed"
    assert read_status(str(run_dir))["state"] == "failed"  # written in place
    events = [json.loads(line)["event"] for line in open(run_dir / EVENTS, "rb") if line.strip()]
    assert events.count("failed") <= 1


def test_a_runner_traceback_is_shown_as_the_runners_error_not_the_interpreters(disk):
    """A real Python that dies on ENOSPC: the message says the disk is full, never "is it a Python 3 interpreter"."""
    fill(disk)
    target = LocalTarget("local", run_root=str(disk / "root"))
    code = f"open({str(disk / 'x.bin')!r}, 'wb').write(b'0' * 1000000)"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert time.monotonic() - started < 60 and proc.returncode != 0
    error = Target.python_error(target, CommandResult(proc.returncode, proc.stdout, proc.stderr))
    assert "disk is full" in str(error) and "Python 3 interpreter" not in str(error)
    assert error.failure == "disk_full" and error.field is None
    other = Target.python_error(target, CommandResult(1, b"", b"Traceback (most recent call last):\n  File x\n"
                                                                b"KeyError: 'pid'\n"))
    assert "the runner failed on local: KeyError: 'pid'" in str(other) and "interpreter" not in str(other)


CHATTY_SCRIPT = """\
import os, sys, time
print("step 1 loss 1.0", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
for i in range(20000):
    print("x" * 100, flush=True)
"""


def test_a_script_that_prints_on_a_full_disk_is_not_blocked(tmp_path, disk, cli_env):
    """The disk fills up (dd from the test) while a script prints 2 MB: its output cannot be stored, but the
    script must not block on a full pipe (the supervisor used to stop reading it): the run ends."""
    script = tmp_path / "chatty"
    script.mkdir()
    (script / "train.py").write_text(CHATTY_SCRIPT)
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-m", "ddpgui", "launch", "local", "--script", str(script), "--nproc",
                             "1", "--follow", "--", str(go)], cwd=REPO, env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    store_path = tmp_path / "data" / "runs.sqlite3"

    def printed_first_step():
        if not store_path.exists():
            return False
        with RunStore(store_path) as store:
            runs = store.list_runs()
            return bool(runs and runs[0].last_step)

    try:
        assert wait_for(printed_first_step, timeout=180)
        fill(disk)
        go.touch()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    with RunStore(store_path) as store:
        (record,) = store.list_runs()
    assert record.state == "finished", (record.exit_code, record.message, out, err)
    assert proc.returncode == 0, out + err
