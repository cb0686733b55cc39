"""Figures for papers: loss curves, throughput, peak memory, speedup and scaling, as PDF/SVG/PNG.

Intended use (through :mod:`ddpgui.core.outputs.export`, by ``ddpgui compare`` and the app's export button)::

    comparison = analysis.compare([analysis.run_stats(store, r) for r in run_ids], baseline=run_ids[0])
    written = figures.write_figures(comparison, store, out_dir, formats=("pdf", "svg", "png"), width="single")
    written.paths, written.skipped          # files, and figure → why it was not drawn

matplotlib is imported on first use (the app starts without it) and only through its
object API with the Agg canvas: no pyplot state, no GUI backend, safe off the Qt thread.
Rules (fonts, palette, sizes, decimation) are in docs/ANALYSIS.md, "Figures".
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..analysis.comparison import Comparison, GroupStats, family_key
from ..analysis.curves import SMOOTHING
from ..analysis.stats import MIN_N, Estimate, Ratio
from ..store import RunStore
from .files import output_file, output_folder
from .style import (
    FOOTER_PT,
    TICK_PT,
    Notes,
    Style,
    group_key,
    label_tokens,
    outside_legend,
    shared_parts,
    text_measure,
    wrap_tokens,
)

# re-exported: the Compare tab and the tests name them through this module
from .style import HATCHES as HATCHES
from .style import LINESTYLES as LINESTYLES
from .style import MARKERS as MARKERS
from .style import OKABE_ITO as OKABE_ITO
from .style import X_LABELS as X_LABELS
from .style import envelope as envelope

FORMATS = ("pdf", "svg", "png")
FIGURES = ("loss", "throughput", "memory", "speedup", "scaling")
#: Figure widths in inches: a single and a double column of a two-column paper.
WIDTHS = {"single": 3.5, "double": 7.0}
#: The lowest PNG resolution an export accepts (dots per inch).
MIN_DPI = 72
#: Height / width of every figure.
ASPECT = 0.68

#: Text stays text in SVG ('none'): the labels are searchable, selectable and editable in
#: Inkscape/Illustrator and the file is small; the viewer supplies the font (we ask for
#: DejaVu Sans, then common sans-serif fonts).  PDF embeds TrueType (Type 42), never Type 3.
RC = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none",
      "font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "Liberation Sans"],
      "font.size": 7.0, "axes.titlesize": 7.5, "axes.labelsize": 7.0, "legend.fontsize": 6.0,
      "xtick.labelsize": 6.0, "ytick.labelsize": 6.0, "lines.linewidth": 1.0, "axes.linewidth": 0.6,
      "path.simplify": True, "path.simplify_threshold": 0.5, "agg.path.chunksize": 20000,
      "svg.hashsalt": "ddpgui", "pdf.compression": 6}


@dataclass
class Exported:
    """What an export wrote (``paths``) and what it left out (name → reason)."""

    paths: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def extend(self, other: Exported) -> Exported:
        self.paths += other.paths
        self.skipped.update(other.skipped)
        return self


def caption_lines(comparison: Comparison) -> list[str]:
    """The environment lines, one per distinct environment: GPU (or CPU) model, driver, CUDA and torch, its
    parts separated by " · " (a figure breaks a line only there)."""
    return [line for line in dict.fromkeys(_env_line(r.environment) for r in comparison.runs) if line]


def caption_text(comparison: Comparison) -> str:
    """The environment lines as one line (file metadata, the LaTeX table's comment)."""
    return "; ".join(caption_lines(comparison))


def _env_line(env: dict) -> str:
    if not env:
        return ""
    parts = []
    if env.get("gpu"):
        count = env.get("gpu_count") or 1
        parts.append(f"GPU {count}× {env['gpu']}" if count > 1 else f"GPU {env['gpu']}")
        parts += [f"driver {env['driver']}"] if env.get("driver") else []
        parts += [f"CUDA {env['cuda']}"] if env.get("cuda") else []
    elif env.get("cpu"):
        parts.append(f"CPU {env['cpu']}" + (f" ({env['cpu_count']} cores)" if env.get("cpu_count") else ""))
    parts += [f"torch {env['torch']}"] if env.get("torch") else []
    return " · ".join(parts)


def _metadata(fmt: str, title: str, caption: str) -> dict:
    """File metadata: PDF Subject/Keywords, SVG Dublin Core description/keywords, PNG tEXt chunks."""
    keywords = [part.strip() for part in caption.replace(";", "·").split("·") if part.strip()]
    if fmt == "pdf":
        return {"Title": title, "Subject": caption, "Keywords": ", ".join(keywords), "Creator": "ddpgui"}
    if fmt == "svg":
        return {"Title": title, "Description": caption, "Keywords": keywords, "Creator": "ddpgui"}
    return {"Title": title, "Description": caption, "Software": "ddpgui"}


def run_labels(comparison: Comparison) -> dict[str, str]:
    """Run id → its group's label, with "#k" after it when the group holds repeats."""
    out = {}
    for g in comparison.groups:
        for k, r in enumerate(g.runs):
            out[r.run_id] = g.label if g.n == 1 else f"{g.label} #{k + 1}"
    return out


def write_figures(comparison: Comparison, store: RunStore, out_dir: str | Path, formats: Iterable[str] = FORMATS,
                  width: str = "single", x: str = "step", dpi: int = 300, caption: bool = True,
                  figures: Sequence[str] = FIGURES, individual: bool = True,
                  smoothing: float = SMOOTHING) -> Exported:
    """Draw each figure once and save it in each format as ``<figure>.<fmt>`` in ``out_dir``.

    Under the axes, one text block: the key of long group labels, the settings all groups share,
    remarks (interval rule, smoothing), footnotes of the groups without a value, "*" of values from runs
    that never settled, and (``caption``) the environment lines.  The figure is ``width`` wide and grows in
    height only for that block's lines beyond two.  ``individual``: the loss figure draws each run faintly
    under its group's centre (always for groups of fewer than 3 repeats); ``smoothing``: the loss curves'
    EMA weight (0: raw).
    """
    formats = list(formats)
    for given, allowed, what in ((formats, FORMATS, "format"), (figures, FIGURES, "figure")):
        unknown = [g for g in given if g not in allowed]
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(unknown)}: choose from {', '.join(allowed)}")
    if width not in WIDTHS:
        raise ValueError(f"width must be one of {', '.join(WIDTHS)}, got {width!r}")
    if x not in X_LABELS:
        raise ValueError(f"x must be one of {', '.join(X_LABELS)}, got {x!r}")
    if dpi < MIN_DPI:
        raise ValueError(f"dpi must be at least {MIN_DPI}, got {dpi}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    result = Exported()
    if not formats:
        return result
    import matplotlib

    out = output_folder(out_dir)
    text = caption_text(comparison)
    with matplotlib.rc_context(RC):
        for name in figures:
            fig, why = draw_figure(comparison, store, name, width, x, dpi, caption, individual, smoothing)
            if fig is None:
                result.skipped[name] = why
                continue
            title = f"{fig.axes[0].get_title() or name} ({comparison.baseline_group.label} baseline)"
            fig.set_layout_engine("none")  # laid out (and checked) by draw_figure: every format keeps it
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                with output_file(path, "wb") as fh:
                    fig.savefig(fh, format=fmt, dpi=dpi, metadata=_metadata(fmt, title, text))
                result.paths.append(path)
    return result


def draw_figure(comparison: Comparison, store: RunStore, name: str, width: str = "single", x: str = "step",
                dpi: int = 300, caption: bool = True, individual: bool = True, smoothing: float = SMOOTHING):
    """One figure drawn and laid out (not saved): (the matplotlib Figure, "") or (None, why it cannot be drawn).

    Call it inside ``matplotlib.rc_context(RC)`` (as :func:`write_figures` does) for the paper fonts.
    The layout is measured with the renderer: bar labels that would collide become keys, then turn.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .curves import draw_loss

    inches = WIDTHS[width]
    drawers = {"loss": lambda ax, notes: draw_loss(ax, comparison, store, x, int(inches * dpi), notes, individual,
                                                   smoothing),
               "throughput": lambda ax, notes: _throughput(ax, comparison, notes),
               "memory": lambda ax, notes: _memory(ax, comparison, notes),
               "speedup": lambda ax, notes: _speedup(ax, comparison, notes),
               "scaling": lambda ax, notes: _scaling(ax, comparison, notes)}
    fig = Figure(figsize=(inches, inches * ASPECT), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    notes = Notes(inches, text_measure(fig, FOOTER_PT))
    why = drawers[name](ax, notes)
    if why:
        return None, why
    _plain_ticks(ax)
    lines = caption_lines(comparison) if caption else []
    _footer(fig, notes, lines)
    ticks = getattr(ax, "ddpgui_ticks", None)
    if ticks is not None:  # bars: measure the laid-out labels; key them, then turn them, until none collide
        for step in ("keyed", "turned"):
            fig.draw_without_rendering()
            if not _ticks_collide(ax):
                break
            ticks.apply(ax, notes, step)
            _footer(fig, notes, lines)
    fig.draw_without_rendering()
    return fig, ""


def _footer(fig, notes: Notes, caption: list[str]) -> None:
    """The text block under the axes; the figure grows by its lines beyond two."""
    inches = fig.get_figwidth()
    footer = notes.lines(caption)
    height = inches * ASPECT + max(0, len(footer) - 2) * FOOTER_PT * 1.25 / 72
    if footer:
        fig.supxlabel("\n".join(footer), fontsize=FOOTER_PT, color="#444444", ha="left", x=0.02, linespacing=1.25)
    fig.set_size_inches(inches, height)


def _ticks_collide(ax) -> bool:
    """Whether neighbouring tick labels overlap (with a 1 pt gap) or one leaves the figure, as laid out."""
    renderer = ax.figure.canvas.get_renderer()
    gap = ax.figure.dpi / 72
    boxes = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()), key=lambda b: b.x0)
    inside = all(b.x0 >= 0 and b.x1 <= ax.figure.bbox.x1 for b in boxes)
    return not inside or any(left.x1 + gap > right.x0 for left, right in zip(boxes, boxes[1:]))


def _plain_ticks(ax) -> None:
    """No offset ("+1e3") and no multiplier ("×10⁻³") on a linear axis: ticks read as the values."""
    from matplotlib.ticker import ScalarFormatter

    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if isinstance(formatter, ScalarFormatter):
            formatter.set_useOffset(False)
            formatter.set_scientific(False)


class BarTicks:
    """The bars' tick labels: each group's label broken between its parts to the measured width of its bar
    (at most two lines) over its count ("n=3", "n=1 of 2¹", "n=2*"); else keys A, B, … (the key under the
    axes); else the keys turned upright."""

    def __init__(self, groups: list[GroupStats], counts: list[str]):
        self.groups, self.counts = groups, counts

    def apply(self, ax, notes: Notes, step: str = "") -> None:
        fig = ax.figure
        measure = text_measure(fig, TICK_PT)
        slot = (fig.get_figwidth() - 0.6) / max(1, len(self.groups)) - 4 / 72  # the bar's share, less a gap
        wrapped = [wrap_tokens(label_tokens(g.label), slot, measure) for g in self.groups]
        keyed = step in ("keyed", "turned") or any(len(w) > 2 or any(measure(line) > slot for line in w)
                                                     for w in wrapped)
        if keyed:
            notes.key = [f"{group_key(i)}: {g.label} (n={g.n})" for i, g in enumerate(self.groups)]
            texts = [f"{group_key(i)}\n{c}" for i, c in enumerate(self.counts)]
        else:
            texts = ["\n".join(w + [c]) for w, c in zip(wrapped, self.counts)]
        ax.set_xticks(np.arange(len(self.groups)), texts, rotation=90 if step == "turned" else 0)
        self.keyed = keyed


def bars_bottom(values: Sequence[float | None], errors: Sequence[tuple[float, float] | None]) -> float:
    """Where a bar axis starts: 0, or below it (by 5% of the span) when an interval's lower end is negative:
    the whole interval is shown, never cut at zero."""
    lows = [v - e[0] for v, e in zip(values, errors) if v is not None and e is not None]
    low = min([0.0] + lows)
    if low >= 0:
        return 0.0
    highs = [v + (e[1] if e is not None else 0.0) for v, e in zip(values, errors) if v is not None]
    return low - 0.05 * (max([0.0] + highs) - low)


def estimate_error(e: Estimate, scale: float = 1.0) -> tuple[float, float] | None:
    """(below, above) distances from an estimate's centre to the ends of its interval; None without one."""
    if e.mean is None or not e.has_interval:
        return None
    return ((e.mean - e.low) * scale, (e.high - e.mean) * scale)


def ratio_error(r: Ratio) -> tuple[float, float] | None:
    """(below, above) distances from a ratio to the ends of its interval (error bars); None without one."""
    if r.value is None or not r.has_interval:
        return None
    return (r.value - r.low, r.high - r.value)


def settle_note(reason: str) -> str:
    """The part of a value's note that says it comes from a run that never settled ("" when none does)."""
    parts = [p for p in reason.split("; no interval:")[0:1] if "not settled" in p]
    return parts[0].removeprefix("not settled: ") if parts else ""


def interval_words(items: Sequence[Estimate | Ratio], centre: str = "") -> str:
    """What a figure's error bars and dots are, for its title: "geometric mean, 95% CI", "… dots: repeats"."""
    shown = [e for e in items if (e.mean if isinstance(e, Estimate) else e.value) is not None]
    words = [centre] if centre else []
    if any(e.has_interval for e in shown):
        words.append("95% CI" if all(e.has_interval for e in shown) else f"95% CI where n ≥ {MIN_N}")
    if any(e.range is not None and not e.has_interval for e in shown):
        words.append("dots: repeats")
    return ", ".join(words)


def _remarks(notes: Notes, items: Sequence[Estimate | Ratio], ratios: bool = False) -> None:
    """The interval rule under the axes: what the interval is, and that fewer than 3 repeats get none."""
    shown = [e for e in items if (e.mean if isinstance(e, Estimate) else e.value) is not None]
    if any(e.method == "log-t" for e in shown):
        notes.remark("Ratio of geometric means; 95% CI on the log scale (Welch), never below 0." if ratios else
                     "Geometric mean of the repeats; 95% CI: t-interval of their logarithms, back-transformed "
                     "(asymmetric, never below 0).")
    if any(not e.has_interval for e in shown if e.method != "" or not ratios):
        notes.remark(f"An interval needs ≥ {MIN_N} repeats: "
                     + ("with fewer, the dots are each repeat's ratio to each baseline repeat."
                        if ratios else "with fewer, the dots are the repeats and the line their range."))


def _bars(ax, comparison: Comparison, values: list[float | None], errors: list, reasons: list[str], ylabel: str,
          title: str, notes: Notes, counts: list[int] | None = None, dots: Sequence[Sequence[float]] = ()) -> str:
    """Bars with error bars and each repeat as a dot (``dots``; a line over their range where there is no
    interval); a group without a value gets "n/a" with a footnote mark at the axis, one whose value counts
    fewer runs (``counts``) than it has says "n=1 of 2¹", one from a run that never settled "n=2*"."""
    groups = comparison.groups
    counts = counts or [g.n for g in groups]
    if all(v is None for v in values):
        return ""
    notes.shared = shared_parts(comparison)
    pos = np.arange(len(groups))
    for i, (v, e) in enumerate(zip(values, errors)):
        if v is None:
            ax.text(pos[i], 0.02, "n/a" + notes.footnote(reasons[i]), transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=TICK_PT, color="#444444")
            continue
        style = Style(i)
        ax.bar(pos[i], v, color=style.color, hatch=style.hatch, edgecolor="black", linewidth=0.5,
               yerr=None if e is None else np.array(e, float).reshape(2, 1), capsize=2.5,
               error_kw={"elinewidth": 0.7, "capthick": 0.7})
        points = list(dots[i]) if i < len(dots) else []
        if len(points) >= 2:
            if e is None:  # no interval: the range of the repeats, as a plain line (no caps)
                ax.vlines(pos[i], min(points), max(points), color="black", linewidth=0.7, zorder=3)
            ax.plot(pos[i] + np.linspace(-0.12, 0.12, len(points)), points, linestyle="none", marker="o",
                    markersize=2.2, markerfacecolor="white", markeredgecolor="black", markeredgewidth=0.5, zorder=4)
    marks = []
    for i, (v, why) in enumerate(zip(values, reasons)):
        mark = f"n={groups[i].n}"
        if v is not None and why and counts[i] != groups[i].n:  # a value over fewer runs than the group has
            mark = f"n={counts[i]} of {groups[i].n}{notes.footnote(why)}"
        if v is not None and settle_note(why):  # from a stopped or short run that never settled: said so
            mark += notes.footnote(settle_note(why), missing=False)
        marks.append(mark)
    ticks = BarTicks(groups, marks)
    ticks.apply(ax, notes)
    ax.ddpgui_ticks = ticks
    ax.set_xlim(-0.6, len(groups) - 0.4)
    bottom = bars_bottom(values, errors)
    ax.set_ylim(bottom=bottom)
    if bottom < 0:
        ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_ylabel(ylabel)
    _title(ax, title)
    return "keyed" if ticks.keyed else "drawn"


def _title(ax, title: str) -> None:
    """The title broken between words at the measured width of the axes' figure (less the y axis)."""
    measure = text_measure(ax.figure, 7.5)
    ax.set_title("\n".join(wrap_tokens(title.split(" "), ax.figure.get_figwidth() - 0.7, measure)))


def _estimate_bars(ax, comparison: Comparison, metric: str, ylabel: str, title: str, notes: Notes,
                   scale: float = 1.0) -> str:
    estimates = [g.metrics[metric] for g in comparison.groups]
    values = [None if e.mean is None else e.mean * scale for e in estimates]
    errors = [estimate_error(e, scale) for e in estimates]
    counts = [e.n if e.over == "repeats" else g.n for e, g in zip(estimates, comparison.groups)]
    dots = [[v * scale for v in e.values] for e in estimates]
    centres = {e.centre for e in estimates if e.mean is not None and e.n > 1}
    words = interval_words(estimates, centres.pop() if len(centres) == 1 else "")
    drawn = _bars(ax, comparison, values, errors, [e.reason for e in estimates], ylabel,
                  f"{title} ({words})" if words else title, notes, counts, dots)
    if not drawn:
        return "; ".join(sorted({e.reason for e in estimates if e.reason})) or f"no {metric}"
    _remarks(notes, estimates)
    return ""


def _throughput(ax, comparison: Comparison, notes: Notes) -> str:
    unit = comparison.groups[0].runs[0].throughput_unit
    means = [g.metrics["throughput"].mean for g in comparison.groups]
    big = max((m for m in means if m is not None), default=0.0) >= 1e5
    return _estimate_bars(ax, comparison, "throughput", f"{'thousand ' if big else ''}{unit}",
                          "steady throughput", notes, 1e-3 if big else 1.0)


def memory_unit(values_gib: Iterable[float | None]) -> tuple[str, float]:
    """GiB, or MiB when every value is below 1 GiB: the unit and the factor from GiB."""
    known = [v for v in values_gib if v is not None]
    return ("MiB", 1024.0) if known and max(known) < 1.0 else ("GiB", 1.0)


def _memory(ax, comparison: Comparison, notes: Notes) -> str:
    unit, scale = memory_unit(g.metrics["mem_peak_gib"].mean for g in comparison.groups)
    return _estimate_bars(ax, comparison, "mem_peak_gib", f"peak memory ({unit})", "peak memory", notes, scale)


def _speedup(ax, comparison: Comparison, notes: Notes) -> str:
    groups = comparison.groups
    if len(groups) < 2:
        return "one setting only: nothing to compare with the baseline"
    ratios = [comparison.speedup[g.key] for g in groups]
    base = next(i for i, g in enumerate(groups) if g.key == comparison.baseline)
    others = [r for g, r in zip(groups, ratios) if g.key != comparison.baseline]
    words = interval_words(others)
    errors = [None if g.key == comparison.baseline else ratio_error(r) for g, r in zip(groups, ratios)]
    drawn = _bars(ax, comparison, [r.value for r in ratios], errors,
                  [r.reason for r in ratios], "speedup (×)", "speedup", notes, dots=[r.values for r in ratios])
    if not drawn:
        return "; ".join(sorted({r.reason for r in ratios if r.reason})) or "no throughput"
    name = group_key(base) if drawn == "keyed" else groups[base].label
    _title(ax, f"speedup vs {name}" + (f" ({words})" if words else ""))
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    _remarks(notes, others, ratios=True)
    return ""


def _scaling(ax, comparison: Comparison, notes: Notes) -> str:
    families: dict[str, list[GroupStats]] = {}
    for g in comparison.groups:
        if comparison.scaling[g.key].value is not None:
            families.setdefault(family_key(g), []).append(g)
    families = {k: v for k, v in families.items() if len(v) >= 2}
    if not families:
        reasons = {r.reason for r in comparison.scaling.values() if r.reason}
        return "needs a 1-process run and an N-process run with otherwise the same settings" + (
            f" ({'; '.join(sorted(reasons))})" if reasons else "")
    shown = []
    for i, members in enumerate(families.values()):
        style = Style(i)
        members.sort(key=lambda g: g.world_size)
        n = np.array([g.world_size for g in members], float)
        est = [g.metrics["throughput"] for g in members]
        shown += est
        one = next(e for g, e in zip(members, est) if g.world_size == 1)
        errors = [estimate_error(e) or (0.0, 0.0) for e in est]
        unsettled = [settle_note(e.reason) for e in est if settle_note(e.reason)]
        label = _family_label(members) + (notes.footnote(unsettled[0], missing=False) if unsettled else "")
        ax.errorbar(n, [e.mean for e in est], yerr=np.array(errors, float).T, color=style.color,
                    linestyle=style.linestyle, marker=style.marker, markersize=3.5, capsize=2.5, label=label)
        for size, e in zip(n, est):
            if len(e.values) >= 2:
                ax.plot(np.full(len(e.values), size), e.values, linestyle="none", marker="o", markersize=2.2,
                        markerfacecolor="white", markeredgecolor=style.color, markeredgewidth=0.5, zorder=4)
        ax.plot(n, n * one.mean, color="black" if len(families) == 1 else style.color, linestyle=(0, (1, 1)),
                linewidth=0.8, label="ideal (N × 1-process)" if i == 0 else None)
    sizes = sorted({g.world_size for members in families.values() for g in members})
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_ylim(bottom=0)
    unit = comparison.groups[0].runs[0].throughput_unit
    ax.set_xlabel("processes (GPUs)")
    ax.set_ylabel(unit)
    words = interval_words(shown)
    _title(ax, "scaling: steady throughput" + (f" ({words})" if words else ""))
    ax.set_xlim(min(sizes) - 0.3 * (max(sizes) - min(sizes)), max(sizes) + 0.3 * (max(sizes) - min(sizes)))
    notes.shared = shared_parts(comparison)
    _remarks(notes, shown)
    # outside the axes (below): never over the data
    outside_legend(ax, notes)
    return ""


def _family_label(members: list[GroupStats]) -> str:
    """The label of a scaling family: its groups' labels without the world-size part."""
    words = [w for w in label_tokens(members[0].label) if not w.endswith("×")]
    return " ".join(words) or "throughput"


#: The former name of :class:`~ddpgui.core.outputs.style.Style`.
_Style = Style
