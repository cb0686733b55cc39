"""The hosts file and known_hosts under concurrent CLI processes, and secrets with no usable keyring."""
import io
import json
import os
import subprocess
import sys

import keyring
import paramiko
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked

from ddpgui.cli import main as cli_main


def _env(tmp_path, **extra):
    env = dict(os.environ, DDPGUI_CONFIG_DIR=str(tmp_path / "config"), DDPGUI_DATA_DIR=str(tmp_path / "data"),
               **extra)
    env.pop("PYTHON_KEYRING_BACKEND", None)
    env.update(extra)
    return env


def _ddpgui(*argv):
    return [sys.executable, "-m", "ddpgui", *argv]


def test_ten_parallel_hosts_add_keep_every_profile(tmp_path):
    env = _env(tmp_path)
    procs = [subprocess.Popen(_ddpgui("hosts", "add", f"box{i}", "--host", f"10.0.0.{i + 1}"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(10)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert all(rc == 0 for rc, _, _ in results), results
    data = json.loads((tmp_path / "config" / "hosts.json").read_text())
    assert sorted(h["name"] for h in data["hosts"]) == sorted(["local"] + [f"box{i}" for i in range(10)])


def test_parallel_edits_and_removes_lose_nothing(tmp_path):
    env = _env(tmp_path)
    for i in range(6):
        subprocess.run(_ddpgui("hosts", "add", f"box{i}", "--host", "10.0.0.1"), env=env, check=True,
                       capture_output=True)
    argv = [("hosts", "edit", f"box{i}", "--notes", f"note {i}") for i in range(3)] + \
           [("hosts", "remove", f"box{i}") for i in range(3, 6)] + \
           [("hosts", "add", f"new{i}", "--host", "10.0.0.2") for i in range(3)]
    procs = [subprocess.Popen(_ddpgui(*a), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for a in argv]
    assert [p.wait(timeout=120) for p in procs] == [0] * len(argv)
    hosts = {h["name"]: h for h in json.loads((tmp_path / "config" / "hosts.json").read_text())["hosts"]}
    assert sorted(hosts) == ["box0", "box1", "box2", "local", "new0", "new1", "new2"]
    assert [hosts[f"box{i}"]["notes"] for i in range(3)] == ["note 0", "note 1", "note 2"]


_ADD_KEY = """
import sys, paramiko
from pathlib import Path
from ddpgui.core.ssh.known_hosts import KnownHosts
key = paramiko.Ed25519Key.from_private_key_file(sys.argv[2])
KnownHosts(shared_files=[], app_file=Path(sys.argv[1])).add(sys.argv[3], 22, key)
"""


def test_parallel_known_hosts_additions_keep_each_key_once(tmp_path):
    key_file = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file)], check=True)
    app_file = tmp_path / "known_hosts"
    app_file.write_text("# kept\n[old.example]:22 ssh-ed25519 AAAA")  # no final newline: the next line is its own
    names = [f"h{i % 5}.example" for i in range(10)]  # each host accepted by two processes at once
    procs = [subprocess.Popen([sys.executable, "-c", _ADD_KEY, str(app_file), str(key_file), name])
             for name in names]
    assert [p.wait(timeout=120) for p in procs] == [0] * 10
    lines = app_file.read_text().splitlines()
    blob = paramiko.Ed25519Key.from_private_key_file(str(key_file)).get_base64()
    assert lines[:2] == ["# kept", "[old.example]:22 ssh-ed25519 AAAA"]
    assert sorted(lines[2:]) == [f"h{i}.example ssh-ed25519 {blob}" for i in range(5)]
    assert oct(app_file.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("backend", ["keyring.backends.null.Keyring", "keyring.backends.fail.Keyring"])
def test_secret_stdin_without_a_keyring_is_refused_and_nothing_claimed(tmp_path, backend):
    env = _env(tmp_path, PYTHON_KEYRING_BACKEND=backend)
    done = subprocess.run(_ddpgui("hosts", "add", "box", "--host", "10.0.0.1", "--auth", "password",
                                  "--secret-stdin"), env=env, input="hunter2\n", capture_output=True, text=True)
    assert done.returncode == 1
    assert "stored in the keyring" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "no keyring is available" in done.stderr and backend.rsplit(".", 1)[0] in done.stderr
    assert "hint: install and unlock a keyring" in done.stderr and "leave out --secret-stdin" in done.stderr
    assert not (tmp_path / "config" / "hosts.json").exists()  # refused before anything was added
    # Without --secret-stdin (no terminal here) the profile is added; the password is asked for when connecting.
    done = subprocess.run(_ddpgui("hosts", "add", "box", "--host", "10.0.0.1", "--auth", "password"), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "stored in the keyring" not in done.stdout
    assert "will be asked for each time" in done.stdout
    # An edit that would store a secret is refused the same way, and the profile is unchanged.
    done = subprocess.run(_ddpgui("hosts", "edit", "box", "--notes", "x", "--set-secret", "--secret-stdin"),
                          env=env, input="hunter2\n", capture_output=True, text=True)
    assert done.returncode == 1 and "no keyring is available" in done.stderr
    assert json.loads((tmp_path / "config" / "hosts.json").read_text())["hosts"][1]["notes"] == ""


class _LockedKeyring(KeyringBackend):
    priority = 1

    def get_password(self, service, username, *password):
        raise KeyringLocked("Failed to unlock the collection!")

    set_password = delete_password = get_password


def test_a_locked_keyring_says_the_profile_is_saved_and_how_to_store_the_secret_later(tmp_path, monkeypatch,
                                                                                      capsys):
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("hunter2\n"))
    keyring.set_keyring(_LockedKeyring())
    assert cli_main(["hosts", "add", "box", "--host", "10.0.0.1", "--auth", "password", "--secret-stdin"]) == 1
    out, err = capsys.readouterr()
    assert "added box" in out and "stored in the keyring" not in out
    assert err.splitlines() == ["ddpgui: box is saved, but its password was not stored: the keyring is locked "
                                f"({_LockedKeyring.__module__})",
                                "hint: unlock your keyring and try again; then: ddpgui hosts edit box --set-secret"]
