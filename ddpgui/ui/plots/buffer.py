"""Growing float64 buffers for live curves: amortized O(1) append, every point kept."""
from __future__ import annotations

import math

import numpy as np


class SeriesBuffer:
    """x/y columns that double their capacity when full (never re-allocated per point)."""

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self.size = 0

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
        self._x[self.size] = x
        self._y[self.size] = y
        self.size += 1

    def extend(self, xs, ys) -> None:
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        self._reserve(len(xs))
        self._x[self.size:self.size + len(xs)] = xs
        self._y[self.size:self.size + len(ys)] = ys
        self.size += len(xs)

    def clear(self) -> None:
        self.size = 0

    @property
    def x(self) -> np.ndarray:
        return self._x[:self.size]

    @property
    def y(self) -> np.ndarray:
        return self._y[:self.size]


def ema(values: np.ndarray, alpha: float, start: float | None = None) -> np.ndarray:
    """Exponential moving average (NaNs carry the previous value); ``alpha`` 1 means no smoothing."""
    out = np.empty(len(values), dtype=np.float64)
    acc = start if start is not None and start == start else None
    for i, v in enumerate(values.tolist()):
        if v == v:
            acc = v if acc is None else alpha * v + (1 - alpha) * acc
        out[i] = np.nan if acc is None else acc
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
