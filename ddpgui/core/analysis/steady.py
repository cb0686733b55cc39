"""The steady-state rule: where a run's throughput has settled, past warm-up and compilation."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SteadyRule:
    """The stability test of docs/ANALYSIS.md, applied after the runner's warm-up and compile events.

    Over the m intervals left: window ``w = clamp(round(m · window_fraction), min_window,
    max_window)`` (at most m); the final level M is the median of the last
    ``max(w, ceil(m · final_fraction))`` values; the noise σ is estimated from successive
    differences, σ = 1.4826 · MAD(diff(x)) / √2 (a trend does not inflate it); a rolling
    median is *settled* when it is within δ = max(tolerance · |M|, noise_z · 1.2533 · σ · √(1/w + 1/f))
    of M, f being the size of M's block (1.2533 σ / √k: the standard error of a median of k
    values; noise_z = 3 keeps chance deviations rare across the many windows).  The steady state
    starts right after the last unsettled window, at the first value itself within δ of M; a steady part shorter than
    ``min_fraction`` of the m intervals means the run never settled: no steady state.
    """

    tolerance: float = 0.05
    window_fraction: float = 0.1
    min_window: int = 3
    max_window: int = 50
    final_fraction: float = 0.25
    noise_z: float = 3.0
    min_fraction: float = 0.2

    def window(self, m: int) -> int:
        return min(m, max(self.min_window, min(self.max_window, round(m * self.window_fraction))))


DEFAULT_RULE = SteadyRule()


def _rolling_medians(x: np.ndarray, w: int) -> np.ndarray:
    return np.median(np.lib.stride_tricks.sliding_window_view(x, w), axis=1)


def noise_sigma(values: np.ndarray) -> float:
    """σ from successive differences: 1.4826 · median(|d − median(d)|) / √2 with d = diff(values)."""
    if len(values) < 3:
        return 0.0
    d = np.diff(values)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def steady_start(values: np.ndarray, rule: SteadyRule = DEFAULT_RULE) -> tuple[int | None, str]:
    """Index of the first steady value of ``values`` (already past warm-up and compile), or None and why."""
    m = len(values)
    if m == 0:
        return None, "no intervals after warm-up and compile"
    w = rule.window(m)
    block = max(w, math.ceil(m * rule.final_fraction))
    final = float(np.median(values[-block:]))
    spread = rule.noise_z * 1.2533 * noise_sigma(values) * math.sqrt(1.0 / w + 1.0 / block)
    band = max(rule.tolerance * abs(final), spread)
    off = np.flatnonzero(np.abs(_rolling_medians(values, w) - final) > band)
    start = int(off[-1]) + 1 if len(off) else 0
    while start < m and abs(values[start] - final) > band:  # a transitional value the last window's median hid
        start += 1
    if m - start < rule.min_fraction * m:
        return None, (f"throughput never settled: only the last {m - start} of {m} intervals stay within "
                      f"±{band:.4g} of the final median {final:.4g} (needs {rule.min_fraction:.0%})")
    return start, ""


def events_cut_step(events: Sequence[dict]) -> float:
    """The last step that warm-up or compilation touched, by the runner's events (0 when none)."""
    cut = 0.0
    for event in events:
        if event.get("event") == "warmup_done" and isinstance(event.get("step"), (int, float)):
            cut = max(cut, float(event["step"]))
        elif event.get("event") == "compile_end":
            cut = max(cut, 1.0)  # the first step traces and compiles the model
    return cut


#: The start of a "never settled" reason (:func:`steady_start`): a run that may fall back on what it has.
NEVER_SETTLED = "throughput never settled"
#: Every interval after warm-up and compile counts (the fallback of a run that never settled).
WHOLE_RUN_RULE = SteadyRule(tolerance=math.inf, min_fraction=0.0)
#: The fewest intervals after warm-up that a run that never settled needs for the fallback.
FALLBACK_MIN_INTERVALS = 10


def fallback_note(n: int, reason: str) -> str:
    """The note of a throughput over all ``n`` intervals after warm-up of a run that never settled
    (a stopped or short run): what it is from, then why it is not a steady state."""
    why = reason[len(NEVER_SETTLED):].lstrip(": ") if reason.startswith(NEVER_SETTLED) else reason
    return f"from {n} intervals after warm-up, not settled" + (f" ({why})" if why else "")


def is_fallback(reason: str) -> bool:
    """Whether an estimate's note is a :func:`fallback_note` (a value from a run that never settled)."""
    return reason.startswith("from ") and "intervals after warm-up, not settled" in reason
