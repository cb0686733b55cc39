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

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..analysis.comparison import Comparison, GroupStats, family_key
from ..analysis.stats import Ratio
from ..analysis.steady import is_fallback
from ..store import RunStore
from .files import output_file, output_folder
from .style import CHAR_EM, FOOTER_PT, TICK_EM, TICK_PT, Notes, Style, outside_legend, shared_settings

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


def caption_text(comparison: Comparison) -> str:
    """The environment line: GPU (or CPU) model, driver, CUDA and torch of the compared runs."""
    return "; ".join(line for line in dict.fromkeys(_env_line(r.environment) for r in comparison.runs) if line)


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
                  figures: Sequence[str] = FIGURES, individual: bool = True) -> Exported:
    """Draw each figure once and save it in each format as ``<figure>.<fmt>`` in ``out_dir``.

    Under the axes, one text block: the key of long group labels, the settings all groups share,
    footnotes of the groups without a value, and (``caption``) the environment line.  The
    figure is ``width`` wide and grows in height only for that block's lines beyond two.
    ``individual``: the loss figure draws each run faintly under its group's mean.
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
    result = Exported()
    if not formats:
        return result
    import matplotlib

    out = output_folder(out_dir)
    text = caption_text(comparison)
    with matplotlib.rc_context(RC):
        for name in figures:
            fig, why = draw_figure(comparison, store, name, width, x, dpi, caption, individual)
            if fig is None:
                result.skipped[name] = why
                continue
            title = f"{fig.axes[0].get_title() or name} ({comparison.baseline_group.label} baseline)"
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                with output_file(path, "wb") as fh:
                    fig.savefig(fh, format=fmt, dpi=dpi, metadata=_metadata(fmt, title, text))
                fig.set_layout_engine("none")  # laid out once (in inches): the other formats keep it
                result.paths.append(path)
    return result


def draw_figure(comparison: Comparison, store: RunStore, name: str, width: str = "single", x: str = "step",
                dpi: int = 300, caption: bool = True, individual: bool = True):
    """One figure drawn (not saved): (the matplotlib Figure, "") or (None, why it cannot be drawn).

    Call it inside ``matplotlib.rc_context(RC)`` (as :func:`write_figures` does) for the paper fonts.
    """
    from matplotlib.figure import Figure

    from .curves import draw_loss

    inches = WIDTHS[width]
    drawers = {"loss": lambda ax, notes: draw_loss(ax, comparison, store, x, int(inches * dpi), notes, individual),
               "throughput": lambda ax, notes: _throughput(ax, comparison, notes),
               "memory": lambda ax, notes: _memory(ax, comparison, notes),
               "speedup": lambda ax, notes: _speedup(ax, comparison, notes),
               "scaling": lambda ax, notes: _scaling(ax, comparison, notes)}
    fig = Figure(figsize=(inches, inches * ASPECT), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    notes = Notes(inches)
    why = drawers[name](ax, notes)
    if why:
        return None, why
    _plain_ticks(ax)
    footer = notes.lines(caption_text(comparison) if caption else "")
    if footer:
        fig.supxlabel("\n".join(footer), fontsize=FOOTER_PT, color="#444444", ha="left", x=0.02, linespacing=1.25)
        extra = max(0, len(footer) - 2) * FOOTER_PT * 1.25 / 72
        fig.set_size_inches(inches, inches * ASPECT + extra)
    return fig, ""


def _plain_ticks(ax) -> None:
    """No offset ("+1e3") and no multiplier ("×10⁻³") on a linear axis: ticks read as the values."""
    from matplotlib.ticker import ScalarFormatter

    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if isinstance(formatter, ScalarFormatter):
            formatter.set_useOffset(False)
            formatter.set_scientific(False)


def _tick_labels(groups: list[GroupStats], inches: float, notes: Notes) -> tuple[list[str], bool]:
    """Each group's tick label (its label wrapped to 2 lines, then "n=…"), or keys A, B, … (True) when too long."""
    per_bar = max(4, int((inches - 0.55) * 72 / max(1, len(groups)) / (TICK_PT * TICK_EM)))
    wrapped = [textwrap.wrap(g.label, per_bar, break_on_hyphens=False, break_long_words=False) for g in groups]
    if all(len(w) <= 2 and all(len(line) <= per_bar for line in w) for w in wrapped):
        return ["\n".join(w + [f"n={g.n}"]) for w, g in zip(wrapped, groups)], False
    keys = [group_key(i) for i in range(len(groups))]
    notes.key = [f"{k}: {g.label} (n={g.n})" for k, g in zip(keys, groups)]
    return [f"{k}\nn={g.n}" for k, g in zip(keys, groups)], True


def bars_bottom(values: Sequence[float | None], errors: Sequence[tuple[float, float] | None]) -> float:
    """Where a bar axis starts: 0, or below it (by 5% of the span) when an interval's lower end is negative:
    the whole interval is shown, never cut at zero."""
    lows = [v - e[0] for v, e in zip(values, errors) if v is not None and e is not None]
    low = min([0.0] + lows)
    if low >= 0:
        return 0.0
    highs = [v + (e[1] if e is not None else 0.0) for v, e in zip(values, errors) if v is not None]
    return low - 0.05 * (max([0.0] + highs) - low)


def group_key(i: int) -> str:
    """The short key of the i-th group: A, B, …, Z, AA, AB, …"""
    return chr(65 + i) if i < 26 else group_key(i // 26 - 1) + chr(65 + i % 26)


def _bars(ax, comparison: Comparison, values: list[float | None], errors: list, reasons: list[str], ylabel: str,
          title: str, notes: Notes, counts: list[int] | None = None) -> str:
    """Bars with error bars; a group without a value gets "n/a" with a footnote mark at the axis, one whose
    value counts fewer runs (``counts``) than it has says "n=1 of 2" with the reason as a footnote."""
    groups = comparison.groups
    counts = counts or [g.n for g in groups]
    if all(v is None for v in values):
        return ""
    inches = ax.figure.get_figwidth()
    notes.shared = shared_settings(comparison)
    labels, keyed = _tick_labels(groups, inches, notes)
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
    for i, (v, why) in enumerate(zip(values, reasons)):
        if v is not None and why and counts[i] != groups[i].n:  # a value over fewer runs than the group has
            labels[i] = labels[i].replace(f"n={groups[i].n}", f"n={counts[i]} of {groups[i].n}{notes.footnote(why)}")
        elif v is not None and is_fallback(why):  # from a stopped or short run that never settled: said so
            labels[i] = labels[i].replace(f"n={groups[i].n}", f"n={groups[i].n}{notes.footnote(why, missing=False)}")
    ax.set_xticks(pos, labels)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    bottom = bars_bottom(values, errors)
    ax.set_ylim(bottom=bottom)
    if bottom < 0:
        ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_ylabel(ylabel)
    ax.set_title("\n".join(textwrap.wrap(title, int(inches * 72 / (7.5 * CHAR_EM)) - 4)))
    return "keyed" if keyed else "drawn"


def _estimate_bars(ax, comparison: Comparison, metric: str, ylabel: str, title: str, notes: Notes,
                   scale: float = 1.0) -> str:
    estimates = [comparison.groups[i].metrics[metric] for i in range(len(comparison.groups))]
    values = [None if e.mean is None else e.mean * scale for e in estimates]
    errors = [None if e.ci95 is None else (e.ci95 * scale, e.ci95 * scale) for e in estimates]
    counts = [e.n if e.over == "repeats" else g.n for e, g in zip(estimates, comparison.groups)]
    drawn = _bars(ax, comparison, values, errors, [e.reason for e in estimates], ylabel, title, notes, counts)
    if not drawn:
        return "; ".join(sorted({e.reason for e in estimates if e.reason})) or f"no {metric}"
    return ""


def _throughput(ax, comparison: Comparison, notes: Notes) -> str:
    unit = comparison.groups[0].runs[0].throughput_unit
    means = [g.metrics["throughput"].mean for g in comparison.groups]
    big = max((m for m in means if m is not None), default=0.0) >= 1e5
    return _estimate_bars(ax, comparison, "throughput", f"{'thousand ' if big else ''}{unit}",
                          "steady throughput (mean ± 95% CI)", notes, 1e-3 if big else 1.0)


def memory_unit(values_gib: Iterable[float | None]) -> tuple[str, float]:
    """GiB, or MiB when every value is below 1 GiB: the unit and the factor from GiB."""
    known = [v for v in values_gib if v is not None]
    return ("MiB", 1024.0) if known and max(known) < 1.0 else ("GiB", 1.0)


def _memory(ax, comparison: Comparison, notes: Notes) -> str:
    unit, scale = memory_unit(g.metrics["mem_peak_gib"].mean for g in comparison.groups)
    return _estimate_bars(ax, comparison, "mem_peak_gib", f"peak memory ({unit})", "peak memory (mean ± 95% CI)",
                          notes, scale)


def ratio_error(r: Ratio) -> tuple[float, float] | None:
    """(below, above) distances from a ratio to the ends of its interval (error bars); None without one."""
    if r.value is None or r.low is None or r.high is None:
        return None
    return (r.value - r.low, r.high - r.value)


def _speedup(ax, comparison: Comparison, notes: Notes) -> str:
    groups = comparison.groups
    if len(groups) < 2:
        return "one setting only: nothing to compare with the baseline"
    ratios = [comparison.speedup[g.key] for g in groups]
    base = next(i for i, g in enumerate(groups) if g.key == comparison.baseline)
    drawn = _bars(ax, comparison, [r.value for r in ratios], [ratio_error(r) for r in ratios],
                  [r.reason for r in ratios], "speedup (×)", "speedup (95% CI)", notes)
    if not drawn:
        return "; ".join(sorted({r.reason for r in ratios if r.reason})) or "no throughput"
    name = group_key(base) if drawn == "keyed" else groups[base].label
    inches = ax.figure.get_figwidth()
    ax.set_title("\n".join(textwrap.wrap(f"speedup vs {name} (95% CI)", int(inches * 72 / (7.5 * CHAR_EM)) - 4)))
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
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
    for i, members in enumerate(families.values()):
        style = Style(i)
        members.sort(key=lambda g: g.world_size)
        n = np.array([g.world_size for g in members], float)
        est = [g.metrics["throughput"] for g in members]
        one = next(e for g, e in zip(members, est) if g.world_size == 1)
        yerr = np.array([e.ci95 or 0.0 for e in est])
        ax.errorbar(n, [e.mean for e in est], yerr=yerr, color=style.color, linestyle=style.linestyle,
                    marker=style.marker, markersize=3.5, capsize=2.5, label=_family_label(members))
        ax.plot(n, n * one.mean, color="black" if len(families) == 1 else style.color, linestyle=(0, (1, 1)),
                linewidth=0.8, label="ideal (N × 1-process)" if i == 0 else None)
    sizes = sorted({g.world_size for members in families.values() for g in members})
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_ylim(bottom=0)
    unit = comparison.groups[0].runs[0].throughput_unit
    ax.set_xlabel("processes (GPUs)")
    ax.set_ylabel(unit)
    ax.set_title("scaling: steady throughput (mean ± 95% CI)")
    ax.set_xlim(min(sizes) - 0.3 * (max(sizes) - min(sizes)), max(sizes) + 0.3 * (max(sizes) - min(sizes)))
    notes.shared = shared_settings(comparison)
    # outside the axes (below): never over the data
    outside_legend(ax)
    return ""


def _family_label(members: list[GroupStats]) -> str:
    """The label of a scaling family: its groups' labels without the world-size part."""
    words = [w for w in members[0].label.split() if not w.endswith("×")]
    return " ".join(words) or "throughput"


#: The former name of :class:`~ddpgui.core.outputs.style.Style`.
_Style = Style
