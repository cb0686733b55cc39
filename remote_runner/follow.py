"""``follow``: stream new bytes of every spool from given offsets until the run has ended.

Output framing (docs/PROTOCOL.md, "follow"): a JSON header line, then the
bytes it announces::

    {"spool": "metrics.jsonl", "start": 0, "end": 812, "n": 812}\\n<812 bytes>
    {"hb": 1764500000.1, "state": "running"}\\n
    {"end": true, "status": {...}}\\n

Only complete lines are shipped while a run is live; once it has ended, a
trailing partial line (a crash mid-write) is shipped with a newline added so
the client can count it as corrupt and move on.  A record line longer than
MAX_CHUNK is never shipped in pieces: its range goes out as one empty chunk
marked ``"oversize": true`` (the client counts it as one corrupt line and keeps
everything after it).  When the run directory itself is gone the stream ends
with a failed status (``failure: run_dir_missing``) instead of beating forever.
"""
import json
import os
import sys
import time
from typing import BinaryIO, Optional

from .fsutil import NO_SPACE
from .spools import RECORD_SPOOLS, SPOOLS
from .status import FINAL_STATES, STATUS, read_status
from .supervisor import reconcile

#: Seconds between heartbeats when nothing else is sent (lets the client notice a dead link).
HEARTBEAT_S = 1.0
#: Seconds to sleep when a round found nothing new.
IDLE_SLEEP_S = 0.02
#: Most bytes sent from one spool in one chunk; a record line longer than this is sent as an oversize chunk.
MAX_CHUNK = 4 << 20
#: Bytes read at a time while looking for the end of an oversize line.
SCAN_BLOCK = 1 << 20


class Follower:
    """Reads the spools of one run dir from byte offsets and writes framed chunks to ``out``."""

    def __init__(self, run_dir: str, offsets: Optional[dict[str, int]], out: BinaryIO):
        self.run_dir = run_dir
        self.offsets = {name: int((offsets or {}).get(name, 0)) for name in SPOOLS}
        self.out = out
        self._files: dict[str, BinaryIO] = {}
        self._status: dict = {}
        self._status_stamp: Optional[tuple[int, int, int]] = None
        self._status_checked = float("-inf")

    def _read_new(self, name: str, final: bool) -> bool:
        path = os.path.join(self.run_dir, name)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return False
        start = self.offsets[name]
        if size <= start:
            return False
        fh = self._files.get(name)
        if fh is None:
            fh = self._files[name] = open(path, "rb")
        sent = False
        while start < size:
            fh.seek(start)
            data = fh.read(min(size - start, MAX_CHUNK))
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) == MAX_CHUNK:
                if name in RECORD_SPOOLS:  # one record longer than a chunk: its range, not its bytes
                    end = self._line_end(fh, start + len(data), size, final)
                    if end is None:
                        break
                    self._send(name, start, end, b"", oversize=True)
                    start = self.offsets[name] = end
                    sent = True
                    continue
                cut = len(data)  # a log line longer than a chunk: ship it in pieces
            if cut == 0:
                if not final:
                    break
                end = start + len(data)
                data += b"\n"
            else:
                data = data[:cut]
                end = start + cut
            self._send(name, start, end, data)
            start = self.offsets[name] = end
            sent = True
        return sent

    @staticmethod
    def _line_end(fh: BinaryIO, at: int, size: int, final: bool) -> Optional[int]:
        """The offset just past the newline ending the line that goes on at ``at``; ``size`` for a run that
        has ended without one; None while it is still being written."""
        while at < size:
            fh.seek(at)
            block = fh.read(min(SCAN_BLOCK, size - at))
            nl = block.find(b"\n")
            if nl >= 0:
                return at + nl + 1
            at += len(block)
        return size if final else None

    def _send(self, name: str, start: int, end: int, data: bytes, oversize: bool = False) -> None:
        header = {"spool": name, "start": start, "end": end, "n": len(data)}
        if oversize:
            header["oversize"] = True
        self.out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n" + data)

    def _line(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        self.out.flush()

    def round(self, final: bool = False) -> bool:
        """Ship everything new once; returns whether anything was sent."""
        sent = False
        for name in SPOOLS:
            sent = self._read_new(name, final) or sent
        if sent:
            self.out.flush()
        return sent

    def status(self, now: float) -> dict:
        """status.json, read again only when it changed; the supervisor's liveness checked once a second."""
        try:
            st = os.stat(os.path.join(self.run_dir, STATUS))
            stamp: Optional[tuple[int, int, int]] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._status_stamp or now - self._status_checked >= HEARTBEAT_S:
            if stamp is None and not os.path.isdir(self.run_dir):
                self._status = {"state": "failed", "failure": "run_dir_missing", "ended_at": time.time(),
                                "message": "the run's directory %s is gone from the host" % self.run_dir,
                                "hint": "the records received so far are kept; rerun the experiment to run it again"}
                return self._status
            try:
                self._status = reconcile(self.run_dir) or {"state": "created"}
            except OSError:  # the host cannot write the outcome (a full disk): report what is there
                self._status = read_status(self.run_dir) or self._status or {"state": "created"}
            self._status_stamp, self._status_checked = stamp, now
        return self._status

    def run(self, once: bool = False, heartbeat_s: float = HEARTBEAT_S) -> int:
        last_beat = time.monotonic()
        try:
            while True:
                status = self.status(time.monotonic())
                ended = status.get("state") in FINAL_STATES
                sent = self.round(final=ended)
                if ended or once:
                    # The spools are complete once the supervisor recorded the outcome: drain and stop.
                    while self.round(final=ended):
                        pass
                    self._line({"end": ended, "status": status, "offsets": self.offsets})
                    return 0
                now = time.monotonic()
                if now - last_beat >= heartbeat_s:
                    self._line({"hb": time.time(), "state": status.get("state")})
                    last_beat = now
                if not sent:
                    time.sleep(IDLE_SLEEP_S)
        except BrokenPipeError:
            return 0  # the client went away; the run goes on
        finally:
            for fh in self._files.values():
                fh.close()


def follow(run_dir: str, offsets_json: Optional[str], once: bool = False) -> int:
    offsets = json.loads(offsets_json) if offsets_json else {}
    out = sys.stdout.buffer
    try:
        return Follower(run_dir, offsets, out).run(once=once)
    except Exception as exc:  # the client reads an error frame (docs/PROTOCOL.md), not a silent end of stream
        if isinstance(exc, OSError):
            from .failures import os_error_text

            error, hint = os_error_text(exc)
        else:
            error, hint = "the runner's follow failed: %s: %s" % (type(exc).__name__, exc), ""
        failure = "disk_full" if getattr(exc, "errno", None) in NO_SPACE else "follow_failed"
        try:
            out.write(b"\n" + json.dumps({"ok": False, "error": error, "hint": hint, "failure": failure}).encode()
                      + b"\n")
            out.flush()
        except OSError:
            pass
        return 1
