"""The files a run wrote, for ``ddpgui pull`` (docs/PROTOCOL.md, "Outputs").

``outputs RUN_DIR`` lists the regular files under the run directory and, when config.json names an
``outputs_dir``, under that folder too, each with its size.  ``--read FILE --offset N`` streams one file from
byte N: a JSON header line, the bytes, then a JSON line with the sha256 of the whole file (the bytes before N
are hashed here too, so a resumed download is checked end to end).  ``--sha256 FILE`` prints only the hash.
FILE is the JSON list ``[ROOT, PATH]`` of a listing's entry: JSON keeps a name that is not UTF-8 intact.

A path never leaves its folder: ``..``, absolute paths and symbolic links that lead out are refused, symbolic
links to folders are not followed, and what is not a regular file (a FIFO, a socket) is skipped with a reason.
Stdlib only, Python 3.9+.
"""
import hashlib
import json
import os
import stat
import sys
from typing import Callable, Optional

CHUNK = 1 << 20
#: The roots a listing's entries belong to: the run directory, and the folder the launch settings named.
RUN_ROOT, OUTPUTS_ROOT = "run", "outputs"
#: What the runner itself writes in a run directory (its records travel by the follow stream): not the run's
#: outputs when a launch asks to keep them (``keep_outputs``).
RUNNER_FILES = frozenset(("config.json", "status.json", "metrics.jsonl", "telemetry.jsonl", "events.jsonl",
                          "stdout.log", "stderr.log", "supervisor.log", "supervisor.pid", ".reserve",
                          "collected.json", ".collected.lock"))
RUNNER_FOLDERS = ("pids/",)


def runners_own(path: str) -> bool:
    """Whether ``path`` (a listing's path in the run directory) is a file the runner wrote itself."""
    return path in RUNNER_FILES or path.startswith(RUNNER_FOLDERS)


class Refused(Exception):
    """A request that names no file of the run; ``failure`` is its word for the client."""

    def __init__(self, error: str, failure: str = "bad_path"):
        super().__init__(error)
        self.failure = failure


def outputs_dir(run_dir: str) -> Optional[str]:
    """The folder config.json's ``outputs_dir`` names, absolute (a relative one is taken from where the run
    works: a script's folder, else the run directory), or None."""
    try:
        with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    folder = config.get("outputs_dir") if isinstance(config, dict) else None
    if not isinstance(folder, str) or not folder:
        return None
    folder = os.path.expanduser(folder)
    script = config.get("script") if config.get("mode") == "script" else None
    base = script.get("dir") if isinstance(script, dict) and script.get("dir") else run_dir
    return os.path.normpath(os.path.join(base, folder))


def roots(run_dir: str) -> list[tuple[str, str]]:
    """(root name, absolute folder) of each folder a listing covers."""
    found = [(RUN_ROOT, run_dir)]
    extra = outputs_dir(run_dir)
    if extra:
        found.append((OUTPUTS_ROOT, extra))
    return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def list_files(run_dir: str) -> dict:
    """Every regular file of the run's folders, sorted: ``files`` (root, path, size, mtime) and ``skipped``
    (root, path, why)."""
    files, skipped, missing = [], [], []
    folders = roots(run_dir)
    listed_apart = {os.path.realpath(folder) for root, folder in folders if root != RUN_ROOT}
    for root, folder in folders:
        if not os.path.isdir(folder):
            missing.append({"root": root, "dir": folder})
            continue
        real_root = os.path.realpath(folder)
        for here, dirnames, filenames in os.walk(folder):
            rel_here = os.path.relpath(here, folder)
            for name in sorted(dirnames):
                if os.path.islink(os.path.join(here, name)):
                    skipped.append({"root": root, "path": _rel(rel_here, name) + "/",
                                    "why": "a symbolic link to a folder (not followed)"})
            # An outputs_dir inside the run directory is listed once, as its own root.
            dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(here, d))
                                 and (root != RUN_ROOT or os.path.realpath(os.path.join(here, d)) not in listed_apart))
            for name in sorted(filenames):
                path = os.path.join(here, name)
                rel = _rel(rel_here, name)
                try:
                    info = _regular(path, real_root)
                except Refused as exc:
                    skipped.append({"root": root, "path": rel, "why": str(exc)})
                    continue
                except OSError as exc:
                    skipped.append({"root": root, "path": rel, "why": "cannot read it: %s" % (exc.strerror or exc)})
                    continue
                files.append({"root": root, "path": rel, "size": info.st_size, "mtime": info.st_mtime})
    return {"ok": True, "run_dir": run_dir, "roots": dict(roots(run_dir)), "missing": missing, "files": files,
            "skipped": skipped}


def _rel(rel_here: str, name: str) -> str:
    return name if rel_here == "." else "/".join(rel_here.split(os.sep) + [name])


def _regular(path: str, real_root: str) -> os.stat_result:
    """The stat of the regular file at ``path``; Refused for a link that leads out of ``real_root`` or for
    what is not a regular file."""
    if os.path.islink(path):
        target = os.path.realpath(path)
        if not _inside(target, real_root):
            raise Refused("a symbolic link to %s, outside the folder (not followed)" % target, "outside")
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise Refused("not a regular file (a FIFO, socket or device)", "not_regular")
    return info


def resolve(run_dir: str, entry: str) -> str:
    """The absolute path of the listing's entry ``[ROOT, PATH]`` (JSON), checked to stay inside its folder."""
    try:
        root, rel = json.loads(entry)
    except (ValueError, TypeError):
        raise Refused("expected a JSON list [ROOT, PATH], got %r" % entry) from None
    folders = dict(roots(run_dir))
    if root not in folders:
        raise Refused("no folder %r for this run (it has %s)" % (root, ", ".join(sorted(folders))))
    if not isinstance(rel, str) or not rel or "\0" in rel or rel.startswith("/") or ".." in rel.split("/"):
        raise Refused("%r is not a path inside the run's folder (no '..', not absolute)" % (rel,))
    real_root = os.path.realpath(folders[root])
    path = os.path.join(folders[root], *rel.split("/"))
    if not _inside(os.path.realpath(path), real_root):
        raise Refused("%s leads outside the run's folder (a symbolic link): not read" % rel, "outside")
    return path


def _open_regular(path: str):
    """The file opened for reading without blocking on a FIFO put in its place; OSError when not regular."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise Refused("%s is not a regular file" % path, "not_regular")
    return fh


def _hash_upto(fh, sha, end: int) -> None:
    left = end
    while left > 0:
        data = fh.read(min(CHUNK, left))
        if not data:
            raise OSError(0, "the file became shorter while it was read", fh.name)
        sha.update(data)
        left -= len(data)


def sha256_of(path: str) -> tuple[str, int]:
    with _open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        sha = hashlib.sha256()
        _hash_upto(fh, sha, size)
    return sha.hexdigest(), size


def stream(path: str, offset: int, out, print_json: Callable[[dict], None]) -> int:
    """Send the header, bytes ``offset``.. of the file as its size is now, then the whole file's sha256."""
    with _open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if offset < 0 or offset > size:
            raise Refused("offset %d is past the end of %s (%d bytes): the file changed; download it again"
                          % (offset, path, size), "offset_past_end")
        sha = hashlib.sha256()
        _hash_upto(fh, sha, offset)
        print_json({"ok": True, "size": size, "offset": offset})
        left = size - offset
        while left > 0:
            data = fh.read(min(CHUNK, left))
            if not data:
                return 3  # shorter than it was: the client sees the stream end early and says so
            sha.update(data)
            out.write(data)
            left -= len(data)
        out.flush()
    print_json({"sha256": sha.hexdigest()})
    return 0


def main(run_dir: str, read: Optional[str], offset: int, sha256: Optional[str],
         print_json: Callable[[dict], None], refuse: Callable[..., int]) -> int:
    """The ``outputs`` command; ``refuse(error, hint, **fields)`` prints a refusal and returns its exit code."""
    if not os.path.isdir(run_dir):
        return refuse("no run in %s: the directory is gone" % run_dir, "", failure="run_dir_missing")
    try:
        if read is not None:
            return stream(resolve(run_dir, read), offset, sys.stdout.buffer, print_json)
        if sha256 is not None:
            digest, size = sha256_of(resolve(run_dir, sha256))
            print_json({"ok": True, "sha256": digest, "size": size})
            return 0
    except Refused as exc:
        return refuse(str(exc), "list the run's files again (ddpgui pull RUN --list)", failure=exc.failure)
    except FileNotFoundError as exc:
        return refuse("%s is gone from the host" % (exc.filename or "the file"), "list the run's files again",
                      failure="file_missing")
    print_json(list_files(run_dir))
    return 0
