"""A script's output bytes as the frames a terminal would show: one segment per line *and* per redraw.

Progress bars redraw in place with a carriage return, so ``\\r`` ends a segment as ``\\n`` does: every
redraw is a frame of its own.  ANSI escape sequences (colours, erase-line) are removed from the text; a
cursor-up sequence is remembered (``Segment.up``): a tqdm bar at ``position > 0`` (Transformers' evaluation
bar under its training bar) draws that way.

Cost matters here: a chatty script prints 100,000 lines a second, and a reader that falls behind makes the
script wait on a full pipe.  So the bytes are looked at a whole chunk at a time, in C: only the segments
that hold a word a metric needs (a loss, a step, iteration or epoch counter, a dict, a progress bar's ``|``,
rate or Rich's bar, a line indented as Rich wraps values) are cut out and decoded; every other line costs
nothing more than being counted.  With a user's ``--metric-regex`` any line may be a metric: every segment
that holds a digit is returned.  A segment longer than ``max_frame`` is dropped as it streams past, never held
in memory whole.
"""
import re
from collections import deque
from typing import NamedTuple, Optional

#: A longer segment is no metric line (and is not kept in memory): counted in ``long_skipped``.
MAX_FRAME = 64 * 1024

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[A-Za-z]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][A-Za-z0-9]|[=>78])")
_UP = re.compile(rb"\x1b\[\d*A")
#: What a segment that may be a metric line or a progress bar's frame holds (see lines.py and bars.py),
#: looked for in the lowercased chunk with ``bytes.find`` (memchr speed; a regex alternation is ten times
#: slower): a loss, a step, iteration or epoch counter, a dict or JSON object, a bar ("|", a rate "…/s",
#: "s/it", Rich's "━" and "•"), or the indentation Rich wraps a bar's values with.
_CANDIDATES = (b"loss", b"step", b"iter", b"epoch", b"{", b"|", b"/s", b"s/it", "\u2501".encode(),
               "\u2022".encode(), b"\n          ", b"\r          ")
_DIGIT = re.compile(rb"[0-9]|(?i:nan|inf)")  # a diverged loss prints as nan
_SEPARATOR = re.compile(rb"[\r\n]")


class Segment(NamedTuple):
    text: str  # decoded, ANSI removed
    up: bool  # the raw bytes moved the cursor up (a nested bar, or a multi-line redraw)


def without_ansi(text: str) -> str:
    """``text`` without its ANSI escape sequences (colours, cursor moves, erase-line)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def clean(raw: bytes) -> Segment:
    """One raw segment (no ``\\r``/``\\n`` in it) as a Segment."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" not in text:
        return Segment(text, False)
    return Segment(_ANSI.sub("", text), _UP.search(raw) is not None)


class FrameSplitter:
    """Feed bytes as they come; get the segments they complete that may hold a metric.

    ``lines`` counts the lines seen (``\\n``), ``long_skipped`` the segments dropped for their length, and
    ``last`` keeps the text of the last few lines, for the "no metric" report.  ``every_line``: a user's
    regex decides, so every segment with a digit is returned.
    """

    def __init__(self, max_frame: int = MAX_FRAME, every_line: bool = False):
        self.max_frame = max_frame
        self.every_line = every_line
        self.lines = 0
        self.long_skipped = 0
        self.last: deque = deque(maxlen=5)
        self._rest = b""
        self._dropping = False  # inside a segment longer than max_frame: discard up to its end

    def feed(self, data: bytes) -> list:
        if not data:
            return []
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if end == 0:  # no segment ends in this piece
            if not self._dropping:
                self._rest += data
                self._hold()
            return []
        if self._dropping:  # the long segment ends here: its end is discarded too
            self._dropping = False
            first = _SEPARATOR.search(data).start()
            complete, self._rest = data[first + 1:end], data[end:]
        else:
            complete, self._rest = self._rest + data[:end], data[end:]
        self._hold()
        self.lines += complete.count(b"\n")
        self._remember(complete)
        return self._segments(complete)

    def peek(self) -> Optional[Segment]:
        """The segment being written, not ended yet (a progress bar's frame ends only when the next one
        starts with its ``\\r``), or None; it stays held, and is returned again once it ends."""
        rest = self._rest
        if self._dropping or not rest or (not self.every_line and not _candidate_starts(rest + b"\n")):
            return None
        return clean(rest) if _DIGIT.search(rest) else None

    def flush(self) -> list:
        """The unterminated rest (the end of the output)."""
        rest, self._rest = self._rest, b""
        dropping, self._dropping = self._dropping, False
        if dropping or not rest:
            return []
        self.lines += 1
        self._remember(rest + b"\n")
        return self._segments(rest + b"\n")

    def _hold(self) -> None:
        if len(self._rest) > self.max_frame:
            self.long_skipped += 1
            self._rest = b""
            self._dropping = True

    def _segments(self, complete: bytes) -> list:
        """The candidate segments of ``complete`` (whole segments, each ended by a separator)."""
        if self.every_line:
            starts = [0] + [m.end() for m in _SEPARATOR.finditer(complete)][:-1]
        else:
            starts = sorted(_candidate_starts(complete))
        out = []
        for start in starts:
            stop = _SEPARATOR.search(complete, start).start()
            if stop - start > self.max_frame:
                self.long_skipped += 1
                continue
            raw = complete[start:stop]
            if raw and _DIGIT.search(raw) is not None:
                out.append(clean(raw))
        return out

    def _remember(self, complete: bytes) -> None:
        """The last few non-empty lines of ``complete``, for the report of a run without metrics."""
        for raw in complete[-4096:].split(b"\n")[-6:]:
            raw = raw.rsplit(b"\r", 1)[-1] if b"\r" in raw.rstrip(b"\r") else raw.rstrip(b"\r")
            if raw.strip():
                text = clean(raw).text.strip()
                if text:
                    self.last.append(text)


def _candidate_starts(data: bytes) -> set:
    """Where the segments of ``data`` that hold a candidate word start."""
    low = data.lower()
    starts = set()
    for word in _CANDIDATES:
        at = low.find(word)
        while at >= 0:
            if word[0] in (10, 13):  # the indentation after a line end: the segment starts after it
                starts.add(at + 1)
            else:
                starts.add(max(low.rfind(b"\n", 0, at), low.rfind(b"\r", 0, at)) + 1)
            at = low.find(word, at + len(word))
    return starts
