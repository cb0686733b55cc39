"""The client side of the runner's ``follow`` stream (docs/PROTOCOL.md).

:class:`FollowDecoder` turns the bytes of the stream, in whatever pieces the
transport delivers them, into :class:`Chunk`, :class:`Heartbeat` and
:class:`End` messages.  :func:`parse_records` turns a chunk of a JSONL spool
into records, skipping and counting lines that are not JSON objects.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from remote_runner.spools import RECORD_SPOOLS, SPOOLS

LOG_SPOOLS = tuple(s for s in SPOOLS if s not in RECORD_SPOOLS)


class ProtocolError(ValueError):
    """The follow stream is not in the documented framing (a runner of another version?)."""


class RunnerFailed(ProtocolError):
    """The runner's follow stopped with its own error (``{"ok": false, "error": ..., "hint": ...}``)."""

    def __init__(self, message: str, hint: str = "", failure: str | None = None):
        super().__init__(message)
        self.hint, self.failure = hint, failure


@dataclass(frozen=True)
class Chunk:
    """Bytes ``[start, end)`` of one spool; ``data`` holds whole lines.

    ``oversize``: the range is one record line too long to ship (``data`` is empty);
    the store counts it as one corrupt line and moves its offset past it.
    """

    spool: str
    start: int
    end: int
    data: bytes
    oversize: bool = False


@dataclass(frozen=True)
class Heartbeat:
    t: float
    state: str | None


@dataclass(frozen=True)
class End:
    """The stream ended: ``ended`` when the run is over (else ``--once`` stopped it)."""

    ended: bool
    status: dict
    offsets: dict = field(default_factory=dict)


Message = Chunk | Heartbeat | End


class FollowDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the messages completed so far."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pending: dict | None = None  # a chunk header whose bytes have not all arrived

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        out: list[Message] = []
        while True:
            if self._pending is not None:
                n = self._pending["n"]
                if len(self._buf) < n:
                    return out
                body = bytes(self._buf[:n])
                del self._buf[:n]
                h = self._pending
                self._pending = None
                out.append(Chunk(h["spool"], h["start"], h["end"], body, bool(h.get("oversize"))))
                continue
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise ProtocolError(f"not a follow frame: {line[:200]!r}") from exc
            if not isinstance(obj, dict):
                raise ProtocolError(f"not a follow frame: {line[:200]!r}")
            if "spool" in obj:
                if obj["spool"] not in SPOOLS or not isinstance(obj.get("n"), int):
                    raise ProtocolError(f"bad chunk header: {obj!r}")
                self._pending = obj
            elif "hb" in obj:
                out.append(Heartbeat(float(obj["hb"]), obj.get("state")))
            elif "end" in obj:
                out.append(End(bool(obj["end"]), obj.get("status") or {}, obj.get("offsets") or {}))
            elif obj.get("ok") is False and "error" in obj:
                raise RunnerFailed(str(obj["error"]), str(obj.get("hint") or ""), obj.get("failure"))
            else:
                raise ProtocolError(f"unknown follow frame: {obj!r}")

    @property
    def idle(self) -> bool:
        """No partial frame is buffered (the stream stopped at a frame boundary)."""
        return self._pending is None and not self._buf


def parse_records(data: bytes) -> tuple[list[dict], list[bytes]]:
    """Records of a JSONL chunk, and the lines that were not JSON objects (truncated, garbage)."""
    records: list[dict] = []
    bad: list[bytes] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested thousands of levels deep
            bad.append(line)
            continue
        if isinstance(obj, dict):
            records.append(obj)
        else:
            bad.append(line)
    return records, bad
