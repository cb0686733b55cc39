"""Growing float64 buffers for live curves: amortized O(1) append, every point kept.

A curve of 10^6 points cannot be re-reduced for every frame in Python time, so each
buffer also keeps a min/max pyramid: level k holds, for every complete bin of
``FACTOR ** (k + 1)`` points, the bin's first x and its smallest and largest y.
:meth:`SeriesBuffer.envelope` answers "what must be drawn for the x range
[x0, x1] on ``pixels`` columns" in O(pixels) from the pyramid, with at least one
bin per pixel column, so the drawing is exact at screen resolution (every peak
and trough is there) while the data itself is never sampled or dropped.
"""
from __future__ import annotations

import math

import numpy as np

#: Each pyramid level bins this many bins of the level below.
FACTOR = 8


class _Level:
    """One pyramid level: the complete bins so far (first x, min y, max y)."""

    __slots__ = ("bin", "x", "lo", "hi", "size")

    def __init__(self, bin_size: int, capacity: int):
        self.bin = bin_size
        self.x = np.empty(capacity, dtype=np.float64)
        self.lo = np.empty(capacity, dtype=np.float64)
        self.hi = np.empty(capacity, dtype=np.float64)
        self.size = 0

    def add(self, x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        need = self.size + len(x)
        if need > len(self.x):
            capacity = max(need, 2 * len(self.x))
            for name in ("x", "lo", "hi"):
                grown = np.empty(capacity, dtype=np.float64)
                grown[:self.size] = getattr(self, name)[:self.size]
                setattr(self, name, grown)
        self.x[self.size:need] = x
        self.lo[self.size:need] = lo
        self.hi[self.size:need] = hi
        self.size = need


class SeriesBuffer:
    """x/y columns that double their capacity when full (never re-allocated per point)."""

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self.size = 0
        #: Bumped by every change, so a plot can tell whether what it drew is still current.
        self.version = 0
        #: False once an x went backwards: the envelope then falls back to the raw points.
        self.monotonic = True
        self._levels: list[_Level] = []

    def __len__(self) -> int:
        return self.size

    @property
    def capacity(self) -> int:
        return len(self._x)

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need <= len(self._x):
            return
        capacity = len(self._x)
        while capacity < need:
            capacity *= 2
        for name in ("_x", "_y"):
            grown = np.empty(capacity, dtype=np.float64)
            grown[:self.size] = getattr(self, name)[:self.size]
            setattr(self, name, grown)

    def append(self, x: float, y: float) -> None:
        self._reserve(1)
        if self.size and x < self._x[self.size - 1]:
            self.monotonic = False
        self._x[self.size] = x
        self._y[self.size] = y
        self.size += 1
        self.version += 1

    def extend(self, xs, ys) -> None:
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        if not len(xs):
            return
        self._reserve(len(xs))
        if self.monotonic and ((self.size and xs[0] < self._x[self.size - 1]) or
                               (len(xs) > 1 and bool((np.diff(xs) < 0).any()))):
            self.monotonic = False
        self._x[self.size:self.size + len(xs)] = xs
        self._y[self.size:self.size + len(ys)] = ys
        self.size += len(xs)
        self.version += 1

    def clear(self) -> None:
        self.size = 0
        self.version += 1
        self.monotonic = True
        self._levels.clear()

    def set_x(self, xs) -> None:
        """Replace the x column (another x axis), keeping y (and, in a SmoothedBuffer, the smoothing)."""
        ys = self.y.copy()
        self.clear()
        self.extend(xs, ys)

    @property
    def x(self) -> np.ndarray:
        return self._x[:self.size]

    @property
    def y(self) -> np.ndarray:
        return self._y[:self.size]

    # ---- the min/max pyramid ---------------------------------------------------------------
    def build_pyramid(self) -> None:
        """Fold every point into the pyramid now (off the GUI thread), not at the first :meth:`envelope`."""
        self._catch_up()

    def _catch_up(self) -> None:
        """Fold the points appended since the last call into the pyramid (vectorised, amortized O(1))."""
        below_x, below_lo, below_hi, below_n = self._x, self._y, self._y, self.size
        k = 0
        while below_n >= 2 * FACTOR:
            if k == len(self._levels):
                self._levels.append(_Level(FACTOR ** (k + 1), max(16, below_n // FACTOR * 2)))
            level = self._levels[k]
            done, complete = level.size, below_n // FACTOR
            if complete > done:
                a, b = done * FACTOR, complete * FACTOR
                level.add(below_x[a:b:FACTOR], np.fmin.reduce(below_lo[a:b].reshape(-1, FACTOR), axis=1),
                          np.fmax.reduce(below_hi[a:b].reshape(-1, FACTOR), axis=1))
            below_x, below_lo, below_hi, below_n = level.x, level.lo, level.hi, level.size
            k += 1

    def _cover(self, k: int, i0: int, i1: int, out: list, group: int = 1) -> None:
        """Pieces that cover raw points [i0, i1) exactly once: level-k bins inside, finer ones at the edges.

        ``group`` > 1 merges that many level-k bins into one (for exactly about one bin per pixel).
        """
        if i1 <= i0:
            return
        if k < 0:
            out.append((self._x[i0:i1], self._y[i0:i1]))
            return
        level = self._levels[k]
        b0 = -(-i0 // level.bin)
        b1 = min(level.size, i1 // level.bin)
        if b1 <= b0:
            self._cover(k - 1, i0, i1, out)
            return
        self._cover(k - 1, i0, b0 * level.bin, out)
        x, lo, hi = level.x[b0:b1], level.lo[b0:b1], level.hi[b0:b1]
        whole = (b1 - b0) // group * group
        if group > 1 and whole:
            x = np.concatenate((x[:whole:group], x[whole:]))
            lo = np.concatenate((np.fmin.reduce(lo[:whole].reshape(-1, group), axis=1), lo[whole:]))
            hi = np.concatenate((np.fmax.reduce(hi[:whole].reshape(-1, group), axis=1), hi[whole:]))
        out.append((np.repeat(x, 2), np.column_stack((lo, hi)).ravel()))
        self._cover(k - 1, b1 * level.bin, i1, out)

    def _level_for(self, points_per_pixel: float) -> int:
        """The coarsest level with at least one bin per pixel column (-1: the raw points)."""
        k = -1
        while k + 1 < len(self._levels) and self._levels[k + 1].bin <= points_per_pixel:
            k += 1
        return k

    def is_raw(self, pixels: int) -> bool:
        """Whether :meth:`envelope` gives the raw points (few, or x not monotonic), whatever the view."""
        return self.size <= 4 * max(1, int(pixels)) or not self.monotonic

    def envelope(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """What to draw for the view [x0, x1] on ``pixels`` columns: exact min/max per column.

        Inside the view the bins are at most one pixel wide; outside it the whole series is
        covered at about one bin per pixel of the full width, so the curve's bounds (for
        auto-range) stay exactly those of the data.  Small or non-monotonic series come back raw.
        """
        pixels = max(1, int(pixels))
        if self.is_raw(pixels):
            return self.x, self.y
        self._catch_up()
        x = self.x
        i0 = max(0, int(x.searchsorted(x0, "left")) - 1)
        i1 = min(self.size, int(x.searchsorted(x1, "right")) + 1)
        coarse = self._level_for(self.size / pixels)
        per_pixel = (i1 - i0) / pixels
        fine = self._level_for(per_pixel)
        group = max(1, int(per_pixel // self._levels[fine].bin)) if fine >= 0 else 1
        out: list = []
        self._cover(coarse, 0, i0, out)
        self._cover(fine, i0, i1, out, group)
        self._cover(coarse, i1, self.size, out)
        if len(out) == 1:
            return out[0]
        return np.concatenate([p[0] for p in out]), np.concatenate([p[1] for p in out])


def _ema_dense(values: np.ndarray, alpha: float, prev: float) -> np.ndarray:
    """EMA of a NaN-free series, ``prev`` being the value before the first: blocked closed form.

    Within a block y_i = r^(i+1)·prev + a·r^i·Σ_{j<=i} r^(-j)·v_j with r = 1 - a; blocks are
    short enough that r^(-j) stays far from overflow.
    """
    r = 1.0 - alpha
    if r <= 0.0:
        return values.copy()
    out = np.empty(len(values), dtype=np.float64)
    block = int(max(1, min(4096, 300.0 / -math.log(r))))
    powers = r ** np.arange(block + 1, dtype=np.float64)
    inverse = 1.0 / powers[:block]
    for start in range(0, len(values), block):
        v = values[start:start + block]
        m = len(v)
        y = powers[1:m + 1] * prev + alpha * powers[:m] * np.cumsum(v * inverse[:m])
        out[start:start + m] = y
        prev = y[-1]
    return out


def ema(values: np.ndarray, alpha: float, start: float | None = None) -> np.ndarray:
    """Exponential moving average (NaNs carry the previous value); ``alpha`` 1 means no smoothing.

    ``start`` is the average before the first value (None: the first value starts it).
    """
    values = np.asarray(values, dtype=np.float64)
    has_start = start is not None and start == start
    finite = ~np.isnan(values)
    dense = values[finite]
    if not len(dense):
        return np.full(len(values), start if has_start else np.nan)
    smooth = _ema_dense(dense, alpha, start if has_start else float(dense[0]))
    last = np.cumsum(finite) - 1  # index in ``smooth`` of the latest finite value at or before i
    out = smooth[np.maximum(last, 0)]
    out[last < 0] = start if has_start else np.nan
    return out


class SmoothedBuffer(SeriesBuffer):
    """A series plus its EMA, kept up to date as points arrive."""

    def __init__(self, capacity: int = 1024, alpha: float = 0.1):
        super().__init__(capacity)
        self.alpha = alpha
        self.smooth = SeriesBuffer(capacity)

    def append(self, x: float, y: float) -> None:
        super().append(x, y)
        last = self.smooth.y[-1] if len(self.smooth) else math.nan
        if y != y:  # NaN carries the previous value
            smooth = last
        else:
            smooth = y if last != last else self.alpha * y + (1 - self.alpha) * last
        self.smooth.append(x, smooth)

    def extend(self, xs, ys) -> None:
        ys = np.asarray(ys, dtype=np.float64)
        last = self.smooth.y[-1] if len(self.smooth) else None
        super().extend(xs, ys)
        self.smooth.extend(xs, ema(ys, self.alpha, last))

    def set_alpha(self, alpha: float) -> None:
        self.alpha = alpha
        self.smooth.clear()
        self.smooth.extend(self.x, ema(self.y, alpha))

    def clear(self) -> None:
        super().clear()
        self.smooth.clear()
