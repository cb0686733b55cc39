"""Uploading the user's script directory ("your own script" mode) through any Target.

Skips what the folder's ``.gitignore`` and ``.ddpguiignore`` files ignore (git's rules: ddpgui.core.targets.ignores),
version-control and cache directories, virtualenvs and conda envs,
symbolic links that leave the folder (to /etc/shadow, say), FIFOs, sockets and
device files, unreadable files and files over a size cap (all reported, with
the reason).  A file gets on the host at most its local permission bits.  A manifest on the host records the
sha256 of every file uploaded, so the next upload sends only what changed and
deletes what was uploaded before but is gone here.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .base import Progress, Target
from .ignores import IgnoreRules

log = logging.getLogger(__name__)

DEFAULT_SIZE_CAP = 50 * 2**20
MANIFEST = ".ddpgui-manifest.json"
#: Files handed to the target at once (one exec channel on hosts without SFTP).
BATCH_BYTES, BATCH_FILES = 16 * 2**20, 256
MANIFEST_SCHEMA = 1
#: Directories never uploaded, by name.
SKIP_DIRS = {
    ".git": "version control", ".hg": "version control", ".svn": "version control",
    "__pycache__": "Python cache", ".mypy_cache": "cache", ".pytest_cache": "cache",
    ".ipynb_checkpoints": "notebook checkpoints", ".venv": "a virtualenv", "venv": "a virtualenv",
}


@dataclass(frozen=True)
class LocalFile:
    rel: str  # POSIX path relative to the directory
    path: Path
    size: int
    sha256: str
    mode: int  # the permission bits it gets on the host: at most its local ones (never group/other write)

    @property
    def executable(self) -> bool:
        return bool(self.mode & stat.S_IXUSR)


@dataclass
class UploadResult:
    remote_dir: str
    files: int = 0  # files that belong on the host after this upload
    uploaded: list[str] = field(default_factory=list)
    uploaded_bytes: int = 0
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)  # uploaded before, gone here now
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def _skip_dir_reason(path: Path) -> str | None:
    if path.is_symlink():
        return "a symbolic link to a directory (not followed)"
    if path.name in SKIP_DIRS:
        return SKIP_DIRS[path.name]
    if (path / "pyvenv.cfg").is_file():
        return "a virtualenv (has pyvenv.cfg)"
    if (path / "conda-meta").is_dir():
        return "a conda environment (has conda-meta)"
    return None


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file, not a regular file"
    return "not a regular file"


def _unreadable(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "cannot read it (permission denied): make it readable for you (chmod u+r) or move it out of the folder"
    return f"cannot read it: {exc.strerror or exc}"


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file; never blocks on a FIFO that replaced it (OSError if it is not regular)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(0, _special_kind(mode), str(path))
        return fh.read()


def _link_outside(path: Path, root: Path) -> str | None:
    """Why a symbolic link to a file is not uploaded (it leaves the folder), or None."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "a broken symbolic link"
    if not resolved.is_relative_to(root):
        return f"a symbolic link to {resolved}, outside the folder"
    return None


Scan = tuple[list[LocalFile], list[tuple[str, str]]]


def scan(local_dir: str | Path, size_cap: int = DEFAULT_SIZE_CAP) -> Scan:
    """The files to upload (hashed) and what was skipped, with reasons."""
    root = Path(local_dir).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"{local_dir} is not a directory")
    rules = IgnoreRules(root)
    files: list[LocalFile] = []
    skipped: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here != root:
            rules.enter(here.relative_to(root).as_posix())
        for name in sorted(dirnames):
            rel = (here / name).relative_to(root).as_posix()
            reason = rules.reason(rel, is_dir=not (here / name).is_symlink()) or _skip_dir_reason(here / name)
            if reason:
                skipped.append((rel + "/", reason))
                dirnames.remove(name)
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            reason = rules.reason(rel, is_dir=False) or (_link_outside(path, root) if path.is_symlink() else None)
            if reason:
                skipped.append((rel, reason))
                continue
            try:
                info = path.stat()
            except OSError as exc:
                skipped.append((rel, _unreadable(exc)))
                continue
            if not stat.S_ISREG(info.st_mode):
                skipped.append((rel, _special_kind(info.st_mode)))
                continue
            if info.st_size > size_cap:
                skipped.append((rel, f"{info.st_size / 2**20:.1f} MiB is over the {size_cap / 2**20:g} MiB cap"))
                continue
            try:
                digest = hashlib.sha256(_read_regular(path)).hexdigest()
            except OSError as exc:
                skipped.append((rel, exc.strerror if exc.errno == 0 else _unreadable(exc)))
                continue
            files.append(LocalFile(rel, path, info.st_size, digest, stat.S_IMODE(info.st_mode) & 0o755))
    return files, skipped


def default_remote_dir(target: Target, local_dir: str | Path) -> str:
    """``<run root>/scripts/<dir name>-<hash of this computer's name and the local path>``: one stable place per
    local directory (two computers whose folders share a path never share a place in a shared run root)."""
    root = Path(local_dir).resolve()
    tag = hashlib.sha256(f"{socket.gethostname()}:{root}".encode()).hexdigest()[:12]
    return posixpath.join(target.run_root(), "scripts", f"{root.name}-{tag}")


def _read_manifest(target: Target, path: str) -> dict[str, str]:
    try:
        data = json.loads(target.read_file(path))
    except (FileNotFoundError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA or not isinstance(data.get("files"), dict):
        return {}
    return {rel: h for rel, h in data["files"].items() if isinstance(rel, str) and isinstance(h, str)}


def _batches(files: list[LocalFile]) -> Iterator[list[LocalFile]]:
    """Runs of files of at most BATCH_BYTES (or one bigger file) and BATCH_FILES: what is read into memory at once."""
    batch: list[LocalFile] = []
    size = 0
    for f in files:
        if batch and (size + f.size > BATCH_BYTES or len(batch) >= BATCH_FILES):
            yield batch
            batch, size = [], 0
        batch.append(f)
        size += f.size
    if batch:
        yield batch


def upload_dir(target: Target, local_dir: str | Path, remote_dir: str | None = None, *,
               size_cap: int = DEFAULT_SIZE_CAP, progress: Progress | None = None,
               scanned: Scan | None = None) -> UploadResult:
    """Bring ``remote_dir`` up to date with ``local_dir`` (``scanned``: its :func:`scan`, when already made);
    returns what was done."""
    files, skipped = scanned if scanned is not None else scan(local_dir, size_cap)
    remote_dir = remote_dir or default_remote_dir(target, local_dir)
    manifest_path = posixpath.join(remote_dir, MANIFEST)
    target.makedirs(remote_dir, 0o700)
    before = _read_manifest(target, manifest_path)
    changed = [f for f in files if before.get(f.rel) != f.sha256]
    result = UploadResult(remote_dir=remote_dir, files=len(files), unchanged=len(files) - len(changed),
                          skipped=skipped)
    total = sum(f.size for f in changed)
    if progress:
        progress(0, total, 0, len(changed))
    for batch in _batches(changed):
        def written(i: int, batch: list[LocalFile] = batch) -> None:
            result.uploaded.append(batch[i].rel)
            result.uploaded_bytes += batch[i].size
            if progress:
                progress(result.uploaded_bytes, total, len(result.uploaded), len(changed))

        target.write_files([(posixpath.join(remote_dir, f.rel), _read_regular(f.path), f.mode) for f in batch],
                           written)
    current = {f.rel for f in files}
    result.removed = sorted(rel for rel in before if rel not in current)
    if result.removed:
        target.exec(["rm", "-f", "--", *(posixpath.join(remote_dir, rel) for rel in result.removed)])
    manifest = {"schema": MANIFEST_SCHEMA, "files": {f.rel: f.sha256 for f in files}}
    target.write_file(manifest_path, json.dumps(manifest, indent=1, ensure_ascii=False).encode(), 0o600)
    return result


@contextmanager
def collected_skips() -> Iterator[list[str]]:
    """The "not uploaded" notices of the script uploads this thread makes inside the block (for the app)."""
    notices: list[str] = []
    thread = threading.get_ident()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread == thread:
                notices.append(record.getMessage())

    handler = Collect(logging.WARNING)
    log.addHandler(handler)
    try:
        yield notices
    finally:
        log.removeHandler(handler)


def upload_script_dir(target: Target, local_dir: str | Path, remote_dir: str | None = None, *,
                      size_cap: int = DEFAULT_SIZE_CAP, progress: Progress | None = None,
                      scanned: Scan | None = None) -> str:
    """:func:`upload_dir` for callers that need only the remote directory; what was skipped is logged."""
    result = upload_dir(target, local_dir, remote_dir, size_cap=size_cap, progress=progress, scanned=scanned)
    for rel, why in result.skipped:
        log.warning("not uploaded from %s: %s (%s)", local_dir, rel, why)
    return result.remote_dir
