"""An SSH endpoint without an SFTP subsystem (rental gateways, minimal containers, dropbear), for real.

``no_sftp_env`` is a real sshd whose config has no ``Subsystem sftp`` line: every file
primitive falls back to exec-channel transfers, and everything still works.
"""
import getpass
import io
import os
import posixpath
import secrets as token
import stat
import sys
import threading

import pytest
from helpers.spools import host_records, wait_for

from ddpgui.cli import main as cli
from ddpgui.cli.hosts import format_probe
from ddpgui.core.hosts import HostStore
from ddpgui.core.paths import config_dir
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.ssh.files import NO_SFTP_NOTE
from ddpgui.core.store import RunStore
from ddpgui.core.targets.base import ConnectionLost, TargetError
from ddpgui.core.targets.uploads import upload_dir
from ddpgui.core.targets.zipapp import build_runner

SMALL = {"workload": "linear", "nproc_per_node": 2, "batch_size": 8, "dataset_size": 256, "log_every": 1,
         "telemetry_interval_s": 0.5}


def _as_us(env, tmp_path, name="nosftp", **fields):
    """A profile on ``env.server`` logging in as us, with this Python (it has torch)."""
    values = dict(user=getpass.getuser(), python=sys.executable, run_root=str(tmp_path / f"{name} root ✓"))
    values.update(fields)
    return env.profile(name, **values)


@pytest.fixture
def target(no_sftp_env, tmp_path):
    with no_sftp_env.target(tmp_path, _as_us(no_sftp_env, tmp_path)) as t:
        yield t


def test_file_primitives_go_over_exec_channels(target, tmp_path):
    base = str(tmp_path / "files ✓")
    data = bytes(range(256)) * 4096 + b"\n\0 end"  # 1 MiB of every byte value
    target.makedirs(posixpath.join(base, "a", "b"), 0o700)
    for name, mode in (("secret", 0o600), ("public", 0o644), ("tool", 0o700)):
        path = posixpath.join(base, "a", "b", name)
        target.write_file(path, data, mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == mode, name
        assert open(path, "rb").read() == data
        assert target.read_file(path) == data
    assert target.connection.sftp_offered is False
    assert stat.S_IMODE(os.stat(posixpath.join(base, "a", "b")).st_mode) == 0o700
    target.write_file(posixpath.join(base, "a", "b", "secret"), b"replaced", 0o600)  # atomically over the old one
    assert target.read_file(posixpath.join(base, "a", "b", "secret")) == b"replaced"
    assert sorted(os.listdir(posixpath.join(base, "a", "b"))) == ["public", "secret", "tool"]  # no temp files left
    with pytest.raises(FileNotFoundError):
        target.read_file(posixpath.join(base, "missing"))
    with pytest.raises(FileNotFoundError):
        target.write_file(posixpath.join(base, "no dir", "x"), b"x")
    target.get(posixpath.join(base, "a", "b", "public"), str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == data


def test_probe_says_so_once(target):
    package = build_runner()
    assert target.deploy(package) > 0
    report = target.probe()
    assert report["notes"] == [NO_SFTP_NOTE]
    text = format_probe(report, "nosftp")
    assert text.count(NO_SFTP_NOTE) == 1 and f"Note: {NO_SFTP_NOTE}" in text
    assert target.deploy(package) == 0  # the hash check over exec finds it there
    assert target.probe()["notes"] == [NO_SFTP_NOTE]


def test_the_app_probe_summary_shows_the_note():
    from ddpgui.ui.widgets.hosts_panel import probe_summary

    summary = probe_summary({"cpu_count": 2, "torch": {"version": "2.3"}, "notes": [NO_SFTP_NOTE]})
    assert summary.splitlines() == ["CPU only, 2 cores", "torch 2.3", NO_SFTP_NOTE]


@pytest.fixture
def manager(no_sftp_env, ssh_env, tmp_path):
    """A RunManager: "nosftp" on the sshd without SFTP, "sftp" on the jump sshd (it has SFTP)."""
    hosts = no_sftp_env.store(tmp_path, _as_us(no_sftp_env, tmp_path),
                              _as_us(no_sftp_env, tmp_path, "sftp", port=ssh_env.jump.port,
                                     nccl_env={"GLOO_SOCKET_IFNAME": "lo"}))
    store = RunStore(tmp_path / "runs.sqlite3")
    manager = RunManager(store, hosts, lambda name: no_sftp_env.target(tmp_path, hosts.get(name), store=hosts))
    yield manager
    manager.close()
    store.close()


@pytest.mark.slow
def test_launch_and_follow_a_gloo_run_to_the_end(manager):
    record = manager.launch("nosftp", dict(SMALL, steps=25))
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, final.hint)
    assert [r["step"] for r in manager.store.records(record.id)] == list(range(1, 26))
    for spool in ("metrics.jsonl", "telemetry.jsonl", "events.jsonl"):
        assert manager.store.records(record.id, spool) == host_records(final.run_dirs[0], spool), spool
    assert manager.targets.target("nosftp").connection.sftp_offered is False


@pytest.mark.slow
def test_stop_a_run(manager):
    record = manager.launch("nosftp", dict(SMALL, steps=100000))
    assert wait_for(lambda: (manager.store.get_run(record.id).last_step or 0) >= 3, timeout=240)
    manager.stop(record.id)
    final = manager.wait(record.id, timeout=120)
    assert final.state == "stopped", final.message


@pytest.mark.slow
def test_two_nodes_one_without_sftp(manager):
    record = manager.launch_nodes(["nosftp", "sftp"], dict(SMALL, steps=20))
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, final.hint)
    assert [r["step"] for r in manager.store.records(record.id)] == list(range(1, 21))
    assert manager.targets.target("nosftp").connection.sftp_offered is False
    assert manager.targets.target("sftp").connection.sftp_offered is True


@pytest.mark.slow
def test_script_mode_run_uploads_over_exec_channels(manager, tmp_path):
    project = tmp_path / "my script ✓"
    project.mkdir()
    logs = tmp_path / "scratch on the host"  # an absolute path the script is given, outside its folder
    (project / "train.py").write_text(
        "import csv, os, sys\n"
        "from tqdm import tqdm\n"
        "for i in range(1, 6):\n"
        "    print(f'step {i}: loss {1 / i:.4f}', flush=True)\n"
        "bar = tqdm(range(3), desc='eval', file=sys.stderr, mininterval=0)\n"
        "for i in bar:\n"
        "    bar.set_postfix(acc=0.5 + i / 10)\n"
        "os.makedirs(sys.argv[1], exist_ok=True)\n"
        "with open(os.path.join(sys.argv[1], 'metrics.csv'), 'w', newline='') as fh:\n"
        "    csv.writer(fh).writerows([['step', 'grad_norm'], [2, 0.25], [4, 0.125]])\n")
    record = manager.launch("nosftp", {"mode": "script", "script": {"dir": str(project), "entry": "train.py",
                                                                    "args": [str(logs)]}, "nproc_per_node": 1})
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, final.hint)
    records = manager.store.records(record.id)
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4, 5]
    # the host read rank 0's stderr (a tqdm bar) and the CSV log at the absolute path it was given
    assert [r["acc"] for r in records if "acc" in r] == [0.5, 0.6, 0.7]
    assert [(r["step"], r["grad_norm"], r["src"]) for r in records if "grad_norm" in r] == [(2, 0.25, "csv"),
                                                                                          (4, 0.125, "csv")]


def test_script_dir_upload_only_what_changed(target, tmp_path):
    local = tmp_path / "project"
    (local / "pkg").mkdir(parents=True)
    (local / "train.py").write_text("print('hi')\n")
    (local / "pkg" / "model.py").write_text("X = 1\n")
    (local / "private.cfg").write_text("token = 1\n")
    (local / "private.cfg").chmod(0o600)
    first = upload_dir(target, local)
    assert sorted(first.uploaded) == ["pkg/model.py", "private.cfg", "train.py"]
    assert target.read_file(posixpath.join(first.remote_dir, "pkg", "model.py")) == b"X = 1\n"
    assert stat.S_IMODE(os.stat(posixpath.join(first.remote_dir, "private.cfg")).st_mode) == 0o600
    (local / "pkg" / "model.py").write_text("X = 2\n")
    (local / "train.py").unlink()
    second = upload_dir(target, local)
    assert second.uploaded == ["pkg/model.py"] and second.unchanged == 1 and second.removed == ["train.py"]
    assert target.read_file(posixpath.join(first.remote_dir, "pkg", "model.py")) == b"X = 2\n"
    assert upload_dir(target, local).uploaded == []


def test_missing_python_says_what_to_do(no_sftp_env, tmp_path):
    profile = _as_us(no_sftp_env, tmp_path, python="/nonexistent/bin/python3")
    with no_sftp_env.target(tmp_path, profile) as target:
        with pytest.raises(TargetError) as caught:
            target.write_file(str(tmp_path / "x"), b"data")
    message = str(caught.value)
    assert not isinstance(caught.value, ConnectionLost)
    assert "offers no SFTP" in message and "Python '/nonexistent/bin/python3' was not found" in message
    assert "set the host profile's python" in message and "Subsystem sftp" in message
    assert caught.value.field == "python"


def _drop_mid_write(server, target, directory) -> BaseException | None:
    """Write 256 MiB in a thread and kill the connection's sshd once its temp file on the host grows."""
    os.makedirs(directory, exist_ok=True)
    caught: list[BaseException] = []

    def write():
        try:
            target.write_file(os.path.join(directory, "big"), os.urandom(256 * 2**20))
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            caught.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    assert wait_for(lambda: any(name.startswith(".tmp-") and os.path.getsize(os.path.join(directory, name)) > 0
                                for name in os.listdir(directory)), timeout=120, interval=0.005)
    assert server.drop_connections() > 0
    writer.join(120)
    return caught[0] if caught else None


@pytest.mark.parametrize("sftp", [True, False], ids=["over SFTP", "over exec channels"])
def test_a_dropped_link_is_still_a_dropped_link(ssh_env, no_sftp_env, tmp_path, sftp):
    """Killing the connection's sshd mid-transfer is reported as a drop, never as "no SFTP"."""
    env = ssh_env if sftp else no_sftp_env
    with env.target(tmp_path, _as_us(env, tmp_path, "drop")) as target:
        target.write_file(str(tmp_path / "small"), b"one")  # connected; SFTP asked about
        offered = target.connection.sftp_offered
        assert offered is sftp
        error = _drop_mid_write(env.server, target, str(tmp_path / "d"))
        assert isinstance(error, ConnectionLost), error
        assert "dropped" in str(error) and "SFTP" not in str(error)
        assert target.connection.sftp_offered is offered
        target.write_file(str(tmp_path / "small"), b"two")  # reopened on the next command
        assert target.read_file(str(tmp_path / "small")) == b"two" and target.connection.sftp_offered is offered


def test_a_drop_just_before_sftp_opens_is_a_drop(ssh_env, tmp_path):
    """The subsystem request on a link that just died (the transport may not know yet) is not "no SFTP"."""
    with ssh_env.target(tmp_path, _as_us(ssh_env, tmp_path, "drop")) as target:
        transport = target.connection.transport()
        assert ssh_env.server.drop_connections() > 0
        with pytest.raises(ConnectionLost) as caught:
            target.connection._open_sftp(transport)
        assert "dropped" in str(caught.value) and target.connection.sftp_offered is None
        target.write_file(str(tmp_path / "f"), b"x")
        assert target.connection.sftp_offered is True


@pytest.fixture
def cli_name(no_sftp_env, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    (config_dir() / "known_hosts").unlink(missing_ok=True)
    name = "nosftp-" + token.token_hex(3)
    assert cli(["hosts", "add", name, "--host", "127.0.0.1", "--port", str(no_sftp_env.server.port),
                "--user", getpass.getuser(), "--auth", "key", "--key-file", str(no_sftp_env.key_plain),
                "--python", sys.executable, "--run-root", str(tmp_path / "cli root")]) == 0
    yield name
    if name in HostStore():
        cli(["hosts", "remove", name])


def test_hosts_test_and_probe_commands_say_so(cli_name, capsys):
    assert cli(["hosts", "test", cli_name, "--accept-new-host-key"]) == 0
    out = capsys.readouterr().out
    assert f"file transfers: {NO_SFTP_NOTE}" in out and "torch: " in out
    rc = cli(["probe", cli_name])
    captured = capsys.readouterr()
    assert rc in (0, 1) and f"Note: {NO_SFTP_NOTE}" in captured.out
    assert "dropped" not in captured.out + captured.err


def test_many_files_go_in_one_exec_channel(target, tmp_path):
    local = tmp_path / "many"
    for i in range(60):
        path = local / f"pkg{i % 6}" / "sub dir ✓" / f"m{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"X = {i}\n")
    (local / "pkg0" / "run.sh").write_text("#!/bin/sh\n")
    (local / "pkg0" / "run.sh").chmod(0o755)
    commands = []
    run = target.connection.run
    target.connection.run = lambda argv, **kw: (commands.append(argv), run(argv, **kw))[1]
    progress = []
    result = upload_dir(target, local, progress=lambda *p: progress.append(p))
    assert len(result.uploaded) == 61 and progress[-1][2:] == (61, 61)
    # make the directory, read the manifest, all 61 files, write the manifest
    assert len(commands) == 4, [c[:2] for c in commands]
    remote = result.remote_dir
    for i in (0, 37, 59):
        assert target.read_file(posixpath.join(remote, f"pkg{i % 6}", "sub dir ✓", f"m{i}.py")) == f"X = {i}\n".encode()
    assert stat.S_IMODE(os.stat(posixpath.join(remote, "pkg0", "run.sh")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(posixpath.join(remote, "pkg3", "sub dir ✓")).st_mode) & 0o077 == 0
