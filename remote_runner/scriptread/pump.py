"""The supervisor's one thread over a script run's output pipes: copied to the logs, rank 0's read for metrics.

Four pipes: torchrun's stdout (torchrun and every rank but rank 0), rank 0's stdout and stderr FIFOs (what its
C code and subprocesses write to file descriptors 1 and 2), and the FIFO of rank 0's Python streams in frames
(:mod:`.rank0`), which keeps the order the script printed in across stdout and stderr: a progress bar (stderr)
that moved before a line was printed (stdout) gives that line its step.  One thread reads whichever is ready
(``select``), so the pipes never interleave inside a line of a log: each source's bytes are written up to its
last line end, the rest held until that line is complete (or the pipe ends).  When several are ready, rank 0's
stderr is read first, and the frame a bar is drawing on one stream is read before a chunk of the other.  A full
disk does not stop the reading (the script would block on a full pipe): the logs lose bytes, the metrics don't.
"""
import os
import select
import threading
import time
from typing import Optional

from .rank0 import FRAME_HEAD, MARKER

#: Bytes read from a pipe at once.
CHUNK = 1 << 16
#: A log line longer than this is written in pieces rather than held.
HOLD_MAX = 1 << 16
#: Seconds of quiet after which held progress-bar frames are written (see output.OutputReader.idle).
IDLE_S = 0.25
#: After a read that found less than a chunk, the pump waits this long before it looks again: a script that
#: prints line by line would otherwise wake it (two context switches) for every line it writes; meanwhile its
#: lines gather in the pipe (1 MiB, rank0.PIPE_BYTES) and are read as one chunk.
GATHER_S = 0.01


class _LogCopy:
    """Copies one pipe's bytes to a log file descriptor, whole lines at a time."""

    def __init__(self, log_fd: int):
        self.log_fd = log_fd
        self.rest = b""

    def write(self, data: bytes) -> None:
        data = self.rest + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0 and len(data) <= HOLD_MAX:
            self.rest = data
            return
        if cut == 0:
            cut = len(data)
        self.rest = data[cut:]
        self._out(data[:cut])

    def flush(self) -> None:
        rest, self.rest = self.rest, b""
        self._out(rest)

    def _out(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.log_fd, data):]
            except OSError:  # a full disk: these bytes are lost to the log, the run goes on
                return


class _Frames:
    """The framed FIFO's bytes, as (stream, payload) pieces in order (rank0._Framed writes them).  Bytes that are
    no frame (nothing but rank0 writes there) end the reading of this pipe's frames."""

    def __init__(self):
        self.rest = b""
        self.broken = False

    def split(self, data: bytes) -> list[tuple[int, bytes]]:
        """(stream, payload) of the whole frames so far; a stream's consecutive frames make one payload."""
        data, runs, at = self.rest + data, [], 0
        while not self.broken and len(data) - at >= FRAME_HEAD:
            if data[at] != MARKER or data[at + 1] not in (1, 2):
                self.broken = True
                break
            end = at + FRAME_HEAD + int.from_bytes(data[at + 2:at + 4], "big")
            if end > len(data):
                break
            if not runs or runs[-1][0] != data[at + 1]:
                runs.append((data[at + 1], []))
            runs[-1][1].append(data[at + FRAME_HEAD:end])
            at = end
        self.rest = b"" if self.broken else data[at:]
        return [(stream, b"".join(pieces)) for stream, pieces in runs]


class OutputPump:
    """``pipes``: read fd → (log fd, OutputReader or None); ``first``: fds read first when several are ready;
    ``framed``: (read fd, {1: its stdout's pipe fd, 2: its stderr's}): the FIFO of rank 0's Python streams,
    whose frames are copied and read as the pipes named there (their logs and readers)."""

    def __init__(self, pipes: dict[int, tuple], first: list[int] = (), framed: Optional[tuple[int, dict]] = None):
        self._pipes = {fd: (_LogCopy(log_fd), reader) for fd, (log_fd, reader) in pipes.items()}
        self._order = list(first) + [fd for fd in pipes if fd not in first]
        self._framed: dict[int, tuple[_Frames, dict]] = {}
        if framed is not None:
            fd, streams = framed
            self._framed[fd] = (_Frames(), {k: (_LogCopy(self._pipes[v][0].log_fd), v) for k, v in streams.items()})
            self._order.insert(0, fd)
        self._open = set(pipes) | set(self._framed)
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="script-output", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait until every pipe has ended (or ``timeout``: a process the run left behind holds one), then
        stop reading, write what is held and end the readers."""
        if self._thread is not None:
            self._thread.join(timeout)
        self._stopped.set()
        with self._lock:
            for fd in list(self._framed):
                self._end_frames(fd)
            for fd, (log, reader) in self._pipes.items():
                log.flush()
                if reader is not None:
                    reader.close()
                if fd in self._open:
                    self._open.discard(fd)
                    os.close(fd)

    def _loop(self) -> None:
        while self._open and not self._stopped.is_set():
            try:
                ready, _, _ = select.select(list(self._open), [], [], IDLE_S)
            except (OSError, ValueError):  # a descriptor closed under us by join()
                return
            with self._lock:
                if self._stopped.is_set():
                    return
                if not ready:
                    for _, reader in self._pipes.values():
                        if reader is not None:
                            reader.idle()
                    continue
                full = False
                for fd in self._order:
                    if fd in ready:
                        full = self._read(fd) or full
            if not full:
                time.sleep(GATHER_S)

    def _read(self, fd: int) -> bool:
        """Read one chunk of ``fd``; whether it was a whole chunk (more may be waiting)."""
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if fd in self._framed:
            if not data:
                self._end_frames(fd)
                return False
            frames, streams = self._framed[fd]
            for stream, payload in frames.split(data):
                log, pipe = streams[stream]
                log.write(payload)
                self._feed(pipe, payload)
            return len(data) == CHUNK
        log, reader = self._pipes[fd]
        if not data:
            self._open.discard(fd)
            os.close(fd)
            log.flush()
            return False
        log.write(data)
        self._feed(fd, data)
        return len(data) == CHUNK

    def _end_frames(self, fd: int) -> None:
        _, streams = self._framed[fd]
        for log, _ in streams.values():
            log.flush()
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def _feed(self, fd: int, data: bytes) -> None:
        """Give ``data`` to the reader of pipe ``fd``, after the others have read the frame they are drawing."""
        log, reader = self._pipes[fd]
        if reader is None:
            return
        try:
            for _, other in self._pipes.values():
                if other is not None and other is not reader:
                    other.catch_up()
            reader.feed(data)
        except Exception as exc:  # a reader's bug must not stop the copying (or block the script)
            self._pipes[fd] = (log, None)
            reader.sink.event("warning", message="reading the script's output for metrics failed: %r" % exc)
