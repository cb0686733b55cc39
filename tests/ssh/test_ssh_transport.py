"""SSHTarget's primitives against a real sshd: exec, stream, files, run root, deploy, drops and reconnects."""
import os
import posixpath
import signal
import subprocess
import threading
import time

import pytest

from ddpgui.core.ssh.connection import CommandTimeout
from ddpgui.core.targets.base import ConnectionLost, TargetError
from ddpgui.core.targets.zipapp import build_runner


@pytest.fixture
def target(ssh_env, tmp_path):
    with ssh_env.target(tmp_path) as t:
        yield t


def test_exec_returns_exit_code_stdout_and_stderr(target):
    result = target.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.rc, result.stdout, result.stderr) == (3, b"out\n", b"err\n")


def test_exec_feeds_stdin_and_reuses_one_connection(target):
    assert target.exec(["cat"], stdin=b"hello \xff bytes").stdout == b"hello \xff bytes"
    transport = target.connection.transport()
    for _ in range(3):
        assert target.exec(["true"]).rc == 0
    assert target.connection.transport() is transport


def test_large_output_and_input_do_not_deadlock(target):
    data = bytes(range(256)) * 20000  # 5 MB: more than the channel windows
    result = target.exec(["cat"], stdin=data, timeout=60)
    assert result.rc == 0 and result.stdout == data


def test_missing_command_is_exit_127(target):
    result = target.exec(["no-such-command-ddpgui"])
    assert result.rc == 127 and b"not found" in result.stderr


def test_command_timeout_is_a_clear_error_and_the_connection_stays_usable(target):
    with pytest.raises(CommandTimeout, match="did not finish within 0.5 s") as info:
        target.exec(["sleep", "5"], timeout=0.5)
    assert isinstance(info.value, subprocess.TimeoutExpired)  # as LocalTarget raises
    assert target.exec(["echo", "still here"]).stdout == b"still here\n"


def test_stream_reads_until_eof_and_times_out_when_silent(target):
    stream = target.stream(["sh", "-c", "echo one; echo two >&2; echo three"])
    data = b""
    while chunk := stream.read(10):
        data += chunk
    assert data == b"one\nthree\n"  # stderr is dropped, as for LocalTarget
    stream.close()
    silent = target.stream(["sleep", "10"])
    with pytest.raises(TimeoutError):
        silent.read(0.3)
    silent.close()


def test_closing_a_stream_does_not_kill_what_the_command_started(target):
    marker = posixpath.join(target.run_root(), "after-close")
    target.makedirs(target.run_root())
    stream = target.stream(["sh", "-c", 'echo ready; sleep 1; echo done > "$1"', "sh", marker])
    assert stream.read(10) == b"ready\n"
    stream.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if target.exec(["test", "-f", marker]).rc == 0:
            break
        time.sleep(0.2)
    assert target.read_file(marker) == b"done\n"


def test_run_root_expands_tilde_on_the_host_once(sacrificial, tmp_path):
    with sacrificial.target(tmp_path) as target:
        root = target.run_root()
        assert root == f"{sacrificial.account.home}/ddpgui root box ✓"
        assert target.run_root() is root


def test_files_are_written_atomically_with_their_mode(target):
    directory = posixpath.join(target.run_root(), "sub dir", "ünï")
    target.makedirs(directory, 0o700)
    path = posixpath.join(directory, "file with spaces ✓.bin")
    target.write_file(path, b"\x00first", 0o600)
    target.write_file(path, b"second", 0o640)
    assert target.read_file(path) == b"second"
    listing = target.exec(["stat", "-c", "%a %n", directory, path]).stdout.decode().splitlines()
    assert listing == [f"700 {directory}", f"640 {path}"]
    assert target.exec(["ls", "-A", directory]).stdout.decode().splitlines() == ["file with spaces ✓.bin"]
    with pytest.raises(FileNotFoundError):
        target.read_file(posixpath.join(directory, "missing"))


def test_deploy_uploads_once_then_nothing(target):
    package = build_runner()
    progress = []
    assert target.deploy(package, lambda *p: progress.append(p)) == package.size
    assert progress[-1] == (package.size, package.size, 1, 1)
    assert target.sha256(target.runner_path(package)) == package.sha256
    assert target.deploy(package) == 0
    with pytest.raises(TargetError, match="no run in"):
        target.status(posixpath.join(target.run_root(), "runs", "does-not-exist"))


def test_dropped_connection_mid_command_then_reconnect(target, ssh_env):
    assert target.exec(["true"]).rc == 0
    killer = threading.Timer(0.5, ssh_env.server.drop_connections)
    killer.start()
    with pytest.raises(ConnectionLost, match="dropped while running sleep") as info:
        target.exec(["sleep", "20"], timeout=30)
    killer.join()
    assert "reopened on the next command" in info.value.hint
    assert target.exec(["echo", "back"]).stdout == b"back\n"


def test_dropped_connection_while_streaming_is_reported_at_once(target, ssh_env):
    stream = target.stream(["sh", "-c", "while true; do echo tick; sleep 0.2; done"])
    assert stream.read(10).startswith(b"tick")
    assert ssh_env.server.drop_connections() >= 1
    with pytest.raises(ConnectionLost, match="dropped while streaming"):
        for _ in range(100):
            stream.read(5)
    stream.close()
    assert target.exec(["echo", "back"]).stdout == b"back\n"


def test_connection_closed_while_idle_is_reopened_transparently(target, ssh_env):
    assert target.exec(["true"]).rc == 0
    assert ssh_env.server.drop_connections() >= 1
    assert target.exec(["echo", "again"]).stdout == b"again\n"
    assert target.connection.alive()


def test_a_silent_link_is_detected_within_seconds(ssh_env, tmp_path):
    frozen: list[int] = []
    with ssh_env.target(tmp_path, connect_timeout=1.5) as target:
        try:
            stream = target.stream(["sh", "-c", "while true; do echo tick; sleep 0.2; done"])
            assert stream.read(10).startswith(b"tick")
            old = target.connection.transport()
            frozen += ssh_env.server.freeze_connections()
            with pytest.raises(TimeoutError):  # follow() turns this into ConnectionLost
                for _ in range(100):
                    stream.read(1.0)
            # nothing had started yet: the command runs on a fresh connection
            assert target.exec(["echo", "hi"], timeout=5).stdout == b"hi\n"
            assert target.connection.transport() is not old
            freezer = threading.Timer(0.3, lambda: frozen.extend(ssh_env.server.freeze_connections()))
            freezer.start()
            with pytest.raises(ConnectionLost, match="dropped while running sleep"):
                target.exec(["sleep", "5"], timeout=1.5)
            freezer.join()
        finally:
            for pid in frozen:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        assert target.exec(["echo", "back"]).stdout == b"back\n"


def test_a_python_under_home_is_expanded_on_the_host(sacrificial, tmp_path):
    ssh_env = sacrificial  # the test writes into the account's home
    home = ssh_env.account.home
    link = home / "bin with space" / "py"
    link.parent.mkdir(exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(ssh_env.account.python)
    with ssh_env.target(tmp_path, ssh_env.profile(python="~/bin with space/py")) as target:
        assert target.python == f"{home}/bin with space/py"
        assert target.exec([target.python, "-c", "print(6 * 7)"]).stdout == b"42\n"
