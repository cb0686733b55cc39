"""What code a script run ran: the fingerprint of its folder, taken on this computer before the launch.

``{"git_commit": sha or None, "git_dirty": sha256 of the uncommitted changes or None when there are none,
"content_sha256": sha256 of the folder's files}`` (``ScriptConfig.fingerprint``).  The uncommitted changes are
those under the folder: the diff of its tracked files against HEAD (staged or not) and its untracked files that
git does not ignore, each by its contents.  The content hash is over the files an upload sends (the ignore rules
and the size cap applied: ddpgui.core.targets.uploads.scan), by path and contents, so the same folder gives the
same hash whatever the host.  git is asked with a timeout; without git, outside a work tree or in a repository
without a commit, only the content hash is there.
"""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from .uploads import DEFAULT_SIZE_CAP, LocalFile, scan

#: Seconds one git command may take (a huge repository on a slow disk) before the fingerprint goes without git.
GIT_TIMEOUT_S = 20.0


def _git(folder: Path, *args: str) -> bytes | None:
    """The output of ``git args`` run in ``folder``, or None when git is missing, fails or takes too long."""
    # No optional locks: a `git status` or `git diff` of ours never takes index.lock from under the user's git.
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, timeout=GIT_TIMEOUT_S, env=env,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def content_sha256(files: list[LocalFile]) -> str:
    """The hash of files by relative path and contents (a scan's list: the same for the same folder anywhere)."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.rel):
        digest.update(f"{f.rel}\0{f.sha256}\n".encode())
    return digest.hexdigest()


def _file_token(folder: Path, rel: str, known: dict[str, str], size_cap: int) -> str:
    """An untracked file as it enters the dirty hash: its contents' sha256 (a link: its target; a file over the
    size cap: its size, not read)."""
    if rel in known:
        return known[rel]
    path = folder / rel
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            return "link " + os.readlink(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > size_cap:
            return f"size {info.st_size}"
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        return f"unreadable {exc.errno}"


def git_state(folder: str | Path, files: list[LocalFile] | None = None,
              size_cap: int = DEFAULT_SIZE_CAP) -> tuple[str | None, str | None]:
    """(the commit HEAD is at, the sha256 of the uncommitted changes under ``folder`` or None), or (None, None)
    when ``folder`` is not in a git work tree with a commit, holds no file git tracks (an ignored folder of a
    repository) or git is not there.  ``files``: the folder's scan, whose hashes are reused for the untracked
    files."""
    folder = Path(folder).resolve()
    commit = _git(folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if not commit or not _git(folder, "ls-files", "-z", "--", "."):
        return None, None
    diff = _git(folder, "diff", "--no-ext-diff", "--no-textconv", "--binary", "HEAD", "--", ".")
    untracked = _git(folder, "ls-files", "-z", "--others", "--exclude-standard", "--", ".")
    if diff is None or untracked is None:
        return commit.decode().strip(), None
    known = {f.rel: f.sha256 for f in files or []}
    names = sorted(name for name in untracked.decode("utf-8", "surrogateescape").split("\0") if name)
    if not diff and not names:
        return commit.decode().strip(), None
    digest = hashlib.sha256(b"diff\0" + diff)
    for rel in names:
        digest.update(f"untracked\0{rel}\0{_file_token(folder, rel, known, size_cap)}\n".encode("utf-8",
                                                                                             "surrogateescape"))
    return commit.decode().strip(), digest.hexdigest()


def fingerprint(folder: str | Path, scanned: list[LocalFile] | None = None,
                size_cap: int = DEFAULT_SIZE_CAP) -> dict[str, str | None]:
    """The fingerprint of the script folder (``scanned``: its scan's files, when already made)."""
    files = scanned if scanned is not None else scan(folder, size_cap)[0]
    commit, dirty = git_state(folder, files, size_cap)
    return {"git_commit": commit, "git_dirty": dirty, "content_sha256": content_sha256(files)}


def summary(fp: dict | None) -> str | None:
    """One line for ``ddpgui show``: "git 1a2b3c4 + uncommitted changes (sha256 5d6e7f8a9b0c…)", "git 1a2b3c4" or
    "content sha256 5d6e7f8a9b0c…"; None without a fingerprint."""
    if not fp:
        return None
    if fp.get("git_commit"):
        text = f"git {fp['git_commit'][:7]}"
        if fp.get("git_dirty"):
            text += f" + uncommitted changes (sha256 {fp['git_dirty'][:12]}…)"
        return text
    if fp.get("content_sha256"):
        return f"content sha256 {fp['content_sha256'][:12]}…"
    return None
