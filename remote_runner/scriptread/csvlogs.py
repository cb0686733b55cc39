"""CSV metric logs read while the script writes them: Lightning's ``CSVLogger`` and CSV logs in general.

:class:`CsvLogTail` reads the rows that got whole (ended by a newline) since its last call.  A file is a
metrics log when its header has a step-like column (``step``, ``global_step``, ``iter``, ``iteration``,
``epoch``) or a loss-like one; otherwise nothing is read and ``not_a_log`` says why.

Lightning's ``metrics.csv`` (``epoch,step,train_loss,val_loss``, empty cells where a row has no value) is
rewritten whole when a new column appears: the same rows under a wider header, then the new ones.  A
rewrite (another file at the path, a file shorter than what was read, or a first line that changed) is
read again from its top, passing over as many rows as were read before it, so each row is given once.

Bad input never stops the reading; each of these is counted in ``corrupt`` and skipped:
a row whose width differs from the header's, a cell that is neither a number nor empty (the rest of its
row is kept), a step cell that is not a whole number (the row is kept without a step), a line over
MAX_LINE bytes, a line of non-numbers that is no metrics header.  A line of non-numbers that is one (a
step-like or loss-like column) is a new header: the rows after it are read by it.
"""
import csv
import math
import os
from typing import Optional

#: Column names that hold the step, most preferred first.
STEP_COLUMNS = ("step", "global_step", "iter", "iteration", "epoch")
#: Bytes read from the file at a time.
READ_PIECE = 1 << 20
#: A longer line is no metric row: it is skipped (and counted) without being kept whole.
MAX_LINE = 1 << 20

Row = tuple[Optional[int], dict[str, float]]


def _number(cell: str) -> Optional[float]:
    """The cell's number (``nan`` and ``inf`` too: a diverged loss is a value), or None."""
    try:
        return float(cell)
    except ValueError:
        return None


def _step_column(columns: list[str]) -> Optional[int]:
    lowered = [c.strip().lower() for c in columns]
    for name in STEP_COLUMNS:
        if name in lowered:
            return lowered.index(name)
    return None


def _is_metrics_header(columns: list[str]) -> bool:
    return _step_column(columns) is not None or any("loss" in c.lower() for c in columns)


class CsvLogTail:
    """Incremental reader of one CSV log: call :meth:`read` as often as you like.

    ``rows`` counts the rows given; ``corrupt`` the rows and cells skipped; ``rewrites`` the whole-file
    rewrites seen; ``not_a_log`` is "" or why the file is not read as a metrics log.
    """

    def __init__(self, path: str):
        self.path = path
        self.rows = 0
        self.corrupt = 0
        self.rewrites = 0
        self.not_a_log = ""
        self.columns: Optional[list[str]] = None  # the header in force
        self._step_at: Optional[int] = None
        self._first_line = b""  # the file's first line, as read (to see a rewrite)
        self._offset = 0  # the byte after the last whole line read
        self._lines = 0  # lines after the first one read (given, skipped or bad) in this version of the file
        self._pass = 0  # lines of a rewritten file to pass over: they were read before the rewrite
        self._identity: Optional[tuple[int, int]] = None
        self._skipping_long = False  # inside a line longer than MAX_LINE

    def read(self) -> list[Row]:
        """``(step or None, {column: value})`` for every whole row written since the last call."""
        out: list[Row] = []
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if self._rewritten(fh, st):
                    self._restart()
                while True:
                    fh.seek(self._offset)
                    data = fh.read(READ_PIECE)
                    if not data:
                        break
                    used = self._lines_of(data, out)
                    if used == 0:
                        break
                    self._offset += used
        except OSError:
            pass
        return out

    def finish(self) -> list[Row]:
        """At the end (the run's, or of a log read whole): the rows still to read, and a last row the writer
        left without its newline (while a run goes on it is a row being written, so :meth:`read` waits)."""
        out = self.read()
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                rest = fh.read(MAX_LINE)
        except OSError:
            return out
        if rest and b"\n" not in rest and not self._skipping_long:
            used = self._lines_of(rest + b"\n", out)
            self._offset += max(0, used - 1)
        return out

    def _rewritten(self, fh, st: os.stat_result) -> bool:
        identity = (st.st_dev, st.st_ino)
        if self._identity is None:
            self._identity = identity
            return False
        if identity != self._identity:
            self._identity = identity
            return True
        if st.st_size < self._offset:
            return True
        if self._first_line:
            fh.seek(0)
            return fh.read(len(self._first_line)) != self._first_line
        return False

    def _restart(self) -> None:
        self.rewrites += 1
        self._pass = max(self._pass, self._lines)
        self._lines = 0
        self._offset = 0
        self._first_line = b""
        self.columns = None
        self._skipping_long = False

    def _lines_of(self, data: bytes, out: list[Row]) -> int:
        """Read the whole lines at the start of ``data``; returns how many bytes they took."""
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) >= MAX_LINE:  # a huge line without its end yet: pass over what came of it
                if not self._skipping_long:
                    self.corrupt += 1
                self._skipping_long = True
                return len(data)
            return 0
        lines = data[:end].split(b"\n")[:-1]
        for raw in lines:
            if self._skipping_long:  # the end of a line too long to be a row
                self._skipping_long = False
                self._lines += 1
                continue
            if not self._first_line:
                self._first_line = raw + b"\n"
                self._header(raw)
                continue
            self._lines += 1
            if self._lines <= self._pass:
                continue
            self._row(raw, out)
        return end

    def _cells(self, raw: bytes) -> Optional[list[str]]:
        """The line's cells, or None when the csv module refuses it (a NUL byte on older Pythons)."""
        text = raw.decode("utf-8", "replace").rstrip("\r")
        try:
            return next(csv.reader([text]), [])
        except csv.Error:
            return None

    def _header(self, raw: bytes) -> None:
        columns = [c.strip() for c in self._cells(raw.removeprefix(b"\xef\xbb\xbf")) or []]
        if _is_metrics_header(columns):
            self.columns, self._step_at, self.not_a_log = columns, _step_column(columns), ""
        else:
            self.columns, self._step_at = None, None
            self.not_a_log = ("its header (%s) names no step column (%s) and no loss"
                              % (", ".join(columns)[:200], ", ".join(STEP_COLUMNS)))

    def _row(self, raw: bytes, out: list[Row]) -> None:
        if not raw.strip():
            return
        cells = self._cells(raw)
        if cells is None:
            self.corrupt += 1
            return
        filled = [c for c in cells if c.strip()]
        if filled and all(_number(c) is None for c in filled):
            if self.columns is None or _is_metrics_header([c.strip() for c in cells]):
                self._header(raw)  # a new header: the columns change from here
            else:  # not a header of a metrics log (a garbage line): the columns stay
                self.corrupt += 1
            return
        if self.columns is None:
            return
        if len(cells) != len(self.columns):
            self.corrupt += 1
            return
        step: Optional[int] = None
        values: dict[str, float] = {}
        for i, (name, cell) in enumerate(zip(self.columns, cells)):
            cell = cell.strip()
            if not cell:
                continue
            value = _number(cell)
            if value is None:
                self.corrupt += 1
            elif i == self._step_at:
                if math.isfinite(value) and value == int(value):
                    step = int(value)
                else:
                    self.corrupt += 1
            else:
                values[name] = value
        if values:
            self.rows += 1
            out.append((step, values))
