"""The user's script directory uploaded over SSH: skips (the ignore rules among them), progress, and only what changed
the next time; the CLI says what it skipped; a run with a node on This computer works in the folder there."""
import getpass
import json
import posixpath
import secrets
import sys

import pytest

from ddpgui.cli import main as cli_main
from ddpgui.core.hosts import HostStore
from ddpgui.core.paths import config_dir
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.fingerprint import fingerprint
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.uploads import MANIFEST, upload_dir


def test_script_dir_upload_over_ssh(ssh_env, tmp_path):
    local = tmp_path / "my project ✓"
    (local / "pkg").mkdir(parents=True)
    (local / "train.py").write_text("print('hi')\n")
    (local / "pkg" / "model.py").write_text("X = 1\n")
    (local / ".git").mkdir()
    (local / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (local / "big.bin").write_bytes(b"\0" * 4096)
    progress = []
    with ssh_env.target(tmp_path) as target:
        first = upload_dir(target, local, size_cap=1024, progress=lambda *p: progress.append(p))
        assert first.remote_dir.startswith(target.run_root() + "/scripts/my project ✓-")
        assert sorted(first.uploaded) == ["pkg/model.py", "train.py"]
        assert dict(first.skipped) == {".git/": "version control", "big.bin": "0.0 MiB is over the 0.000976562 MiB cap"}
        assert progress[0] == (0, 18, 0, 2) and progress[-1] == (18, 18, 2, 2)
        assert target.read_file(posixpath.join(first.remote_dir, "pkg", "model.py")) == b"X = 1\n"
        assert target.exec(["test", "-e", posixpath.join(first.remote_dir, ".git")]).rc == 1

        (local / "pkg" / "model.py").write_text("X = 2\n")
        second = upload_dir(target, local, size_cap=1024)
        assert second.uploaded == ["pkg/model.py"] and second.unchanged == 1 and second.uploaded_bytes == 6
        assert target.read_file(posixpath.join(second.remote_dir, "pkg", "model.py")) == b"X = 2\n"
        third = upload_dir(target, local, size_cap=1024)
        assert third.uploaded == [] and third.uploaded_bytes == 0
        assert MANIFEST in target.exec(["ls", "-A", first.remote_dir]).stdout.decode()


def test_links_out_of_the_folder_and_permissions_over_ssh(ssh_env, tmp_path):
    import os
    import stat

    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash:19000::::::\n")
    secret.chmod(0o600)
    local = tmp_path / "project"
    local.mkdir()
    (local / "train.py").write_text("print('hi')\n")
    (local / "private.cfg").write_text("token = 1\n")
    (local / "private.cfg").chmod(0o600)
    (local / "shadow").symlink_to(secret)
    (local / "inside.py").symlink_to("train.py")
    with ssh_env.target(tmp_path) as target:
        result = upload_dir(target, local)
        assert sorted(result.uploaded) == ["inside.py", "private.cfg", "train.py"]
        assert dict(result.skipped) == {"shadow": f"a symbolic link to {secret}, outside the folder"}
        assert target.exec(["test", "-e", posixpath.join(result.remote_dir, "shadow")]).rc == 1
        modes = target.exec(["stat", "-c", "%n %a", *(posixpath.join(result.remote_dir, n) for n in
                                                       ("private.cfg", "train.py"))]).stdout.decode().splitlines()
        assert [m.rsplit(" ", 1)[1] for m in modes] == ["600", oct(stat.S_IMODE(os.stat(local / "train.py").st_mode))[2:]]
        assert target.read_file(posixpath.join(result.remote_dir, "inside.py")) == b"print('hi')\n"


def _project_with_ignore_rules(root):
    """A folder whose .gitignore (with a negation), nested .gitignore and .ddpguiignore leave out some files."""
    files = {"train.py": "print('step 1: loss 0.5')\n", "model.ckpt": "weights", "best.ckpt": "best weights",
             "data/shard0.bin": "data", "secrets.env": "TOKEN=1\n", "sub/util.py": "X = 1\n", "sub/run.log": "log",
             "sub/last.ckpt": "nested weights",
             ".gitignore": "*.ckpt\n!best.ckpt\ndata/\n", "sub/.gitignore": "*.log\n!*.ckpt\n",
             ".ddpguiignore": "# not for the host\nsecrets.env\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_an_upload_over_ssh_honours_the_gitignore_files_and_the_ddpguiignore(ssh_env, tmp_path):
    local = _project_with_ignore_rules(tmp_path / "project")
    with ssh_env.target(tmp_path) as target:
        result = upload_dir(target, local)
        assert sorted(result.uploaded) == [".ddpguiignore", ".gitignore", "best.ckpt", "sub/.gitignore",
                                           "sub/last.ckpt", "sub/util.py", "train.py"]
        assert dict(result.skipped) == {"model.ckpt": "ignored by .gitignore:1 `*.ckpt`",
                                        "data/": "ignored by .gitignore:3 `data/`",
                                        "secrets.env": "ignored by .ddpguiignore:2 `secrets.env`",
                                        "sub/run.log": "ignored by sub/.gitignore:1 `*.log`"}
        there = target.exec(["find", result.remote_dir, "-type", "f"]).stdout.decode().split("\n")
        assert sorted(posixpath.relpath(p, result.remote_dir) for p in there if p) == sorted(
            result.uploaded + [MANIFEST])
        (local / ".ddpguiignore").write_text("secrets.env\nsub/\n")  # a rule added: its files leave the host too
        again = upload_dir(target, local)
        assert again.removed == ["sub/.gitignore", "sub/last.ckpt", "sub/util.py"]
        assert ("sub/", "ignored by .ddpguiignore:2 `sub/`") in again.skipped
        assert target.exec(["test", "-e", posixpath.join(result.remote_dir, "sub", "util.py")]).rc == 1


@pytest.fixture
def app_profile(ssh_env, tmp_path, monkeypatch):
    """A profile on the loopback sshd in the app's own hosts file, as the CLI reads it; removed afterwards."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the real ~/.ssh/known_hosts is neither read nor needed
    (config_dir() / "known_hosts").unlink(missing_ok=True)
    name = f"up-{secrets.token_hex(3)}"
    assert cli_main(["hosts", "add", name, "--host", "127.0.0.1", "--port", str(ssh_env.server.port), "--user",
                     getpass.getuser(), "--auth", "key", "--key-file", str(ssh_env.key_plain), "--python",
                     sys.executable, "--run-root", str(tmp_path / "root")]) == 0
    yield name
    HostStore().remove(name)


@pytest.mark.slow
def test_the_cli_says_what_a_script_upload_skipped_and_why(app_profile, tmp_path, capsys):
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash\n")
    secret.chmod(0o600)
    project = _project_with_ignore_rules(tmp_path / "proj")
    (project / "shadow").symlink_to(secret)
    expected = fingerprint(project)
    capsys.readouterr()
    assert cli_main(["launch", app_profile, "--script", str(project), "--nproc", "1", "--follow",
                     "--accept-new-host-key"]) == 0
    err = capsys.readouterr().err
    for rel, why in (("shadow", f"a symbolic link to {secret}, outside the folder"),
                     ("model.ckpt", "ignored by .gitignore:1 `*.ckpt`"),
                     ("secrets.env", "ignored by .ddpguiignore:2 `secrets.env`")):
        assert f"not uploaded from {project}: {rel} ({why})" in err, err
    (record,) = [r for r in RunStore().list_runs(host=app_profile)]
    assert record.state == "finished", (record.message, record.hint)
    fp = record.config["script"]["fingerprint"]
    assert fp == expected and fp["git_commit"] is None  # not a git repository: the content hash
    assert cli_main(["show", record.id]) == 0
    assert f"\n  code        content sha256 {fp['content_sha256'][:12]}…\n" in capsys.readouterr().out
    # the stored dir is the upload on the host; a rerun takes the script again from the folder here
    assert record.config["script"]["source"] == str(project) and record.config["script"]["dir"] != str(project)
    assert cli_main(["rerun", record.id, "--follow"]) == 0
    (again,) = [r for r in RunStore().list_runs(host=app_profile) if r.id != record.id]
    assert again.state == "finished" and again.config["script"]["source"] == str(project), again.message


@pytest.mark.slow
def test_a_run_on_this_computer_and_an_ssh_host_works_in_the_folder_here_and_in_its_upload_there(ssh_env, tmp_path):
    project = _project_with_ignore_rules(tmp_path / "proj")
    (project / "train.py").write_text(
        "import os\n"
        "os.makedirs('out', exist_ok=True)\n"
        "with open('out/node%s.txt' % os.environ['GROUP_RANK'], 'w') as fh:\n"
        "    fh.write(os.getcwd() + ' data:%s' % os.path.isdir('data'))\n"
        "print('step 1: loss 0.5', flush=True)\n")
    remote = ssh_env.profile("n1", user=getpass.getuser(), python=sys.executable, run_root=str(tmp_path / "n1"),
                             nccl_env={"GLOO_SOCKET_IFNAME": "lo"})
    hosts = ssh_env.store(tmp_path, remote)
    expected = fingerprint(project)  # of the code as launched (the run writes out/ into the folder)
    store = RunStore(tmp_path / "runs.sqlite3")
    manager = RunManager(store, hosts, lambda name: LocalTarget(run_root=str(tmp_path / "here")) if name == "local"
                         else ssh_env.target(tmp_path, hosts.get(name), store=hosts))
    try:
        record = manager.launch_nodes(["local", "n1"], {"mode": "script", "nproc_per_node": 1,
                                                        "script": {"dir": str(project), "entry": "train.py"}})
        final = manager.wait(record.id, timeout=300)
        assert final.state == "finished", (final.message, store.log_tail(record.id, "stderr.log", 1)[-2000:])
        configs = [json.loads(open(posixpath.join(final.run_dirs[n], "config.json")).read()) for n in (0, 1)]
    finally:
        manager.close()
        store.close()
    assert configs[0]["script"]["dir"] == str(project)  # node 0 is This computer: the folder itself
    uploaded = configs[1]["script"]["dir"]
    assert uploaded.startswith(str(tmp_path / "n1" / "scripts") + "/")
    assert (project / "out" / "node0.txt").read_text() == f"{project} data:True"
    assert open(posixpath.join(uploaded, "out", "node1.txt")).read() == f"{uploaded} data:False"  # data/ ignored
    assert not (project / "out" / "node1.txt").exists()
    assert configs[0]["script"]["fingerprint"] == configs[1]["script"]["fingerprint"] == expected
    assert final.config["script"]["dir"] == str(project)
