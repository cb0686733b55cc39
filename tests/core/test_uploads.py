"""The script-directory upload through a Target (here "This computer"; tests/ssh does the same over SSH)."""
import os
import posixpath

import pytest

from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.uploads import MANIFEST, default_remote_dir, scan, upload_dir, upload_script_dir


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
