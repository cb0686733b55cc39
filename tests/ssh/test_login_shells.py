"""Every remote command works whatever the user's login shell is and whatever its start-up files print.

Real throwaway users on the loopback sshd, one per login shell — bash (a banner in ~/.bashrc on stdout and
stderr), zsh (~/.zshenv), fish (config.fish), tcsh (~/.cshrc) and dash (sshd's ~/.ssh/rc, which runs whatever
the shell) — each run commands with awkward argv, deploy and probe the runner, list and launch runs, follow a
run's spools and move files over exec channels where the host has no SFTP.
"""
import io
import json
import os
import posixpath
import secrets as token
import shutil
import subprocess
import uuid

import pytest

from ddpgui.cli import main as cli
from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.protocol import Chunk, End
from ddpgui.core.targets.base import TargetError
from ddpgui.core.targets.zipapp import build_runner
from remote_runner.config import RunConfig

SYSTEM_PYTHON = "/usr/bin/python3"  # an interpreter every account can run (the tests' own lives under /root)

#: shell -> (start-up files written in the account's home, what they print on stdout, on stderr)
LOGINS = {
    "bash": ({".bashrc": 'echo "Welcome to the HPC cluster"\necho "Quota: 99% used" >&2\n',
              ".bash_profile": 'echo "bash_profile says hi"\n. ~/.bashrc\n'},
             "Welcome to the HPC cluster", "Quota: 99% used"),
    "zsh": ({".zshenv": 'echo "zsh: module system ready"\nprint -u2 "zsh: 3 updates available"\n'},
            "zsh: module system ready", "zsh: 3 updates available"),
    "fish": ({".config/fish/config.fish": 'echo "Welcome to fish, the friendly shell"\necho "fish: quota 99%" >&2\n'},
             "Welcome to fish, the friendly shell", "fish: quota 99%"),
    "tcsh": ({".cshrc": 'echo "tcsh: welcome back"\nsh -c "echo tcsh: disk nearly full >&2"\n'},
             "tcsh: welcome back", "tcsh: disk nearly full"),
    "dash": ({".ssh/rc": 'echo "ssh rc: last login from somewhere"\necho "ssh rc: mail waiting" >&2\n'},
             "ssh rc: last login from somewhere", "ssh rc: mail waiting"),
}
#: argv words each login shell would mangle if it parsed them: quotes, csh's history, newlines, fish's backslash
AWKWARD = ["it's", 'say "hi"', "!!", "!$", "a\nb", "back\\slash", "\\'", "$HOME", "`id`", "$(id)", "%s %%",
           "ü ✓", "", " ", "-c", "~", "*", "{a,b}", "\t"]


@pytest.fixture(scope="module")
def shell_accounts(make_account):
    """One throwaway account per login shell, with its chatty start-up files, made once for the module."""
    missing = [shell for shell in LOGINS if not shutil.which(shell)]
    if missing:
        pytest.skip(f"SKIPPED LOUDLY: the login shells {', '.join(missing)} are not installed: run .ci/system-deps "
                    "(as root) and run the tests again")
    accounts = {}
    for shell, (files, _, _) in LOGINS.items():
        account = accounts[shell] = make_account(shutil.which(shell), f"home-{shell}")
        for rel, text in files.items():
            path = account.home / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        subprocess.run(["chown", "-R", f"{account.user}:{account.user}", str(account.home)], check=True)
    return accounts


@pytest.fixture(params=list(LOGINS))
def shell(request):
    return request.param


def _target(env, accounts, shell, tmp_path):
    account = accounts[shell]
    profile = env.profile(f"{shell}-host", user=account.user, python=SYSTEM_PYTHON, run_root="~/ddpgui runs ✓")
    return env.target(tmp_path, profile)


def test_commands_get_their_argv_and_only_their_output(ssh_env, shell_accounts, shell, tmp_path):
    _, banner_out, banner_err = LOGINS[shell]
    with _target(ssh_env, shell_accounts, shell, tmp_path) as target:
        echo = "import json, sys\nsys.stdout.write(json.dumps(sys.argv[1:]))\nsys.stderr.write('to stderr')\n"
        result = target.exec([target.python, "-c", echo, *AWKWARD])
        assert (result.rc, json.loads(result.stdout), result.stderr) == (0, AWKWARD, b"to stderr")
        result = target.exec(["sh", "-c", 'printf "%s" "$0"; exit 3', "it's $HOME"])
        assert (result.rc, result.stdout, result.stderr) == (3, b"it's $HOME", b"")
        assert target.run_root() == f"{shell_accounts[shell].home}/ddpgui runs ✓"  # $HOME asked without a banner
        assert banner_out in target.connection.login_noise and banner_err in target.connection.login_noise
        missing = target.exec(["/nonexistent/python3", "-c", "pass"])
        assert missing.rc == 127 and b"not found" in missing.stderr and banner_err.encode() not in missing.stderr


def test_deploy_probe_launch_and_follow(ssh_env, shell_accounts, shell, tmp_path):
    _, banner_out, _ = LOGINS[shell]
    package = build_runner()
    with _target(ssh_env, shell_accounts, shell, tmp_path) as target:
        assert target.deploy(package) == package.size
        assert target.deploy(package) == 0  # the hash read back is the file's, not the banner's
        report = target.probe()
        assert report["python"]["executable"].startswith("/usr/bin/python3")
        notes = [n for n in report["notes"] if n.startswith("the host's login prints")]
        assert len(notes) == 1 and banner_out in notes[0]
        config = RunConfig(run_id="r-" + uuid.uuid4().hex[:8], name="it's a \"run\" !!", workload="linear",
                           nproc_per_node=1, device="cpu", backend="gloo", steps=1)
        with pytest.raises(TargetError, match="PyTorch is not installed for /usr/bin/python3"):
            target.launch(config)  # the runner's own refusal came through: this Python has no torch
        run_dir = target.run_dir("r-" + uuid.uuid4().hex[:8])  # a run as a torch host would have left it
        record = b'{"seq": 1, "t": 1.0, "step": 1, "loss": 0.5}\n'
        target.write_files([(posixpath.join(run_dir, "config.json"), config.to_json().encode(), 0o600),
                            (posixpath.join(run_dir, "metrics.jsonl"), record, 0o600)])
        [listed] = [r for r in target.list_runs()["runs"] if r["run_dir"] == run_dir]
        assert listed["config"]["name"] == config.name
        messages = list(target.follow(run_dir, once=True))
        assert [m.data for m in messages if isinstance(m, Chunk)] == [record]
        assert isinstance(messages[-1], End)


def test_files_over_exec_channels(no_sftp_env, shell_accounts, shell, tmp_path):
    _, banner_out, _ = LOGINS[shell]
    data = bytes(range(256)) * 64
    with _target(no_sftp_env, shell_accounts, shell, tmp_path) as target:
        base = posixpath.join(target.run_root(), f"files {token.token_hex(3)}")
        target.makedirs(posixpath.join(base, "a"), 0o700)
        target.write_files([(posixpath.join(base, "a", "one"), data, 0o600),
                            (posixpath.join(base, "b", "two"), b"two\n", 0o644)])
        target.write_file(posixpath.join(base, "a", "three"), b"three", 0o600)
        assert target.read_file(posixpath.join(base, "a", "one")) == data
        assert target.read_file(posixpath.join(base, "b", "two")) == b"two\n"
        assert target.read_file(posixpath.join(base, "a", "three")) == b"three"
        assert target.connection.sftp_offered is False
        package = build_runner()
        target.deploy(package)
        assert target.deploy(package) == 0
        assert banner_out in target.connection.login_noise


def test_hosts_test_shows_the_login_banner_once(ssh_env, shell_accounts, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    name = "banner-" + token.token_hex(3)
    assert cli(["hosts", "add", name, "--host", "127.0.0.1", "--port", str(ssh_env.server.port),
                "--user", shell_accounts["bash"].user, "--auth", "key", "--key-file", str(ssh_env.key_plain),
                "--python", SYSTEM_PYTHON, "--run-root", "~/cli runs"]) == 0
    try:
        capsys.readouterr()
        assert cli(["hosts", "test", name, "--accept-new-host-key"]) == 1  # this Python has no torch
        out = capsys.readouterr().out
        assert out.count("the host's login prints") == 1
        assert out.count("Welcome to the HPC cluster") == 1 and out.count("Quota: 99% used") == 1
        assert f"python: {os.path.realpath(SYSTEM_PYTHON)}" in out or f"python: {SYSTEM_PYTHON}" in out
        assert "problem: PyTorch is not installed" in out
    finally:
        HostStore().remove(name)
