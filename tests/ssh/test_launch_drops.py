"""A link that drops during a launch, over the real loopback sshd: the launch goes on from the stage it reached once
the link is back and starts the run once; a link that stays down fails it with a hint true for that stage; a full
disk at launch says the host's free space and leaves no run directory behind.

The host's python is a small shell script in front of the real one (:func:`held_python`): it holds one chosen
command (before or after running it) until the test has dropped the link, so the drop lands while that command is
in flight, at an exact stage, with no timing.  These log in as the user running the tests (root on CI), whose
Python has torch, as test_ssh_unlucky does.
"""
import getpass
import json
import os
import re
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.small_disk import fill, small_tmpfs
from helpers.spools import wait_for

from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.base import TargetError
from remote_runner.failures import DISK_FULL_HINT
from remote_runner.supervisor import supervisor_pid

pytestmark = pytest.mark.slow

RUN = {"workload": "linear", "steps": 3, "nproc_per_node": 1, "device": "cpu", "backend": "gloo", "log_every": 1}
DISK_FULL = re.compile(r"disk is full \((/[^,]+), (\d+) bytes free\)")

HOLDING_PYTHON = """\
#!/bin/sh
# The first command whose arguments contain the armed word is held (after running it, when armed "after") until the
# test writes a line to the release FIFO; every other command is the real python.
gate={gate}
if [ -f "$gate/arm" ]; then
  word=$(cat "$gate/arm")
  case "$*" in
    *"$word"*)
      if mv "$gate/arm" "$gate/fired" 2>/dev/null; then
        if [ "$(cat "$gate/when")" = after ]; then
          {real} "$@" > "$gate/answer"
        fi
        exec 3<>"$gate/release"
        : > "$gate/held"
        read -r _ <&3
        exit 1
      fi;;
  esac
fi
exec {real} "$@"
"""


class Gate:
    """The holding python's controls: :meth:`arm` it, wait until it :meth:`holds`, :meth:`release` it."""

    def __init__(self, directory: Path):
        self.dir = directory
        directory.mkdir()
        os.mkfifo(directory / "release")
        self.python = directory / "python"
        self.python.write_text(HOLDING_PYTHON.format(gate=directory, real=sys.executable))
        self.python.chmod(0o755)

    def arm(self, word: str, when: str = "before") -> None:
        (self.dir / "when").write_text(when)
        (self.dir / "arm").write_text(word)

    def holds(self) -> bool:
        return wait_for((self.dir / "held").exists, timeout=240)

    def answer(self) -> dict:
        """What the held command printed (armed "after")."""
        return json.loads((self.dir / "answer").read_text().splitlines()[-1])

    def release(self) -> None:
        try:
            fd = os.open(self.dir / "release", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # nothing holds it open: nothing is held
            return
        try:
            os.write(fd, b"go\n")
        finally:
            os.close(fd)


@pytest.fixture
def launching(ssh_env, tmp_path):
    """(manager, gate, run root): a RunManager whose host "box" runs the holding python (``sftp=False``: the sshd
    without SFTP, whose uploads go through that python too)."""
    made = []

    def make(env=ssh_env, run_root=None):
        gate = Gate(tmp_path / f"gate{len(made)}")
        run_root = run_root or tmp_path / f"root{len(made)}"
        profile = env.profile("box", user=getpass.getuser(), python=str(gate.python), run_root=str(run_root))
        hosts = env.store(tmp_path, profile)
        store = RunStore(tmp_path / f"runs{len(made)}.sqlite3")
        manager = RunManager(store, hosts, lambda name: env.target(tmp_path, profile, store=hosts))
        made.append((manager, store, gate))
        return manager, gate, Path(run_root)

    yield make
    for manager, store, gate in made:
        gate.release()
        manager.close()
        store.close()


def launch_through_a_drop(manager, gate, settings, drop):
    """Launch in the background; once the armed command is held, ``drop()`` the link and let the command go on.
    Returns the launch's future."""
    pool = ThreadPoolExecutor(1)
    launched = pool.submit(manager.launch, "box", settings)
    pool.shutdown(wait=False)
    try:
        assert gate.holds(), "the armed command never ran"
        drop()
    finally:
        gate.release()
    return launched


def run_dirs(run_root: Path) -> list[str]:
    runs = run_root / "runs"
    return sorted(os.listdir(runs)) if runs.is_dir() else []


def started_once(manager, record) -> None:
    """The run finished, from one run directory and one supervisor."""
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, final.hint)
    assert [e.get("event") for e in manager.store.events(record.id)].count("started") == 1


def take_down(server) -> None:
    """The host goes away: its sshd stops listening first, then the link drops, so no reconnect slips in between."""
    sessions = server.connection_processes()
    server.proc.terminate()
    server.proc.wait(timeout=10)
    for pid in sessions:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def sshd_back(ssh_env):
    """The session's sshd is running again after the test (a test takes it down to keep the link down)."""
    yield ssh_env.server
    if ssh_env.server.proc.poll() is not None:
        ssh_env.server.start()


def test_a_drop_while_deploying_the_runner_is_retried_and_the_run_starts_once(ssh_env, launching):
    manager, gate, root = launching()
    gate.arm("hashlib")  # the runner's sha256 check on the host, the first step of deploying it
    record = launch_through_a_drop(manager, gate, RUN, ssh_env.server.drop_connections).result(timeout=300)
    assert record.state == "starting" and record.message == ""
    assert run_dirs(root) == [record.id]
    started_once(manager, record)


def test_a_drop_while_uploading_the_script_is_retried_and_the_run_starts_once(no_sftp_env, launching, tmp_path):
    manager, gate, root = launching(no_sftp_env)
    manager.targets.target("box")  # the runner deployed: the next file written is the script's
    script = tmp_path / "script"
    script.mkdir()
    (script / "train.py").write_text("for step in range(1, 4):\n    print(f'step {step} loss {1.0 / step}')\n")
    gate.arm("def put(")  # the exec-channel upload of the host without SFTP
    settings = {"mode": "script", "script": {"dir": str(script), "entry": "train.py"}, "nproc_per_node": 1,
                "device": "cpu", "backend": "gloo"}
    record = launch_through_a_drop(manager, gate, settings, no_sftp_env.server.drop_connections).result(timeout=300)
    assert run_dirs(root) == [record.id]
    assert record.config["script"]["dir"].startswith(str(root))  # the uploaded copy, not this computer's folder
    started_once(manager, record)
    assert [m["loss"] for m in manager.store.records(record.id)] == [1.0, 0.5, 1.0 / 3]


def test_a_drop_just_after_the_start_was_sent_follows_the_run_it_started(ssh_env, launching):
    manager, gate, root = launching()
    gate.arm("--new", when="after")  # the run is made and started on the host; its answer is lost
    record = launch_through_a_drop(manager, gate, RUN, ssh_env.server.drop_connections).result(timeout=300)
    assert run_dirs(root) == [record.id]
    assert gate.answer()["pid"] == supervisor_pid(record.run_dirs[0])  # the run the lost answer had started
    started_once(manager, record)


def test_a_link_down_past_the_backoff_before_the_start_says_nothing_was_started(ssh_env, launching, sshd_back):
    manager, gate, root = launching()
    gate.arm("hashlib")
    launched = launch_through_a_drop(manager, gate, RUN, lambda: take_down(ssh_env.server))
    with pytest.raises(TargetError):
        launched.result(timeout=120)
    record = manager.store.list_runs()[0]
    assert (record.state, record.failure, record.run_dirs) == ("failed", "launch_failed", {})
    assert "dropped while connecting to the host and deploying the runner" in record.message
    assert record.hint.startswith("nothing was started on the host")
    assert f"ddpgui rerun {record.id}" in record.hint and "goes on" not in record.hint
    assert run_dirs(root) == []


def test_a_link_down_past_the_backoff_after_the_start_was_sent_is_followed_once_back(ssh_env, launching, sshd_back):
    manager, gate, root = launching()
    gate.arm("--new", when="after")
    launched = launch_through_a_drop(manager, gate, RUN, lambda: take_down(ssh_env.server))
    with pytest.raises(TargetError):
        launched.result(timeout=120)
    record = manager.store.list_runs()[0]
    assert (record.state, record.failure) == ("failed", "launch_unconfirmed")
    assert "the run may have started on the host" in record.hint and f"ddpgui follow {record.id}" in record.hint
    ssh_env.server.start()
    manager.follow(record.id)  # what the hint says to do
    started_once(manager, record)
    assert run_dirs(root) == [record.id]


def test_a_start_cut_off_before_the_host_made_the_run_is_said_when_followed(ssh_env, launching, sshd_back):
    manager, gate, root = launching()
    gate.arm("--new")  # held before the runner ran: the host never makes the run
    launched = launch_through_a_drop(manager, gate, RUN, lambda: take_down(ssh_env.server))
    with pytest.raises(TargetError):
        launched.result(timeout=120)
    record = manager.store.list_runs()[0]
    assert record.failure == "launch_unconfirmed", (record.message, record.hint)
    ssh_env.server.start()
    manager.follow(record.id)
    final = manager.wait(record.id, timeout=120)
    assert final.state == "failed" and final.message.startswith("the run never started on box")
    assert f"ddpgui rerun {record.id}" in final.hint
    assert run_dirs(root) == []


def test_a_full_disk_at_launch_says_its_free_space_and_leaves_no_run_directory(ssh_env, launching, tmp_path):
    with small_tmpfs(tmp_path / "small disk") as disk:
        manager, _, root = launching(run_root=disk / "root")
        manager.targets.environment("box")  # deployed and probed while there is room
        fill(disk)
        with pytest.raises(TargetError):
            manager.launch("box", RUN)
        record = manager.store.list_runs()[0]
        assert record.state == "failed" and record.hint == DISK_FULL_HINT
        path, free = DISK_FULL.search(record.message).groups()
        assert path == str(root / "runs") and int(free) < 64 << 10
        assert run_dirs(root) == []
        manager.close()

