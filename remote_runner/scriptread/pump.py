"""The supervisor's one thread over a script run's output pipes: copied to the logs, rank 0's read for metrics.

Three pipes: torchrun's stdout (torchrun and every rank but rank 0), and rank 0's stdout and stderr FIFOs
(:mod:`.rank0`).  One thread reads whichever is ready (``select``), so the three never interleave inside a
line of stdout.log: each pipe's bytes are written up to its last line end, the rest held until that line
is complete (or the pipe ends).  When rank 0's stderr and stdout are both ready, stderr is read first, and
the frame a bar is drawing on one stream is read before a chunk of the other: a progress bar (stderr) that
moved before a line was printed (stdout) gives that line its step.  Two pipes do not keep the order the
script wrote in, so when stdout is ready alone the pump waits up to :data:`LEAD_WAIT_S` for stderr: tqdm's
``write`` (Transformers prints its log dict with it) sends the line, then redraws the bar at the step the dict
belongs to, and a loaded machine may pause the script between the two writes.  What the reader sees is then
what the script wrote within that wait, stderr first.  A full disk
does not stop the reading (the script would block on a full pipe): the logs lose bytes, the metrics don't.
"""
import os
import select
import threading
import time
from typing import Optional

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
#: Seconds the pump waits for the ``lead`` pipe (rank 0's stderr) when the pipe it leads is ready alone.
LEAD_WAIT_S = 0.05


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


class OutputPump:
    """``pipes``: read fd → (log fd, OutputReader or None); ``first``: fds read first when several are ready;
    ``lead``: (fd, fd it leads): when the second is ready alone, the first is waited for up to LEAD_WAIT_S."""

    def __init__(self, pipes: dict[int, tuple], first: list[int] = (), lead: Optional[tuple[int, int]] = None):
        self._pipes = {fd: (_LogCopy(log_fd), reader) for fd, (log_fd, reader) in pipes.items()}
        self._order = list(first) + [fd for fd in pipes if fd not in first]
        self._lead = lead
        self._open = set(pipes)
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
                ready += self._led(ready)
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

    def _led(self, ready: list) -> list:
        """[the lead fd] when the fd it leads is ready alone and the lead becomes ready within LEAD_WAIT_S."""
        if self._lead is None:
            return []
        lead, led = self._lead
        if led not in ready or lead in ready or lead not in self._open:
            return []
        return select.select([lead], [], [], LEAD_WAIT_S)[0]

    def _read(self, fd: int) -> bool:
        """Read one chunk of ``fd``; whether it was a whole chunk (more may be waiting)."""
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        log, reader = self._pipes[fd]
        if not data:
            self._open.discard(fd)
            os.close(fd)
            log.flush()
            return False
        log.write(data)
        if reader is not None:
            try:
                for _, other in self._pipes.values():
                    if other is not None and other is not reader:
                        other.catch_up()
                reader.feed(data)
            except Exception as exc:  # a reader's bug must not stop the copying (or block the script)
                self._pipes[fd] = (log, None)
                reader.sink.event("warning", message="reading the script's output for metrics failed: %r" % exc)
        return len(data) == CHUNK
