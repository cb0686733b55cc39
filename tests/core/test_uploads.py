"""The script-directory upload through a Target (here "This computer"; tests/ssh does the same over SSH)."""
import json
import os
import posixpath
import shutil
from pathlib import Path

import pytest

from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.uploads import MANIFEST, default_remote_dir, scan, upload_dir, upload_script_dir


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "my project ✓"
    files = {
        "train.py": b"print('train')\n",
        "lib/model ünï.py": b"X = 1\n",
        "lib/data/loader.py": b"Y = 2\n",
        "run.sh": b"#!/bin/sh\necho hi\n",
        "weights.bin": b"\0" * 3000,
        ".git/HEAD": b"ref: refs/heads/main\n",
        "lib/__pycache__/model.cpython-311.pyc": b"\0",
        ".venv/pyvenv.cfg": b"home = /usr/bin\n",
        "venv/bin/python": b"",
        "env/pyvenv.cfg": b"home = /usr/bin\n",
        "myenv/conda-meta/history": b"",
        "environment/keep.txt": b"an ordinary dir named like an env\n",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "run.sh").chmod(0o755)
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "lib_link").symlink_to(root / "lib", target_is_directory=True)
    return root


@pytest.fixture
def target(tmp_path):
    return LocalTarget(run_root=str(tmp_path / "host root"))


def test_scan_skips_what_it_should_and_says_why(project):
    files, skipped = scan(project, size_cap=2048)
    assert [f.rel for f in files] == ["run.sh", "train.py", "environment/keep.txt", "lib/model ünï.py",
                                      "lib/data/loader.py"]
    assert dict(skipped) == {
        ".git/": "version control",
        ".venv/": "a virtualenv",
        "env/": "a virtualenv (has pyvenv.cfg)",
        "lib_link/": "a symbolic link to a directory (not followed)",
        "myenv/": "a conda environment (has conda-meta)",
        "venv/": "a virtualenv",
        "dangling": "a broken symbolic link",
        "weights.bin": "0.0 MiB is over the 0.00195312 MiB cap",
        "lib/__pycache__/": "Python cache",
    }
    assert next(f for f in files if f.rel == "run.sh").executable


def test_upload_then_only_changes_then_deletions(project, target):
    progress = []
    first = upload_dir(target, project, size_cap=2048, progress=lambda *p: progress.append(p))
    assert first.remote_dir == default_remote_dir(target, project)
    assert first.remote_dir.startswith(os.path.join(target.run_root(), "scripts", "my project ✓-"))
    assert first.files == 5 and len(first.uploaded) == 5 and first.unchanged == 0
    total = sum(len((project / rel).read_bytes()) for rel in first.uploaded)
    assert first.uploaded_bytes == total
    assert progress[0] == (0, total, 0, 5) and progress[-1] == (total, total, 5, 5)
    assert [p[2] for p in progress] == [0, 1, 2, 3, 4, 5]
    assert ("weights.bin", "0.0 MiB is over the 0.00195312 MiB cap") in first.skipped
    remote = first.remote_dir
    assert open(posixpath.join(remote, "lib", "model ünï.py"), "rb").read() == b"X = 1\n"
    assert os.stat(posixpath.join(remote, "run.sh")).st_mode & 0o777 == 0o755
    assert os.stat(posixpath.join(remote, "train.py")).st_mode & 0o777 == 0o644
    assert oct(os.stat(remote).st_mode & 0o777) == "0o700"
    assert not os.path.exists(posixpath.join(remote, ".git")) and not os.path.exists(posixpath.join(remote, "venv"))

    second = upload_dir(target, project, size_cap=2048)
    assert second.uploaded == [] and second.uploaded_bytes == 0 and second.unchanged == 5

    (project / "lib" / "model ünï.py").write_bytes(b"X = 2\n")
    (project / "train.py").unlink()
    (project / "new file.py").write_bytes(b"Z = 3\n")
    third = upload_dir(target, project, size_cap=2048)
    assert sorted(third.uploaded) == ["lib/model ünï.py", "new file.py"] and third.uploaded_bytes == 12
    assert third.removed == ["train.py"] and not os.path.exists(posixpath.join(remote, "train.py"))
    assert open(posixpath.join(remote, "lib", "model ünï.py"), "rb").read() == b"X = 2\n"


def test_a_raised_size_cap_uploads_the_big_file(project, target):
    upload_dir(target, project, size_cap=2048)
    again = upload_dir(target, project)
    assert again.uploaded == ["weights.bin"] and again.uploaded_bytes == 3000


def test_a_broken_manifest_means_upload_everything(project, target):
    first = upload_dir(target, project)
    with open(posixpath.join(first.remote_dir, MANIFEST), "w") as fh:
        fh.write("{garbage")
    assert len(upload_dir(target, project).uploaded) == first.files


def test_not_a_directory(tmp_path, target):
    with pytest.raises(NotADirectoryError):
        upload_dir(target, tmp_path / "missing")


def test_upload_script_dir_returns_the_remote_dir_and_logs_skips(project, target, caplog):
    remote = upload_script_dir(target, project, size_cap=2048)
    assert remote == default_remote_dir(target, project) and os.path.isfile(os.path.join(remote, "train.py"))
    assert "weights.bin (0.0 MiB is over the 0.00195312 MiB cap)" in caplog.text
    assert ".git/ (version control)" in caplog.text


@pytest.fixture
def secret_outside(tmp_path):
    """A private file outside the script folder (like /etc/shadow), readable only by its owner."""
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_bytes(b"root:$6$hash:19000::::::\n")
    secret.chmod(0o600)
    return secret


def test_links_that_leave_the_folder_are_skipped_and_say_where(project, target, secret_outside):
    (project / "shadow").symlink_to(secret_outside)
    (project / "lib" / "up").symlink_to("../../outside/shadow")  # relative, and through ..
    (project / "hop").symlink_to("lib/up")  # a link inside that leads to a link out
    (project / "train_link.py").symlink_to("train.py")  # inside: uploaded with its contents
    if os.path.exists("/etc/shadow"):
        (project / "etc_shadow").symlink_to("/etc/shadow")
    result = upload_dir(target, project)
    skipped = dict(result.skipped)
    for rel in ("shadow", "lib/up", "hop"):
        assert skipped[rel] == f"a symbolic link to {secret_outside}, outside the folder", rel
        assert not os.path.lexists(posixpath.join(result.remote_dir, rel)), rel
    if os.path.exists("/etc/shadow"):
        assert skipped["etc_shadow"] == "a symbolic link to /etc/shadow, outside the folder"
    assert "train_link.py" in result.uploaded
    assert open(posixpath.join(result.remote_dir, "train_link.py"), "rb").read() == b"print('train')\n"
    assert "dangling" in skipped and "lib_link/" in skipped
    for dirpath, _, names in os.walk(result.remote_dir):
        for name in names:
            assert b"$6$hash" not in open(os.path.join(dirpath, name), "rb").read(), name


def test_upload_script_dir_logs_the_link_it_skipped(project, target, secret_outside, caplog):
    (project / "shadow").symlink_to(secret_outside)
    upload_script_dir(target, project)
    assert f"shadow (a symbolic link to {secret_outside}, outside the folder)" in caplog.text


def test_permissions_are_never_widened(tmp_path, target):
    project = tmp_path / "perms"
    project.mkdir()
    modes = {"private.cfg": (0o600, 0o600), "group.txt": (0o640, 0o640), "tool.sh": (0o755, 0o755),
             "mine.sh": (0o700, 0o700), "everyone.txt": (0o666, 0o644), "readonly.txt": (0o400, 0o400)}
    for name, (local, _) in modes.items():
        (project / name).write_text(name)
        (project / name).chmod(local)
    result = upload_dir(target, project)
    assert sorted(result.uploaded) == sorted(modes)
    for name, (_, remote) in modes.items():
        assert oct(os.stat(posixpath.join(result.remote_dir, name)).st_mode & 0o7777) == oct(remote), name
    (project / "readonly.txt").chmod(0o600)
    (project / "readonly.txt").write_text("changed")
    again = upload_dir(target, project)  # a read-only file on the host is replaced (temp file + rename)
    assert again.uploaded == ["readonly.txt"]
    assert open(posixpath.join(result.remote_dir, "readonly.txt")).read() == "changed"


def test_fifos_sockets_and_devices_are_skipped_without_hanging(tmp_path, target):
    import socket

    project = tmp_path / "special"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    os.mkfifo(project / "pipe")  # opening it for reading would block forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(project / "sock"))
    (project / "pipe_link").symlink_to("pipe")
    expected = {"pipe": "a named pipe (FIFO), not a regular file", "pipe_link": "a named pipe (FIFO), not a regular file",
                "sock": "a socket, not a regular file"}
    try:
        os.mknod(project / "null", 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3))
        expected["null"] = "a device file, not a regular file"
    except PermissionError:
        print("no CAP_MKNOD here: the device-file case is not checked")
    try:
        result = upload_dir(target, project)
    finally:
        sock.close()
    assert result.uploaded == ["train.py"]
    assert dict(result.skipped) == expected


def _scan_as(uid: int | None, project: Path) -> tuple[list[str], list[list[str]]]:
    """``scan(project)`` in a forked child running as ``uid`` (None: as we are)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            files, skipped = scan(project)
            os.write(write_end, json.dumps([[f.rel for f in files], skipped]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    files, skipped = json.loads(data)
    return files, skipped


def test_a_file_that_cannot_be_read_is_named_with_what_to_do(tmp_path):
    """Scanned as an unprivileged user when we are root (root reads everything)."""
    import pwd
    import tempfile

    uid = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="ddpgui-unreadable-")) if uid is not None else tmp_path
    try:
        base.chmod(0o755)
        project = base / "proj"
        project.mkdir()
        (project / "ok.py").write_text("print(1)\n")
        (project / "locked.bin").write_text("no")
        if uid is not None:
            for path in (project, project / "ok.py", project / "locked.bin"):
                os.chown(path, uid, uid)
        (project / "locked.bin").chmod(0o000)
        files, skipped = _scan_as(uid, project)
    finally:
        if uid is not None:
            shutil.rmtree(base, ignore_errors=True)
    assert files == ["ok.py"]
    assert skipped == [["locked.bin", "cannot read it (permission denied): make it readable for you (chmod u+r) "
                                      "or move it out of the folder"]]


def test_the_cli_uploads_nothing_for_a_script_run_on_this_computer(tmp_path, secret_outside, capsys, monkeypatch):
    """``ddpgui launch local --script`` runs the script in its folder: nothing is copied, so nothing is "not
    uploaded", and a link out of the folder is the user's own, read where it points (tests/ssh names the skips)."""
    from ddpgui.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("open('seen.txt', 'w').write(str(len(open('shadow').read())))\n"
                                      "print('step 1: loss 0.5')\n")
    (project / "shadow").symlink_to(secret_outside)
    assert main(["launch", "local", "--script", str(project), "--nproc", "1", "--follow"]) == 0
    assert "not uploaded" not in capsys.readouterr().err
    assert (project / "seen.txt").read_text() == str(len(secret_outside.read_text()))
