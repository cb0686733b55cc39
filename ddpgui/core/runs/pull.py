"""Bringing back the files a run wrote on its host (``ddpgui pull``, the app's "Download outputs…").

:func:`list_outputs` asks the runner (``outputs RUN_DIR``, remote_runner/outputs.py) for the regular files of the
run directory and of the folder the launch settings named (``outputs_dir``), with sizes.  :func:`pull` downloads
the chosen ones into a folder: each goes to ``NAME.part`` first, which a later pull continues from its size (a
dropped link costs only what was in flight), and is renamed to ``NAME`` once its sha256 matches the one the runner
computed on the host.  The bytes come over the runner's ``outputs --read`` stream on an exec channel (hosts with
or without SFTP: on loopback it is several times paramiko's SFTP reads), or over SFTP when asked
(``via="sftp"``); on This computer the file is copied.  Plain Python: progress and cancellation are callbacks,
so the CLI and the app's worker thread call the same function.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from remote_runner import outputs as runner_outputs

from ..targets.base import ConnectionLost, Target, TargetError
from ..targets.local import LocalTarget
from .live import format_duration

PART = ".part"
#: Seconds a silent transfer stream may stay silent before the link counts as dead.
SILENCE_S = 30.0
#: Times a dropped link is reconnected and the transfer resumed before pull gives up.
RETRIES = 3
#: Progress callback: (bytes done, bytes total, the file now, files done, files total).
PullProgress = Callable[[int, int, str, int, int], None]


class PullError(TargetError):
    """A pull that cannot go on as asked (a pattern refused, nothing matched, a name that leaves the folder)."""


class PullCancelled(Exception):
    """The user cancelled; what arrived stays in ``NAME.part`` for the next pull."""


@dataclass(frozen=True)
class OutputFile:
    root: str  # "run" (the run directory) or "outputs" (the launch settings' outputs_dir)
    path: str  # POSIX path inside its root, as the host names it
    size: int
    mtime: float = 0.0

    @property
    def name(self) -> str:
        """Where it goes under the destination folder, and how it is shown."""
        return self.path if self.root == runner_outputs.RUN_ROOT else f"{runner_outputs.OUTPUTS_ROOT}/{self.path}"

    @property
    def entry(self) -> str:
        """The runner's name for it (JSON keeps a name that is not UTF-8 intact)."""
        return json.dumps([self.root, self.path])


@dataclass
class Listing:
    files: list[OutputFile]
    roots: dict[str, str]  # root name -> folder on the host
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    missing: list[str] = field(default_factory=list)  # folders named but not there

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class PullResult:
    out_dir: Path
    downloaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # already there with the host's sha256
    bytes: int = 0  # bytes that travelled
    resumed_bytes: int = 0  # bytes a .part already held
    reconnects: int = 0
    seconds: float = 0.0


def size_text(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def shown_name(name: str) -> str:
    """A host's file name as text that can always be shown on one line: bytes that are not UTF-8 and control
    characters as ``\\xNN`` (a newline as ``\\n``)."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() or ch == " " else "\\n" if ch == "\n" else
                   f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}" for ch in text)


def _from_listing(reply: dict) -> Listing:
    def name(item: dict) -> str:
        return OutputFile(item["root"], item["path"], 0).name

    files = [OutputFile(f["root"], f["path"], int(f["size"]), float(f.get("mtime") or 0)) for f in reply["files"]]
    return Listing(files, dict(reply.get("roots") or {}), [(name(s), s["why"]) for s in reply.get("skipped", [])],
                   [m["dir"] for m in reply.get("missing", [])])


def run_location(record, node: int = 0) -> tuple[str, str]:
    """(host, run directory) of node ``node`` of a stored run (a RunRecord); PullError when it has none."""
    run_dirs = {int(k): v for k, v in record.run_dirs.items()}
    if node not in run_dirs:
        what = f"node {node}" if run_dirs else "it"
        raise PullError(f"run {record.id} has no folder on a host for {what}",
                        "only a launched run has files to pull" if not run_dirs
                        else f"its nodes are {', '.join(map(str, sorted(run_dirs)))}")
    hosts = record.hosts or [record.host]
    return hosts[node] if node < len(hosts) else record.host, run_dirs[node]


def list_outputs(target: Target, run_dir: str) -> Listing:
    """The files of the run (its directory and its ``outputs_dir``), with sizes, from the runner on its host."""
    if isinstance(target, LocalTarget):
        return _from_listing(runner_outputs.list_files(run_dir))
    return _from_listing(target.outputs(run_dir))


def check_pattern(pattern: str) -> str:
    """A PATTERN of ``pull`` (a glob on the names the listing shows); ``..`` and absolute paths are refused."""
    if not pattern or pattern.startswith("/") or ".." in pattern.split("/") or "\0" in pattern:
        raise PullError(f"the pattern {pattern!r} is refused: patterns match names inside the run's folders",
                        "give a glob such as '*.pt' or 'checkpoints/*', without '..' or a leading '/'")
    return pattern


def select(files: list[OutputFile], patterns: list[str]) -> list[OutputFile]:
    """The files any pattern matches (a pattern without '/' matches the base name too); all when none given."""
    patterns = [check_pattern(p) for p in patterns]
    if not patterns:
        return list(files)
    return [f for f in files if any(fnmatch.fnmatchcase(f.name, p) or fnmatch.fnmatchcase(f.path, p)
                                    or ("/" not in p and fnmatch.fnmatchcase(posixpath.basename(f.path), p))
                                    for p in patterns)]


def destination(out_dir: Path, file: OutputFile) -> Path:
    """``out_dir/NAME``; a name that would leave ``out_dir`` (a hostile listing) is refused."""
    parts = file.name.split("/")
    if file.name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in file.name:
        raise PullError(f"the host listed {shown_name(file.name)!r}, which is not a name inside the run's folder",
                        "nothing was written for it; check the run's folder on the host")
    return out_dir.joinpath(*parts)


# ---- the byte sources ---------------------------------------------------------------------------
class _Sink:
    """Where the bytes go: the .part file, its running sha256, progress and the cancel check."""

    def __init__(self, fh, sha, on_bytes: Callable[[int], None], cancelled: Callable[[], bool]):
        self.fh, self.sha, self.on_bytes, self.cancelled = fh, sha, on_bytes, cancelled

    def write(self, data: bytes) -> None:
        if self.cancelled():
            raise PullCancelled
        self.fh.write(data)
        self.sha.update(data)
        self.on_bytes(len(data))

    def flush(self) -> None:
        self.fh.flush()


def _copy_local(run_dir: str, file: OutputFile, offset: int, sink: _Sink) -> str:
    """This computer: the runner's own stream function, in this process; returns the host's sha256."""
    said: list[dict] = []
    try:
        rc = runner_outputs.stream(runner_outputs.resolve(run_dir, file.entry), offset, sink, said.append)
    except runner_outputs.Refused as exc:
        raise PullError(str(exc), "list the run's files again") from None
    if rc != 0 or "sha256" not in said[-1]:
        raise TargetError(f"{file.path} became shorter while it was copied", "pull it again once the run is done")
    return said[-1]["sha256"]


def _read_more(stream, buf: bytearray, what: str, left: int | None = None) -> None:
    """Append what the stream brings next to ``buf``; a silence of SILENCE_S or an early end is a lost link."""
    try:
        data = stream.read(SILENCE_S)
    except TimeoutError:
        raise ConnectionLost(f"no data for {SILENCE_S:.0f} s while {what}", "pull again: it resumes") from None
    if not data:
        early = f"{size_text(left)} early" if left is not None else "early"
        raise ConnectionLost(f"the stream ended {early} while {what}", "pull again: it resumes")
    buf += data


def _read_line(stream, buf: bytearray, what: str) -> dict:
    while b"\n" not in buf:
        _read_more(stream, buf, what)
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return json.loads(line)


def _stream_exec(target: Target, run_dir: str, file: OutputFile, offset: int, sink: _Sink) -> str:
    """The runner's ``outputs --read`` over an exec channel: header line, the bytes, the sha256 line."""
    what = f"downloading {shown_name(file.name)}"
    stream = target.stream(target.runner("outputs", run_dir, "--read", file.entry, "--offset", str(offset)))
    buf = bytearray()
    try:
        head = _read_line(stream, buf, what)
        if not head.get("ok"):
            if head.get("failure") == "offset_past_end":
                raise _Restart
            raise PullError(head.get("error", "the runner refused"), head.get("hint", ""))
        left = int(head["size"]) - offset
        while left > 0:
            if not buf:
                _read_more(stream, buf, what, left)
            chunk = bytes(buf[:left]) if len(buf) > left else bytes(buf)
            del buf[:len(chunk)]
            sink.write(chunk)
            left -= len(chunk)
        return _read_line(stream, buf, what)["sha256"]
    finally:
        stream.close()


def _sftp(target: Target, run_dir: str, listing_roots: dict[str, str], file: OutputFile, offset: int,
          sink: _Sink) -> str:
    """Over SFTP (pipelined reads from ``offset``), the host's sha256 asked of the runner meanwhile."""
    digest: dict[str, object] = {}

    def host_hash() -> None:
        try:
            digest["sha256"] = target.outputs(run_dir, "--sha256", file.entry)["sha256"]
        except Exception as exc:  # reported after the transfer
            digest["error"] = exc

    hasher = threading.Thread(target=host_hash, daemon=True)
    hasher.start()
    path = posixpath.join(listing_roots[file.root], file.path).encode("utf-8", "surrogateescape")

    def read(sftp) -> None:
        with sftp.open(path, "rb") as fh:
            fh.seek(offset)
            fh.prefetch(file.size - offset)
            while True:
                data = fh.read(1 << 20)
                if not data:
                    return
                sink.write(data)

    target.connection.sftp_call(f"downloading {shown_name(file.name)}", read)
    hasher.join()
    error = digest.get("error")
    if isinstance(error, ConnectionLost):
        raise error
    if error is not None:  # the runner refused the file (a link swapped to lead out, say): what came is dropped
        raise PullError(str(error.args[0]), getattr(error, "hint", ""))
    return str(digest["sha256"])


class _Restart(Exception):
    """The .part is longer than the file on the host: start again from byte 0."""


# ---- pulling ------------------------------------------------------------------------------------
def _sha_of(path: Path) -> hashlib._Hash:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha


def pull(target: Target, run_dir: str, files: list[OutputFile], out_dir: str | Path, *,
         listing: Listing | None = None, progress: PullProgress | None = None,
         cancelled: Callable[[], bool] | None = None, via: str = "auto", retries: int = RETRIES) -> PullResult:
    """Download ``files`` of the run in ``run_dir`` on ``target`` into ``out_dir`` (see the module's text).

    ``via``: "auto" (This computer copies; an SSH host streams over an exec channel), "exec" or "sftp".  A
    dropped link is reconnected and the file resumed up to ``retries`` times, then ConnectionLost is raised with
    the .part kept.  ``cancelled()`` is asked between chunks (PullCancelled, the .part kept)."""
    out = Path(out_dir)
    result = PullResult(out)
    cancelled = cancelled or (lambda: False)
    total = sum(f.size for f in files)
    started = time.monotonic()
    before = 0  # bytes of the files already done
    for index, file in enumerate(files):
        dest = destination(out, file)
        dest.parent.mkdir(parents=True, exist_ok=True)
        here = 0  # bytes of this file in place (kept in its .part, or arrived)

        def count(n: int, travelled: bool = True, file: OutputFile = file, index: int = index,
                  before: int = before) -> None:
            nonlocal here
            here += n
            if travelled:
                result.bytes += n
            if progress:
                progress(before + here, total, file.name, index, len(files))

        for attempt in range(retries + 1):
            here = 0
            try:
                _pull_one(target, run_dir, file, dest, listing, count, cancelled, via, result)
                break
            except (ConnectionLost, EOFError) as exc:  # EOFError: paramiko's word for a socket gone mid-message
                if attempt == retries:
                    raise dropped(target.name, file, _part(dest)) from exc
                result.reconnects += 1
        before += file.size
    if progress:
        progress(before, total, "", len(files), len(files))
    result.seconds = time.monotonic() - started
    return result


def dropped(host: str, file: OutputFile, part: Path) -> ConnectionLost:
    """A lost link said for a pull: what arrived, and that Retry continues from it."""
    kept = part.stat().st_size if part.exists() else 0
    return ConnectionLost(f"the link to {host} dropped while {shown_name(file.name)} was downloading "
                          f"({size_text(kept)} of {size_text(file.size)} kept in {shown_name(part.name)})",
                          "Retry, or pull again: it continues from there once the host answers")


def _part(dest: Path) -> Path:
    return dest.with_name(dest.name + PART)


def _pull_one(target: Target, run_dir: str, file: OutputFile, dest: Path, listing: Listing | None,
              count: Callable[..., None], cancelled: Callable[[], bool], via: str, result: PullResult) -> None:
    """One file into ``dest`` by way of ``dest.part`` (continued from its size)."""
    part = _part(dest)
    if dest.exists() and not part.exists() and dest.stat().st_size == file.size:
        if _sha_of(dest).hexdigest() == _host_sha(target, run_dir, file):
            result.unchanged.append(file.name)
            count(file.size, travelled=False)
            return
    offset = part.stat().st_size if part.exists() else 0
    if offset > file.size:
        offset = 0
    while True:
        sha = _sha_of(part) if offset else hashlib.sha256()
        with open(part, "r+b" if offset else "wb") as fh:
            fh.truncate(offset)
            fh.seek(offset)
            count(offset, travelled=False)
            try:
                host_sha = _transfer(target, run_dir, file, offset, _Sink(fh, sha, count, cancelled), listing, via)
            except _Restart:  # the .part is longer than the file is now: from the start
                count(-offset, travelled=False)
                offset = 0
                continue
            except PullError:  # the host refused the file: nothing of it is kept
                part.unlink(missing_ok=True)
                raise
        break
    result.resumed_bytes += offset
    if sha.hexdigest() != host_sha:
        part.unlink()
        raise TargetError(f"{shown_name(file.name)} arrived with sha256 {sha.hexdigest()[:12]}…, but the file on "
                          f"the host has {host_sha[:12]}…: the copy was removed",
                          "pull again (the file may have changed on the host while it was read)")
    os.replace(part, dest)
    result.downloaded.append(file.name)


def _transfer(target: Target, run_dir: str, file: OutputFile, offset: int, sink: _Sink, listing: Listing | None,
              via: str) -> str:
    if isinstance(target, LocalTarget):
        return _copy_local(run_dir, file, offset, sink)
    if via == "sftp":
        roots = listing.roots if listing else list_outputs(target, run_dir).roots
        return _sftp(target, run_dir, roots, file, offset, sink)
    return _stream_exec(target, run_dir, file, offset, sink)


def _host_sha(target: Target, run_dir: str, file: OutputFile) -> str:
    if isinstance(target, LocalTarget):
        return runner_outputs.sha256_of(runner_outputs.resolve(run_dir, file.entry))[0]
    return target.outputs(run_dir, "--sha256", file.entry)["sha256"]


class RateMeter:
    """Bytes per second over the last few seconds, and the time left at that rate (for progress lines)."""

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self._samples: list[tuple[float, int]] = []

    def add(self, done: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] > self.window_s:
            self._samples.pop(0)

    @property
    def rate(self) -> float | None:
        if len(self._samples) < 2 or self._samples[-1][0] <= self._samples[0][0]:
            return None
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0)

    def text(self, done: int, total: int) -> str:
        """``84.0 MiB of 200.0 MiB · 95.3 MiB/s · ETA 00:01``."""
        rate = self.rate
        parts = [f"{size_text(done)} of {size_text(total)}"]
        if rate:
            parts += [f"{size_text(rate)}/s", f"ETA {format_duration((total - done) / rate if rate > 0 else None)}"]
        return " · ".join(parts)
