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

from remote_runner.spools import METRICS

from ..analysis.comparison import Comparison, GroupStats, family_key
from ..analysis.stats import Ratio
from ..store import RunStore

FORMATS = ("pdf", "svg", "png")
FIGURES = ("loss", "throughput", "memory", "speedup", "scaling")
#: Figure widths in inches: a single and a double column of a two-column paper.
WIDTHS = {"single": 3.5, "double": 7.0}
#: Height / width of every figure.
ASPECT = 0.68
#: Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
#: With the colours, so that curves and bars stay apart when printed in greyscale.
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HATCHES = ("", "///", "...", "\\\\\\", "xxx", "---", "ooo", "+++")
#: Markers on a curve: about this many, evenly spread (markevery), not one per point.
MARKERS_PER_CURVE = 8
X_LABELS = {"step": "step", "time": "time since the first logged step (s)"}

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


class _Style:
    """Colour, line style, marker and hatch of the i-th group: all four change together."""

    def __init__(self, i: int):
        self.color = OKABE_ITO[i % len(OKABE_ITO)]
        self.linestyle = LINESTYLES[i % len(LINESTYLES)]
        self.marker = MARKERS[i % len(MARKERS)]
        self.hatch = HATCHES[i % len(HATCHES)]


def run_labels(comparison: Comparison) -> dict[str, str]:
    """Run id → its group's label, with "#k" after it when the group holds repeats."""
    out = {}
    for g in comparison.groups:
        for k, r in enumerate(g.runs):
            out[r.run_id] = g.label if g.n == 1 else f"{g.label} #{k + 1}"
    return out


def write_figures(comparison: Comparison, store: RunStore, out_dir: str | Path, formats: Iterable[str] = FORMATS,
                  width: str = "single", x: str = "step", dpi: int = 300, caption: bool = True,
                  figures: Sequence[str] = FIGURES) -> Exported:
    """Draw each figure once and save it in each format as ``<figure>.<fmt>`` in ``out_dir``."""
    formats = list(formats)
    for given, allowed, what in ((formats, FORMATS, "format"), (figures, FIGURES, "figure")):
        unknown = [g for g in given if g not in allowed]
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(unknown)}: choose from {', '.join(allowed)}")
    if width not in WIDTHS:
        raise ValueError(f"width must be one of {', '.join(WIDTHS)}, got {width!r}")
    if x not in X_LABELS:
        raise ValueError(f"x must be one of {', '.join(X_LABELS)}, got {x!r}")
    if dpi < 72:
        raise ValueError(f"dpi must be at least 72, got {dpi}")
    result = Exported()
    if not formats:
        return result
    import matplotlib
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = caption_text(comparison)
    inches = WIDTHS[width]
    drawers = {"loss": lambda ax: _loss(ax, comparison, store, x, int(inches * dpi)),
               "throughput": lambda ax: _throughput(ax, comparison), "memory": lambda ax: _memory(ax, comparison),
               "speedup": lambda ax: _speedup(ax, comparison), "scaling": lambda ax: _scaling(ax, comparison)}
    with matplotlib.rc_context(RC):
        for name in figures:
            fig = Figure(figsize=(inches, inches * ASPECT), dpi=dpi, layout="constrained")
            ax = fig.add_subplot()
            why = drawers[name](ax)
            if why:
                result.skipped[name] = why
                continue
            if caption and text:
                fig.supxlabel(text, fontsize=5.5, color="#444444")
            title = f"{ax.get_title() or name} ({comparison.baseline_group.label} baseline)"
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                fig.savefig(path, format=fmt, dpi=dpi, metadata=_metadata(fmt, title, text))
                fig.set_layout_engine("none")  # laid out once (in inches): the other formats keep it
                result.paths.append(path)
    return result


def _loss(ax, comparison: Comparison, store: RunStore, x: str, columns: int) -> str:
    labels = run_labels(comparison)
    curves = []
    for i, g in enumerate(comparison.groups):
        for run in g.runs:
            s = store.series(run.run_id, METRICS, keys=["step", "t", "loss"])
            xs = s["step"] if x == "step" else s["t"] - (s["t"][0] if len(s["t"]) else 0.0)
            ok = np.isfinite(xs) & np.isfinite(s["loss"])
            if ok.any():
                curves.append((i, run.run_id, xs[ok], s["loss"][ok]))
    if not curves:
        return "no run logged a loss"
    lo = min(float(c[2][0]) for c in curves)
    hi = max(float(c[2][-1]) for c in curves)
    for i, run_id, xs, ys in curves:
        style = _Style(i)
        px, py = envelope(xs, ys, columns, lo, hi)
        ax.plot(px, py, color=style.color, linestyle=style.linestyle, marker=style.marker, markersize=2.5,
                markevery=max(1, len(px) // MARKERS_PER_CURVE), label=labels[run_id])
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel("training loss")
    ax.set_title("loss")
    if all(c[3].min() > 0 for c in curves) and max(c[3].max() for c in curves) > 10 * min(c[3].min() for c in curves):
        ax.set_yscale("log")
    # a fixed place: loc="best" scans every point of every curve for overlaps (a third of the export time)
    ax.legend(frameon=False, loc="upper right", ncols=2 if len(curves) > 5 else 1)
    return ""


def _bars(ax, groups: list[GroupStats], values: list[float | None], errors: list, ylabel: str, title: str) -> str:
    if all(v is None for v in values):
        return ""
    pos = np.arange(len(groups))
    for i, (v, e) in enumerate(zip(values, errors)):
        if v is None:
            continue
        style = _Style(i)
        ax.bar(pos[i], v, color=style.color, hatch=style.hatch, edgecolor="black", linewidth=0.5,
               yerr=None if e is None else np.array(e, float).reshape(2, 1), capsize=2.5,
               error_kw={"elinewidth": 0.7, "capthick": 0.7})
    ax.set_xticks(pos, [f"{g.label}\nn={g.n}" for g in groups], rotation=30 if len(groups) > 2 else 0,
                  ha="right" if len(groups) > 2 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return "drawn"


def _estimate_bars(ax, comparison: Comparison, metric: str, ylabel: str, title: str) -> str:
    groups = comparison.groups
    estimates = [g.metrics[metric] for g in groups]
    errors = [None if e.ci95 is None else (e.ci95, e.ci95) for e in estimates]
    drawn = _bars(ax, groups, [e.mean for e in estimates], errors, ylabel, title)
    if not drawn:
        return "; ".join(sorted({e.reason for e in estimates if e.reason})) or f"no {metric}"
    return ""


def _throughput(ax, comparison: Comparison) -> str:
    unit = comparison.groups[0].runs[0].throughput_unit
    return _estimate_bars(ax, comparison, "throughput", f"steady throughput ({unit})", "throughput (mean ± 95% CI)")


def _memory(ax, comparison: Comparison) -> str:
    return _estimate_bars(ax, comparison, "mem_peak_gib", "peak memory (GiB)", "peak memory (mean ± 95% CI)")


def ratio_error(r: Ratio) -> tuple[float, float] | None:
    """(below, above) distances from a ratio to the ends of its interval (error bars); None without one."""
    if r.value is None or r.low is None or r.high is None:
        return None
    return (r.value - r.low, r.high - r.value)


def _speedup(ax, comparison: Comparison) -> str:
    groups = comparison.groups
    if len(groups) < 2:
        return "one setting only: nothing to compare with the baseline"
    ratios = [comparison.speedup[g.key] for g in groups]
    if not _bars(ax, groups, [r.value for r in ratios], [ratio_error(r) for r in ratios],
                 f"speedup vs {comparison.baseline_group.label} (×)", "speedup (95% CI)"):
        return "; ".join(sorted({r.reason for r in ratios if r.reason})) or "no throughput"
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    return ""


def _scaling(ax, comparison: Comparison) -> str:
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
        style = _Style(i)
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
    ax.set_ylabel(f"steady throughput ({unit})")
    ax.set_title("scaling (mean ± 95% CI)")
    ax.legend(frameon=False, loc="upper left")
    return ""


def _family_label(members: list[GroupStats]) -> str:
    """The label of a scaling family: its groups' labels without the world-size part."""
    words = [w for w in members[0].label.split() if not w.endswith("×")]
    return " ".join(words) or "throughput"
