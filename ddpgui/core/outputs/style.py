"""What every exported figure shares: palette and styles, the text block under the axes, an outside legend.

Split out of :mod:`ddpgui.core.outputs.figures` so that the loss figure (:mod:`ddpgui.core.outputs.curves`)
and the bar figures use one set of rules without importing each other.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

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


def group_key(i: int) -> str:
    """The short key of the i-th group: A, B, …, Z, AA, AB, …"""
    return chr(65 + i) if i < 26 else group_key(i // 26 - 1) + chr(65 + i % 26)


def estimate_width(text: str, points: float = FOOTER_PT) -> float:
    """A text's width in inches from its length (``CHAR_EM`` per character): used only before a renderer is at
    hand; every figure measures its text with matplotlib's renderer (:func:`text_measure`)."""
    return len(text) * points * CHAR_EM / 72


def text_measure(fig, points: float) -> Callable[[str], float]:
    """str → its width in inches at ``points`` in the figure's font, as the figure's renderer draws it."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    prop = FontProperties(size=points)
    cache: dict[str, float] = {}

    def measure(text: str) -> float:
        if text not in cache:
            width = max((renderer.get_text_width_height_descent(line, prop, ismath=False)[0]
                         for line in text.split("\n")), default=0.0)
            cache[text] = width / fig.dpi
        return cache[text]

    return measure


def label_tokens(label: str) -> list[str]:
    """A setting label's parts ("compile=default", "bf16", "2×", "@This computer"): the places where it may be
    broken.  A host part ("@…") keeps the words after it that are no setting of their own (a host's name
    may have spaces); every other part is one word."""
    tokens: list[str] = []
    for word in label.split(" "):
        if tokens and tokens[-1].startswith("@") and word and not word.startswith("@") and "=" not in word \
                and not word.endswith("×") and not re.fullmatch(r"(fp|bf|tf)\d+", word):
            tokens[-1] += " " + word
        elif word:
            tokens.append(word)
    return tokens


def wrap_tokens(tokens: Sequence[str], width: float, measure: Callable[[str], float], sep: str = " ",
                indent: str = "") -> list[str]:
    """Greedy lines of ``tokens`` joined by ``sep``, each at most ``width`` inches as ``measure`` says, broken only
    between tokens; a token wider than a line alone is broken between its words, a word wider still by
    characters.  Lines after the first start with ``indent``."""
    lines: list[str] = []
    line = ""
    for token in tokens:
        head = line + sep if line else (indent if lines else "")
        if measure(head + token) <= width:
            line = head + token
            continue
        if line:
            lines.append(line)
            line = ""
        start = indent if lines else ""
        if measure(start + token) <= width:
            line = start + token
            continue
        words = token.split(" ")
        if len(words) > 1:  # a token too wide alone: its words are tokens
            parts = wrap_tokens(words, width, measure, " ", indent)
        else:
            parts, piece = [], start
            for ch in token:
                if piece.strip() and measure(piece + ch) > width:
                    parts.append(piece)
                    piece = indent
                piece += ch
            parts.append(piece)
        if parts and lines and not parts[0].startswith(indent):
            parts[0] = indent + parts[0]
        lines += parts[:-1]
        line = parts[-1] if parts else ""
    if line:
        lines.append(line)
    return lines


class Notes:
    """The text block under a figure's axes, laid out as lines: the key of the labels, the shared settings,
    remarks (the interval rule, the smoothing), footnotes (each "¹ n/a: …"; "*" for a value from a run that
    never settled) and the caption.  Each part is broken only between its tokens (:func:`wrap_tokens`), at
    the width the figure's renderer measures (``measure``)."""

    def __init__(self, inches: float, measure: Callable[[str], float] | None = None):
        self.width = inches * 0.96  # the block starts at 2% of the width and keeps 2% free on the right
        self.measure = measure or estimate_width
        self.key: list[str] = []
        self.shared: list[str] = []  # tokens after "all:"
        self.remarks: list[str] = []
        self.footnotes: list[str] = []  # each with its prefix: "n/a: " for a value left out, "" for a remark
        self.star = ""  # what "*" says: the note of a value from a run that never settled

    def footnote(self, reason: str, missing: bool = True) -> str:
        """The mark of ``reason``'s note: "*" for a value drawn from a run that never settled (``missing`` False),
        else "¹", "²", … of a footnote saying why a value is left out ("n/a: …"), added when new."""
        if not missing:
            if reason not in self.star.split("; "):
                self.star = "; ".join(filter(None, [self.star, reason]))
            return "*"
        text = "n/a: " + (reason or "no value")
        if text not in self.footnotes:
            self.footnotes.append(text)
        return SUPERSCRIPTS[self.footnotes.index(text) % len(SUPERSCRIPTS)]

    def remark(self, text: str) -> None:
        if text and text not in self.remarks:
            self.remarks.append(text)

    def lines(self, caption: Sequence[str] | str = ()) -> list[str]:
        """The block's lines; ``caption``: the environment lines (each a "·"-separated list), or one string."""
        wrap, prose = self._wrap, lambda text, indent="   ": self._wrap(text.split(" "), " ", indent)
        out: list[str] = []
        for entry in self.key:  # "A: compile=default bf16 2× (n=3)": broken between the label's parts
            head, _, rest = entry.partition(": ")
            out += wrap([f"{head}:", *label_tokens(rest)], " ", "   ")
        if self.shared:
            out += wrap(["all:", *self.shared], " ", "   ")
        for text in self.remarks:
            out += prose(text)
        for i, text in enumerate(self.footnotes):
            out += prose(f"{SUPERSCRIPTS[i % len(SUPERSCRIPTS)]} {text}")
        if self.star:
            out += prose(f"* from a run that never settled: {self.star}")
        for line in [caption] if isinstance(caption, str) else caption:
            if line:
                out += wrap(line.split(" · "), " · ", "   ")
        return out

    def _wrap(self, tokens: Sequence[str], sep: str, indent: str) -> list[str]:
        return wrap_tokens([t for t in tokens if t], self.width, self.measure, sep, indent)


def shared_parts(comparison: Comparison) -> list[str]:
    """The settings every compared group has in common, one part each ("workload=mlp", "fp32", "1×", "@local")."""
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
    return parts


def shared_settings(comparison: Comparison) -> str:
    """The settings every compared group has in common, as a line ("all: workload=mlp fp32 1× @local")."""
    parts = shared_parts(comparison)
    return ("all: " + " ".join(parts)) if parts else ""


#: Legend entries that still fit beside the curves on the right; more go above the axes.
LEGEND_RIGHT_MAX = 4
LEGEND_PT = 6.0


def _legend_entry_width(measure: Callable[[str], float], label: str) -> float:
    """Inches one legend entry takes: its handle (2 em), the pad (0.8 em), the text and the column gap (2 em)."""
    return measure(label) + 4.8 * LEGEND_PT / 72


def outside_legend(ax, notes: Notes | None = None) -> None:
    """The legend outside the axes, never over the data: on the right of a wide figure with few short
    entries, else above the axes in as many columns as the measured entries fit.  An entry wider than the
    figure is named by its key (A, B, …) with the key in ``notes``."""
    fig = ax.figure
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    inches = fig.get_figwidth()
    measure = text_measure(fig, LEGEND_PT)
    widest = max(_legend_entry_width(measure, label) for label in labels)
    if len(labels) <= LEGEND_RIGHT_MAX and inches >= 5 and widest <= 0.3 * inches:
        fig.legend(handles, labels, frameon=False, loc="outside right upper")
        return
    room = inches * 0.96
    if widest > room and notes is not None:
        keys = [group_key(i) for i in range(len(labels))]
        notes.key += [f"{k}: {label}" for k, label in zip(keys, labels)]
        labels = keys
        widest = max(_legend_entry_width(measure, label) for label in labels)
    columns = max(1, min(len(labels), int(room // widest)))
    rows = -(-len(labels) // columns)
    columns = -(-len(labels) // rows)  # as few columns as that many rows need: the rows stay full
    fig.legend(handles, labels, frameon=False, loc="outside upper center", ncols=columns)
