"""A script's output bytes as the frames a terminal would show: one segment per line *and* per redraw.

Progress bars redraw in place with a carriage return, so ``\\r`` ends a segment as ``\\n`` does: every
redraw is a frame of its own.  ANSI escape sequences (colours, erase-line) are removed from the text; a
cursor-up sequence is remembered (``Segment.up``): a tqdm bar at ``position > 0`` (Transformers' evaluation
bar under its training bar) draws that way.

Cost matters here (a chatty script prints 100,000 lines a second): the bytes are split a whole chunk at a
time, a segment without a digit (nor a nan or inf) is passed over without being decoded (no number, no metric), and a segment
longer than ``max_frame`` is dropped as it streams past, never held in memory whole.
"""
import re
from collections import deque
from typing import NamedTuple, Optional

#: A longer segment is no metric line (and is not kept in memory): counted in ``long_skipped``.
MAX_FRAME = 64 * 1024

_SPLIT = re.compile(rb"[\r\n]")
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[A-Za-z]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][A-Za-z0-9]|[=>78])")
_UP = re.compile(rb"\x1b\[\d*A")
_NUMBER = re.compile(rb"[0-9]|nan|inf", re.IGNORECASE)  # a diverged loss prints as nan


class Segment(NamedTuple):
    text: str  # decoded, ANSI removed
    up: bool  # the raw bytes moved the cursor up (a nested bar, or a multi-line redraw)


def clean(raw: bytes) -> Segment:
    """One raw segment (no ``\\r``/``\\n`` in it) as a Segment."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" not in text:
        return Segment(text, False)
    return Segment(_ANSI.sub("", text), _UP.search(raw) is not None)


class FrameSplitter:
    """Feed bytes as they come; get the segments they complete.

    Segments without a digit are not returned (they cannot hold a number) unless ``keep_all``; ``seen``
    counts every non-empty segment, returned or not, and ``last`` keeps the text of the last few, for the
    "no metric" report.
    """

    def __init__(self, max_frame: int = MAX_FRAME, keep_all: bool = False):
        self.max_frame = max_frame
        self.keep_all = keep_all
        self.seen = 0
        self.long_skipped = 0
        self._rest = b""
        self._dropping = False  # inside a segment longer than max_frame: discard up to its end
        self.last: deque = deque(maxlen=5)

    def feed(self, data: bytes) -> list[Segment]:
        if not data:
            return []
        pieces = _SPLIT.split(data)
        head = pieces[0]
        if self._dropping:
            if len(pieces) == 1:
                return []
            self._dropping = False
            head = b""
        else:
            head = self._rest + head
        self._rest = pieces[-1] if len(pieces) > 1 else head
        if len(pieces) == 1:
            self._hold()
            return []
        out: list[Segment] = []
        self._take(head, out)
        for raw in pieces[1:-1]:
            self._take(raw, out)
        self._hold()
        self._remember([head] + pieces[max(1, len(pieces) - 6):-1])
        return out

    def peek(self) -> Optional[Segment]:
        """The segment being written, not ended yet (a progress bar's frame ends only when the next one
        starts with its ``\r``), or None; it stays held, and is returned again once it ends."""
        if self._dropping or not self._rest or _NUMBER.search(self._rest) is None:
            return None
        return clean(self._rest)

    def flush(self) -> list[Segment]:
        """The unterminated rest (the end of the output)."""
        rest, self._rest = self._rest, b""
        out: list[Segment] = []
        if not self._dropping:
            self._take(rest, out)
            self._remember([rest])
        self._dropping = False
        return out

    def _remember(self, pieces: list[bytes]) -> None:
        for raw in pieces:
            if raw and len(raw) <= 1024 and not raw.isspace():
                text = clean(raw).text.strip()
                if text:
                    self.last.append(text)

    def _hold(self) -> None:
        if len(self._rest) > self.max_frame:
            self.long_skipped += 1
            self.seen += 1
            self._rest = b""
            self._dropping = True

    def _take(self, raw: bytes, out: list[Segment]) -> None:
        if not raw:
            return
        if len(raw) > self.max_frame:
            self.long_skipped += 1
            self.seen += 1
            return
        if raw.isspace():
            return
        self.seen += 1
        if self.keep_all or _NUMBER.search(raw) is not None:
            out.append(clean(raw))
        elif b"\x1b" in raw and _UP.search(raw) is not None:
            out.append(Segment("", True))
