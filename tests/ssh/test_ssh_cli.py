"""``ddpgui hosts ...`` and ``ddpgui probe`` against the real sshd, through argparse as the CLI wires them."""
import io
import json
import secrets as token

import pytest
from helpers.secrets_planted import KEYRING_PASSWORD

from ddpgui.cli import main
from ddpgui.core.hosts import HostStore, secrets
from ddpgui.core.paths import config_dir
from ddpgui.core.targets.factory import open_target
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.ssh import SSHTarget


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def cli(*argv: str) -> int:
    return main(list(argv))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private HOME, so the real ~/.ssh/known_hosts is neither read nor needed."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return tmp_path


@pytest.fixture
def name(ssh_env, home):
    """A fresh profile (in the app's real hosts file) for the test account, removed afterwards.

    The app's known_hosts starts empty, so the server's key is unknown to each test.
    """
    (config_dir() / "known_hosts").unlink(missing_ok=True)
    name = "cli-" + token.token_hex(3)
    assert cli("hosts", "add", name, "--host", "127.0.0.1", "--port", str(ssh_env.server.port),
               "--user", ssh_env.account.user, "--auth", "key", "--key-file", str(ssh_env.key_plain),
               "--python", ssh_env.account.python, "--run-root", ssh_env.run_root("cli runs")) == 0
    yield name
    if name in HostStore():
        cli("hosts", "remove", name)


def test_add_list_and_json(name, capsys):
    capsys.readouterr()
    assert cli("hosts", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("local ") and "this computer" in lines[0]
    assert any(line.startswith(name) and "key (" in line for line in lines)
    assert cli("hosts", "list", "--json") == 0
    profiles = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert profiles[name]["run_root"].endswith("cli runs") and profiles[name]["auth"] == "key"


def test_unknown_host_key_without_a_terminal_is_refused(name, capsys):
    assert cli("hosts", "test", name) == 1
    err = capsys.readouterr().err
    assert "can't be established" in err and "SHA256:" in err
    assert "no terminal to confirm it" in err and "--accept-new-host-key" in err


def test_unknown_host_key_prompt_on_a_terminal(name, ssh_env, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", _Terminal(""))
    answers = iter(["n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: (print(prompt), next(answers))[1])
    assert cli("hosts", "test", name) == 1
    assert "was not accepted" in capsys.readouterr().err
    cli("hosts", "test", name)
    out = capsys.readouterr().out
    assert "Accept this key? [y/N]" in out and "connected:" in out
    saved = (config_dir() / "known_hosts").read_text().splitlines()
    assert len(saved) == 1 and saved[0].startswith(f"[127.0.0.1]:{ssh_env.server.port} ")


def test_hosts_test_reports_python_without_torch(name, ssh_env, capsys):
    rc = cli("hosts", "test", name, "--accept-new-host-key")
    out = capsys.readouterr().out
    assert f"connected: {name} (login: key file {ssh_env.key_plain})" in out
    assert "python: " in out
    if "torch: not installed" in out:
        assert rc == 1 and "problem: PyTorch is not installed" in out and "pip install torch" in out
    else:
        assert rc == 0


def test_hosts_test_reports_missing_python(name, capsys):
    assert cli("hosts", "edit", name, "--python", "/nonexistent/bin/python3") == 0
    assert cli("hosts", "test", name, "--accept-new-host-key") == 1
    err = capsys.readouterr().err
    assert "Python '/nonexistent/bin/python3' was not found" in err and "hint:" in err


def test_password_goes_to_the_keyring_and_moves_and_goes(home, capsys, monkeypatch):
    name = "cli-pw-" + token.token_hex(3)
    monkeypatch.setattr("sys.stdin", io.StringIO(KEYRING_PASSWORD + "\n"))
    assert cli("hosts", "add", name, "--host", "gpu.example", "--auth", "password", "--secret-stdin") == 0
    assert secrets.get_secret(name, "password") == KEYRING_PASSWORD
    assert KEYRING_PASSWORD not in (config_dir() / "hosts.json").read_text()
    assert cli("hosts", "edit", name, "--rename", name + "-b", "--port", "2222") == 0
    assert secrets.get_secret(name, "password") is None
    assert secrets.get_secret(name + "-b", "password") == KEYRING_PASSWORD
    assert HostStore().get(name + "-b").port == 2222
    assert cli("hosts", "remove", name + "-b") == 0
    assert secrets.get_secret(name + "-b", "password") is None
    assert cli("hosts", "remove", "local") == 2
    assert "cannot be removed" in capsys.readouterr().err


def test_import_ssh_config_command(home, capsys):
    config = home / "ssh_config"
    alias = "imp-" + token.token_hex(3)
    config.write_text(f"Host {alias}\n  HostName 10.1.2.3\n  User me\n  Port 2200\nHost *\n  User nobody\n")
    assert cli("hosts", "import-ssh-config", str(config)) == 0
    out = capsys.readouterr().out
    assert f"added {alias}" in out and "skipped *: Host * is the default block" in out
    profile = HostStore().get(alias)
    assert (profile.hostname, profile.user, profile.port, profile.auth) == ("10.1.2.3", "me", 2200, "agent")
    cli("hosts", "remove", alias)


def test_open_target_gives_local_or_ssh(name, ssh_env):
    store = HostStore()
    assert isinstance(open_target("local", store), LocalTarget)
    with open_target(name, store, confirm_host_key=lambda info: True) as target:
        assert isinstance(target, SSHTarget)
        expected = (f"{ssh_env.account.home}/cli runs" if ssh_env.account.sacrificial
                    else str(ssh_env.root / "cli runs"))
        assert target.run_root() == expected


def test_probe_prints_json_and_a_summary(name, capsys):
    rc = cli("probe", name, "--accept-new-host-key", "--json")
    report = json.loads(capsys.readouterr().out)
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    assert report["schema"] == 1 and rc == (1 if errors else 0)
    assert cli("probe", name) == rc
    out = capsys.readouterr().out
    assert f"Python: {report['python']['version']} ({report['python']['executable']})" in out
    assert "GPUs: none" in out and "Driver: " in out and f"Problems: {len(report['problems']) or 'none'}" in out
    assert all(p["message"] in out and p["hint"] in out for p in report["problems"])
