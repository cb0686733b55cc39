"""The code fingerprint of a script folder, on real git repositories made with the git CLI."""
import shutil
import subprocess
import time

import pytest

from ddpgui.core.targets import fingerprint as fingerprints
from ddpgui.core.targets.fingerprint import content_sha256, fingerprint, summary
from ddpgui.core.targets.uploads import scan


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "proj"
    (root / "lib").mkdir(parents=True)
    (root / "train.py").write_text("print('step 1: loss 0.5')\n")
    (root / "lib" / "model.py").write_text("X = 1\n")
    (root / ".gitignore").write_text("*.ckpt\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def test_a_clean_repository_gives_its_commit_and_no_changes(repo):
    fp = fingerprint(repo)
    assert fp == {"git_commit": git(repo, "rev-parse", "HEAD"), "git_dirty": None,
                  "content_sha256": content_sha256(scan(repo)[0])}
    (repo / "model.ckpt").write_text("weights")  # ignored: neither a change nor content
    assert fingerprint(repo) == fp
    assert summary(fp) == f"git {fp['git_commit'][:7]}"


def test_uncommitted_changes_are_hashed_and_each_edit_changes_the_hash(repo):
    clean = fingerprint(repo)
    (repo / "lib" / "model.py").write_text("X = 2\n")
    first = fingerprint(repo)
    assert first["git_commit"] == clean["git_commit"] and len(first["git_dirty"]) == 64
    assert first["content_sha256"] != clean["content_sha256"]
    assert fingerprint(repo) == first  # the same changes, the same hash
    (repo / "lib" / "model.py").write_text("X = 3\n")
    second = fingerprint(repo)
    assert second["git_dirty"] not in (None, first["git_dirty"])
    git(repo, "add", "lib/model.py")  # staged or not, still uncommitted
    assert fingerprint(repo)["git_dirty"] == second["git_dirty"]
    (repo / "lib" / "model.py").write_text("X = 1\n")
    git(repo, "add", "lib/model.py")
    assert fingerprint(repo) == clean  # back as committed
    assert summary(second) == f"git {clean['git_commit'][:7]} + uncommitted changes (sha256 {second['git_dirty'][:12]}…)"


def test_an_untracked_file_is_an_uncommitted_change_by_its_contents(repo):
    clean = fingerprint(repo)
    (repo / "extra.py").write_text("Y = 1\n")
    first = fingerprint(repo)
    assert first["git_dirty"] is not None and first["content_sha256"] != clean["content_sha256"]
    (repo / "extra.py").write_text("Y = 2\n")
    assert fingerprint(repo)["git_dirty"] not in (None, first["git_dirty"])
    (repo / "extra.py").unlink()
    assert fingerprint(repo) == clean


def test_only_the_folder_counts_inside_a_bigger_repository(repo):
    (repo / "lib" / "train_here.py").write_text("print(1)\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "second")
    clean = fingerprint(repo / "lib")
    assert clean["git_commit"] == git(repo, "rev-parse", "HEAD") and clean["git_dirty"] is None
    (repo / "train.py").write_text("changed outside the folder\n")
    assert fingerprint(repo / "lib") == clean
    (repo / "ignored_dir").mkdir()
    (repo / ".gitignore").write_text("*.ckpt\nignored_dir/\n")
    (repo / "ignored_dir" / "t.py").write_text("print(1)\n")
    assert fingerprint(repo / "ignored_dir")["git_commit"] is None  # no file of it is in git: the content only


def test_a_folder_outside_git_has_its_content_hash_only(repo, tmp_path):
    outside = tmp_path / "copy"
    shutil.copytree(repo, outside, ignore=shutil.ignore_patterns(".git"))
    fp = fingerprint(outside)
    assert fp == {"git_commit": None, "git_dirty": None, "content_sha256": fingerprint(repo)["content_sha256"]}
    assert summary(fp) == f"content sha256 {fp['content_sha256'][:12]}…"
    (outside / "train.py").write_text("print('other')\n")
    assert fingerprint(outside)["content_sha256"] != fp["content_sha256"]
    empty = tmp_path / "new"
    empty.mkdir()
    (empty / "train.py").write_text("")
    git(empty, "init", "-q")  # a repository without a commit
    assert fingerprint(empty)["git_commit"] is None


def test_without_git_or_with_a_git_that_hangs_the_content_hash_remains(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing here"))
    assert fingerprint(repo)["git_commit"] is None
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "git").write_text("#!/bin/sh\nexec sleep 30\n")
    (slow / "git").chmod(0o755)
    monkeypatch.setenv("PATH", str(slow))
    monkeypatch.setattr(fingerprints, "GIT_TIMEOUT_S", 0.5)
    start = time.monotonic()
    fp = fingerprint(repo)
    assert fp["git_commit"] is None and fp["content_sha256"] == content_sha256(scan(repo)[0])
    assert time.monotonic() - start < 10


def test_no_fingerprint_no_line():
    assert summary(None) is None and summary({}) is None
