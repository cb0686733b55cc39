"""Rank 0's output, apart from the other ranks': what the supervisor reads a script's metrics from.

Before a script-mode run starts, the supervisor makes three FIFOs in a private folder of the host's local temp
directory (a run directory on NFS, or a file system without FIFOs, is no place for them: then the run
directory is tried) and sets ``DDPGUI_SCRIPT_OUTPUT`` to that folder and ``DDPGUI_SCRIPT_FILES`` to the run
directory in torchrun's environment.  Each rank's entry calls
:func:`attach_rank0`: global rank 0 points its stdout and stderr (file descriptors 1 and 2, so what its
C++ side and its subprocesses print too) at two of the FIFOs and notes the log files it writes
(:func:`.files.note_written_files`); every other rank prints to torchrun's output as before.  The
supervisor copies what comes through the FIFOs to stdout.log and stderr.log and reads it for metrics.

What Python code prints, ``sys.stdout`` and ``sys.stderr`` (a print, a progress bar, logging, a forked
DataLoader worker's print), goes instead into the third FIFO, both streams in one, in frames (:class:`_Framed`:
a marker, the stream, the length, at most :data:`FRAME_DATA` bytes: one atomic pipe write, so forks' frames
never mix): two pipes do not keep the order the script wrote in, one does, and the step a progress bar (stderr)
showed when a line (stdout) was printed is the step that line gets.

Rank 0's ``sys.stdout`` is block-buffered and flushed every :data:`FLUSH_S` (:func:`buffer_stdout`): the
runs are started with ``PYTHONUNBUFFERED=1`` so that a line reaches the plot as it is printed, but a write per
``print`` into a pipe costs a script that prints 100,000 lines a second a tenth of its speed; batched, it costs
it nothing measurable, and a line is still read within :data:`FLUSH_S`.  Program order between the two streams
is kept: every write to ``sys.stderr`` (a progress bar's frame, a warning, a traceback) first sends what stdout
holds, and so does every fork.
"""
import fcntl
import io
import os
import stat
import sys
import tempfile
import threading
import time
from typing import Optional

#: The environment variables that tell a rank where the FIFOs are, and where to note the log files it writes.
OUTPUT_ENV, FILES_ENV = "DDPGUI_SCRIPT_OUTPUT", "DDPGUI_SCRIPT_FILES"
#: The FIFOs' names in the run directory: file descriptors 1 and 2, and Python's two streams in frames.
STDOUT_FIFO, STDERR_FIFO, FRAMED_FIFO = "rank0.stdout.fifo", "rank0.stderr.fifo", "rank0.framed.fifo"
FIFOS = (STDOUT_FIFO, STDERR_FIFO, FRAMED_FIFO)
#: A frame: MARKER, the stream (1 or 2), the payload's length (2 bytes, big-endian), the payload.
MARKER = 0x1E
FRAME_HEAD = 4
#: A frame's payload at most: the frame fits in PIPE_BUF (4096 on Linux), written atomically.
FRAME_DATA = 4096 - FRAME_HEAD
#: Room in each FIFO (Linux ``F_SETPIPE_SZ``; an unprivileged process may ask up to 1 MiB): a script that
#: prints in bursts goes on while the supervisor catches up.
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: Seconds a line printed on rank 0's stdout waits at most in its buffer.
FLUSH_S = 0.05
#: The size of that buffer (a script printing faster sends it whenever it is full).
STDOUT_BUFFER = 1 << 16


def make_fifos(run_dir: str) -> str:
    """Create the two FIFOs, mode 0600, in a new private folder of the local temp directory, else in
    ``run_dir``; returns the folder."""
    try:
        folder = tempfile.mkdtemp(prefix="ddpgui-rank0-")
        for name in FIFOS:
            os.mkfifo(os.path.join(folder, name), 0o600)
        return folder
    except OSError:
        pass
    for name in FIFOS:
        path = os.path.join(run_dir, name)
        try:
            if not stat.S_ISFIFO(os.lstat(path).st_mode):
                os.unlink(path)
                os.mkfifo(path, 0o600)
        except FileNotFoundError:
            os.mkfifo(path, 0o600)
    return run_dir


def remove_fifos(folder: str, run_dir: str) -> None:
    """Remove the FIFOs, and their folder when it is not the run directory."""
    for name in FIFOS:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass
    if folder != run_dir:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def open_reader(path: str) -> tuple[int, int]:
    """The supervisor's ends of a FIFO: (read fd, a write fd it holds so the reader sees no end of file
    before rank 0 has opened it, or between two attempts).  Both non-blocking; close the write fd once
    torchrun has ended, then read to the end."""
    read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    hold_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        fcntl.fcntl(read_fd, _F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # not Linux, or a lower limit: the default size works, with less slack
        pass
    return read_fd, hold_fd


def attach_rank0(environ: Optional[dict] = None) -> bool:
    """In a rank's process, before the script runs: rank 0 of a script-mode run writes to the FIFOs.

    Returns whether it did.  Anything that fails leaves the outputs as they were (torchrun's): the run goes
    on, its metrics then unread rather than the script broken.
    """
    environ = os.environ if environ is None else environ
    folder, run_dir = environ.pop(OUTPUT_ENV, None), environ.pop(FILES_ENV, None)
    if not folder or environ.get("RANK", "0") != "0":
        return False
    fds = []
    try:
        for name in FIFOS:
            fds.append(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        for fd in fds:
            os.close(fd)
        return False
    for fd in fds:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)  # the script's writes wait, as on a pipe
    for target, fd in zip((1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    try:
        buffer_stdout(framed_fd=fds[2])
    except (OSError, ValueError, AttributeError):  # no usable sys.stdout: it stays as it was
        pass
    from .files import note_written_files

    if run_dir:
        try:
            note_written_files(run_dir)
        except OSError:
            pass
        report_world_size(run_dir, environ)
    return True


def report_world_size(run_dir: str, environ: dict) -> None:
    """The world size torchrun started rank 0 with, as a ``script_reports`` event (see :mod:`.reports`)."""
    from ..spools import append_event

    size = environ.get("WORLD_SIZE", "")
    if size.isdigit():
        try:
            append_event(run_dir, "script_reports", setting="world_size", value=int(size),
                         line="torchrun started rank 0 with WORLD_SIZE=%s" % size)
        except OSError:
            pass


class _Stderr(io.TextIOWrapper):
    """Rank 0's ``sys.stderr``: as Python's (each write goes out at once), after what stdout holds."""

    stdout: Optional[io.TextIOWrapper] = None

    def write(self, text: str) -> int:
        _flush(self.stdout)
        return super().write(text)


def _flush(stream: Optional[io.TextIOWrapper]) -> None:
    try:
        if stream is not None and not stream.closed:
            stream.flush()
    except (OSError, ValueError):  # a broken pipe (the supervisor is gone): as a plain flush would fail later
        pass


class _Framed(io.RawIOBase):
    """What ``sys.stdout`` (``target`` 1) or ``sys.stderr`` (2) writes, as frames into the shared FIFO ``fd``.
    ``fileno()`` is the stream's own descriptor, for code that writes to it directly (C, subprocesses).

    Until the process forks, all of one write's frames go in one ``writev`` (a 64 KiB flush, one system call);
    once a fork may write into the same FIFO (a DataLoader worker that prints), each frame goes on its own, at
    most PIPE_BUF bytes: atomic, never cut by another process's frame."""

    forked = False  # set in the parent and the child at every fork (see buffer_stdout)

    def __init__(self, fd: int, target: int):
        super().__init__()
        self.fd, self.target = fd, target

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.target

    def isatty(self) -> bool:
        return False

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        if not view:
            return 0
        parts = []
        for start in range(0, len(view), FRAME_DATA):
            piece = view[start:start + FRAME_DATA]
            parts += [bytes((MARKER, self.target)) + len(piece).to_bytes(2, "big"), piece]
        step = 2 if _Framed.forked else len(parts)
        for i in range(0, len(parts), step):
            self._writev(parts[i:i + step])
        return len(view)

    def _writev(self, parts: list) -> None:
        done = os.writev(self.fd, parts)
        total = sum(len(p) for p in parts)
        if done < total:  # cut short (a signal): the rest, as one piece
            rest = b"".join(bytes(p) for p in parts)[done:]
            while rest:
                rest = rest[os.write(self.fd, rest):]


def buffer_stdout(flush_s: float = FLUSH_S, framed_fd: Optional[int] = None) -> io.TextIOWrapper:
    """Make this process's ``sys.stdout`` block-buffered with a flush every ``flush_s``, and its ``sys.stderr``
    send stdout's buffer before each write; both write to file descriptors 1 and 2, or in frames to
    ``framed_fd`` (:class:`_Framed`); returns the new stdout.

    The flushing thread is a daemon: the rank's exit flushes the streams (proctree.exit_without_finalizing)
    and so does a fork (``os.register_at_fork``: a forked DataLoader worker does not print the parent's lines
    again); in the forked child stdout is line-buffered, as it has no flushing thread."""
    old_out, old_err = sys.stdout, sys.stderr

    def raw(target: int) -> io.RawIOBase:
        return io.FileIO(target, "w", closefd=False) if framed_fd is None else _Framed(framed_fd, target)

    out = io.TextIOWrapper(io.BufferedWriter(raw(1), STDOUT_BUFFER),
                           encoding=old_out.encoding, errors=old_out.errors, line_buffering=False)
    err = _Stderr(raw(2), encoding=old_err.encoding, errors=old_err.errors, line_buffering=True,
                  write_through=True)
    err.stdout = out
    _flush(old_out)
    _flush(old_err)
    sys.stdout, sys.stderr = out, err
    lock = threading.Lock()  # held while the thread flushes, and across a fork: never fork mid-flush

    def flushing() -> None:
        while not out.closed:
            time.sleep(flush_s)
            with lock:
                _flush(out)

    def child() -> None:
        _Framed.forked = True
        lock.release()
        try:
            out.reconfigure(line_buffering=True)
        except (OSError, ValueError):
            pass

    def before_fork() -> None:
        lock.acquire()
        _flush(out)

    def parent() -> None:
        _Framed.forked = True
        lock.release()

    os.register_at_fork(before=before_fork, after_in_parent=parent, after_in_child=child)
    threading.Thread(target=flushing, name="ddpgui-rank0-stdout", daemon=True).start()
    return out
