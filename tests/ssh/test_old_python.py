"""A host profile whose Python is too old for the runner (2.7, 3.6), or whose torch is: every entry point says so.

Real old interpreters (pyenv's 2.7.18 and 3.6.15 on this machine; skipped with the reason where absent) behind the
loopback sshd, through the CLI as users run it: ``probe``, ``launch`` and ``hosts test``.
"""
import getpass
import io
import json
import os
import secrets as token
import subprocess
import sys
from pathlib import Path

import pytest

from ddpgui.cli import main as cli
from ddpgui.core.hosts import HostStore
from ddpgui.core.paths import config_dir
from ddpgui.core.targets.zipapp import build_runner

PYENV = Path("/root/.pyenv/versions")
OLD = {"2.7": PYENV / "2.7.18/bin/python", "3.6": PYENV / "3.6.15/bin/python"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=list(OLD))
def old_python(request) -> tuple[str, str]:
    version, path = request.param, OLD[request.param]
    if not os.access(path, os.X_OK):
        pytest.skip(f"SKIPPED LOUDLY: no Python {version} at {path} on this machine (pyenv install {path.parts[-3]} "
                    "makes one)")
    return version, str(path)


@pytest.fixture
def add_host(ssh_env, tmp_path, monkeypatch):
    """``add_host(python)``: a profile on the loopback sshd, logging in as us, with that Python; removed after."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    (config_dir() / "known_hosts").unlink(missing_ok=True)
    names = []

    def add(python: str) -> str:
        name = "old-" + token.token_hex(3)
        assert cli(["hosts", "add", name, "--host", "127.0.0.1", "--port", str(ssh_env.server.port),
                    "--user", getpass.getuser(), "--auth", "key", "--key-file", str(ssh_env.key_plain),
                    "--python", python, "--run-root", str(tmp_path / "runs ✓")]) == 0
        names.append(name)
        return name

    yield add
    for name in names:
        HostStore().remove(name)


def _says_too_old(text: str, version: str) -> None:
    assert f"Python {version} is too old (the runner needs 3.9 or newer)" in text, text
    assert "host profile's Python" in text, text
    assert "Traceback" not in text and "disk" not in text and "IOError" not in text, text


def test_probe_launch_and_hosts_test_say_the_python_is_too_old(old_python, add_host, capsys):
    version, python = old_python
    name = add_host(python)
    capsys.readouterr()
    assert cli(["probe", name, "--accept-new-host-key"]) == 1
    _says_too_old(capsys.readouterr().err, version)
    assert cli(["launch", name, "--workload", "linear", "--steps", "1", "--accept-new-host-key"]) == 1
    _says_too_old(capsys.readouterr().err, version)
    assert cli(["hosts", "test", name, "--accept-new-host-key"]) == 1
    out = capsys.readouterr().out
    assert f"problem: Python {version} is too old (the runner needs 3.9 or newer)" in out
    _says_too_old(out, version)


def test_the_runner_refuses_an_old_python_in_its_own_json(old_python):
    version, python = old_python
    package = build_runner()
    for argv, cwd in (([python, str(package.path), "probe"], None),
                      ([python, "-m", "remote_runner", "launch", "/nonexistent/run", "--new"], REPO)):
        done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        reply = json.loads(done.stdout)
        assert done.returncode == 2 and reply["ok"] is False and reply["field"] == "python", done
        assert reply["error"] == f"Python {version} is too old (the runner needs 3.9 or newer)"
        assert reply["failure"] == "python_too_old" and python in reply["hint"]


def test_hosts_test_flags_a_torch_that_launch_refuses(add_host, tmp_path, capsys):
    """A venv whose installed torch distribution is 2.0.0 (a stub package: only its version is read)."""
    venv = tmp_path / "venv old torch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = list(venv.glob("lib/python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text('__version__ = "2.0.0"\n')
    (site / "torch-2.0.0.dist-info").mkdir()
    (site / "torch-2.0.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.0.0\n")
    name = add_host(str(venv / "bin" / "python"))
    capsys.readouterr()
    assert cli(["hosts", "test", name, "--accept-new-host-key"]) == 1
    out = capsys.readouterr().out
    assert "torch: 2.0.0" in out
    assert "problem: PyTorch 2.0.0 is too old (the runner needs 2.1 or newer): launch refuses it" in out
    assert "pip install -U torch" in out
    assert cli(["launch", name, "--workload", "linear", "--steps", "1", "--accept-new-host-key"]) == 1
    assert "PyTorch 2.0.0 is too old (the runner needs 2.1 or newer)" in capsys.readouterr().err
