"""What every exported figure shares: palette and styles, the text block under the axes, an outside legend.

Split out of :mod:`ddpgui.core.outputs.figures` so that the loss figure (:mod:`ddpgui.core.outputs.curves`)
and the bar figures use one set of rules without importing each other.
"""
from __future__ import annotations

import textwrap

import numpy as np

from ..analysis.comparison import Comparison, differing_settings, grouping_settings
from ..analysis.settings import HOSTS_KEY
from ..analysis.settings import _label_part as label_part

#: Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
#: With the colours, so that curves and bars stay apart when printed in greyscale.
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HATCHES = ("", "///", "...", "\\\\\\", "xxx", "---", "ooo", "+++")
#: Markers on a curve: about this many, evenly spread (markevery), not one per point.
MARKERS_PER_CURVE = 8
#: Font size (pt) of the text block under the axes and of the tick labels; the mean width of a character (em).
FOOTER_PT = 5.5
TICK_PT = 6.0
CHAR_EM = 0.62
#: The same for tick labels (checked: neighbouring labels never overlap, tests/core/test_paper_figures.py).
TICK_EM = 0.56
SUPERSCRIPTS = ("¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹")
#: The settings named in the "all: …" line when every group shares them, in this order.
SHARED_KEYS = ("workload", "precision", "compile", "world_size", "steps", "batch_size", "optimizer", "lr", "hosts")
X_LABELS = {"step": "step", "time": "time since the first logged step (s)"}


def envelope(x: np.ndarray, y: np.ndarray, columns: int, lo: float | None = None,
             hi: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The points of a curve that decide its pixels at ``columns`` pixel columns over x in [lo, hi].

    Per column: the first, the lowest, the highest and the last point, in their order.  Each
    column's vertical extent and the segments between neighbouring columns are those of the
    full curve, so at that resolution (or any coarser one) the drawing is the same — exact,
    not sampled.  x must be non-decreasing (steps, time); otherwise the curve is returned whole.
    """
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) <= 4 * columns or (np.diff(x) < 0).any():
        return x, y
    lo = float(x[0]) if lo is None else lo
    hi = float(x[-1]) if hi is None else hi
    span = hi - lo if hi > lo else 1.0
    col = np.clip(((x - lo) / span * columns).astype(np.int64), 0, columns - 1)
    new = np.r_[True, col[1:] != col[:-1]]
    starts = np.flatnonzero(new)
    seg = np.cumsum(new) - 1
    keep = np.zeros(len(x), bool)
    keep[starts] = True
    keep[np.r_[starts[1:] - 1, len(x) - 1]] = True
    for extreme in (np.minimum.reduceat(y, starts), np.maximum.reduceat(y, starts)):
        hits = np.flatnonzero(y == extreme[seg])
        _, first = np.unique(seg[hits], return_index=True)
        keep[hits[first]] = True
    return x[keep], y[keep]


class Style:
    """Colour, line style, marker and hatch of the i-th group: all four change together."""

    def __init__(self, i: int):
        self.color = OKABE_ITO[i % len(OKABE_ITO)]
        self.linestyle = LINESTYLES[i % len(LINESTYLES)]
        self.marker = MARKERS[i % len(MARKERS)]
        self.hatch = HATCHES[i % len(HATCHES)]


class Notes:
    """The text block under a figure's axes: key of the labels, shared settings, footnotes (wrapped to the width)."""

    def __init__(self, inches: float):
        self.chars = int(inches * 72 / (FOOTER_PT * CHAR_EM)) - 2
        self.key: list[str] = []
        self.shared = ""
        self.footnotes: list[str] = []  # each with its prefix: "n/a: " for a value left out, "" for a remark

    def footnote(self, reason: str, missing: bool = True) -> str:
        """The mark of ``reason``'s footnote ("¹", "²", …), adding it when new; ``missing``: it says why a value
        is left out ("n/a: …"), else it remarks on a value drawn (from a run that never settled, say)."""
        text = ("n/a: " if missing else "") + (reason or "no value")
        if text not in self.footnotes:
            self.footnotes.append(text)
        return SUPERSCRIPTS[self.footnotes.index(text) % len(SUPERSCRIPTS)]

    def lines(self, caption: str) -> list[str]:
        parts = list(self.key)
        parts += [self.shared] if self.shared else []
        parts += [f"{SUPERSCRIPTS[i % len(SUPERSCRIPTS)]} {r}" for i, r in enumerate(self.footnotes)]
        parts += [caption] if caption else []
        return [line for part in parts for line in textwrap.wrap(part, self.chars, subsequent_indent="   ") or [""]]


def shared_settings(comparison: Comparison) -> str:
    """The settings every compared group has in common, as a line ("all: workload=mlp fp32 1× @local")."""
    rows = [grouping_settings(g) for g in comparison.groups]
    varying = set(differing_settings(comparison.groups))
    parts = []
    for k in SHARED_KEYS:
        if k in varying or k not in rows[0]:
            continue
        value = rows[0][k]
        if value is None or value == [] or value == "":
            continue
        key = HOSTS_KEY if k == "hosts" else k
        parts.append(label_part(key, value))
    return ("all: " + " ".join(parts)) if parts else ""


#: Legend entries that still fit beside the curves on the right; more go above the axes.
LEGEND_RIGHT_MAX = 4
LEGEND_PT = 6.0


def outside_legend(ax) -> None:
    """The legend outside the axes, never over the data: on the right of a wide figure with few short
    entries, else above the axes in as many columns as the width holds."""
    fig = ax.figure
    handles, labels = ax.get_legend_handles_labels()
    inches = fig.get_figwidth()
    longest = max(len(label) for label in labels) if labels else 1
    if len(labels) <= LEGEND_RIGHT_MAX and inches >= 5 and longest <= 30:
        fig.legend(handles, labels, frameon=False, loc="outside right upper")
        return
    fits = int(inches * 72 / (LEGEND_PT * CHAR_EM)) // (longest + 6)
    fig.legend(handles, labels, frameon=False, loc="outside upper center", ncols=max(1, min(len(labels), fits)))
