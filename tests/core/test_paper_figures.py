"""Exported figures that fit their column, and loss curves of repeats as a mean with a 95% interval (curves.csv)."""
import csv
import io
import math

import matplotlib
import numpy as np
import pytest
from helpers.stored_runs import store_run
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from ddpgui.cli import main
from ddpgui.core import analysis
from ddpgui.core.analysis.comparison import Curve
from ddpgui.core.analysis.curves import mean_curve
from ddpgui.core.analysis.stats import t_quantile
from ddpgui.core.outputs import export, figures
from ddpgui.core.store import RunStore

ENV = {"cpu": "AMD EPYC 7B13", "cpu_count": 2, "torch": "2.5.1"}
STEPS = 40


def _metrics(rate, seed, mem, steps=STEPS, t0=1000.0):
    rng = np.random.default_rng(seed)
    return [{"t": t0 + 0.5 * i, "phase": "train", "step": i + 1, "loss": 2.0 / (i + 1) + 0.01 * rng.random(),
             "samples_per_s": rate * (1 + 0.01 * rng.standard_normal()), "mem_peak_gib": mem, "warmup": i < 3}
            for i in range(steps)]


def _compare(store, settings, rates, mems, repeats=2, steps=None):
    """Groups of ``repeats`` runs: settings[k] at rates[k] (None: a run too short to settle) and mems[k] GiB."""
    ids = []
    for k, (s, rate, mem) in enumerate(zip(settings, rates, mems)):
        for seed in range(repeats):
            run_id = f"g{k}s{seed}"
            metrics = _metrics(rate or 1.0, 10 * k + seed, mem, 3 if rate is None else (steps or STEPS))
            store_run(store, run_id, dict(s, seed=seed), metrics, environment=ENV)
            ids.append(run_id)
    return analysis.compute_comparison(store, None, ids, ids[0]).comparison


LONG = [{"workload": "mlp", "compile": c, "precision": p, "steps": n, "batch_size": b}
        for c, p, n, b in (("off", "fp32", 1500, 64), ("default", "bf16", 1500, 128), ("max-autotune", "bf16", 3000, 64),
                           ("reduce-overhead", "fp16", 3000, 256))]
SHORT = [{"workload": "mlp", "precision": p} for p in ("fp32", "bf16", "fp16")]


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        yield s


def _texts_inside(fig):
    """Render like savefig does (Agg, laid out), then each visible text's extent on the canvas: (text, extent, inside?)."""
    agg = FigureCanvasAgg(fig)
    agg.draw()
    renderer = agg.get_renderer()
    canvas = fig.bbox
    undrawn = set()  # the labels of ticks outside the view limits exist but are not drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, abs(hi - lo))
            ticks = axis.get_major_ticks() + axis.get_minor_ticks()
            undrawn |= {id(t.label1) for t in ticks if not lo - eps <= t.get_loc() <= hi + eps}
    out = []
    for t in fig.findobj(matplotlib.text.Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in undrawn:
            continue
        box = t.get_window_extent(renderer)
        inside = box.x0 >= canvas.x0 - 0.5 and box.y0 >= canvas.y0 - 0.5 and box.x1 <= canvas.x1 + 0.5 and \
            box.y1 <= canvas.y1 + 0.5
        out.append((t.get_text(), box, inside))
    return out


@pytest.mark.parametrize("width", ["single", "double"])
@pytest.mark.parametrize("case", ["long", "short"])
def test_no_text_of_any_figure_leaves_the_canvas_or_overlaps_a_tick_label(store, width, case):
    settings = LONG if case == "long" else SHORT
    rates = [100.0, 250.0, None, 80.0][:len(settings)]
    comparison = _compare(store, settings, rates, [0.3, 0.5, 0.4, 0.2][:len(settings)])
    drawn = 0
    with matplotlib.rc_context(figures.RC):
        for name in figures.FIGURES:
            fig, why = figures.draw_figure(comparison, store, name, width, dpi=100)
            if fig is None:
                assert name == "scaling" and "1-process" in why
                continue
            drawn += 1
            texts = _texts_inside(fig)
            outside = [(text, box) for text, box, inside in texts if not inside]
            assert not outside, (name, width, outside)
            ticks = sorted((t.get_window_extent() for t in fig.axes[0].get_xticklabels() if t.get_text()),
                           key=lambda b: b.x0)
            for left, right in zip(ticks, ticks[1:]):
                assert left.x1 <= right.x0, (name, width, "tick labels overlap")
    assert drawn == 4


def test_bar_labels_name_what_differs_and_the_rest_goes_under_the_axes(store):
    comparison = _compare(store, SHORT, [100.0, 250.0, None], [0.3, 0.5, 0.4])
    with matplotlib.rc_context(figures.RC):
        fig, _ = figures.draw_figure(comparison, store, "throughput", "single", dpi=100)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["fp32\nn=2", "bf16\nn=2", "fp16\nn=2"]
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels())
    footer = fig._supxlabel.get_text()
    assert "all: workload=mlp" in footer and "CPU AMD EPYC 7B13" in footer
    # the group that never settled: "n/a" at its place on the axis and its reason in a footnote
    marks = [t for t in ax.texts if t.get_text().startswith("n/a")]
    assert len(marks) == 1 and marks[0].get_position()[0] == 2
    assert "¹ n/a: " in footer and "warm-up" in footer


def test_a_value_over_fewer_runs_than_its_group_says_so(store):
    for run_id, s, steps in (("a0", SHORT[0], STEPS), ("a1", SHORT[0], STEPS), ("b0", SHORT[1], STEPS),
                             ("b1", SHORT[1], 3)):
        store_run(store, run_id, dict(s, seed=int(run_id[1])), _metrics(100.0, 1, 0.5, steps), environment=ENV)
    comparison = analysis.compute_comparison(store, None, ["a0", "a1", "b0", "b1"], "a0").comparison
    with matplotlib.rc_context(figures.RC):
        fig, _ = figures.draw_figure(comparison, store, "throughput", "single", dpi=100)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["fp32\nn=2", "bf16\nn=1 of 2¹"]
    assert "¹ n/a: 1 of 2 runs have no value" in fig._supxlabel.get_text()


def test_long_labels_become_keys_with_a_key_table(store):
    comparison = _compare(store, LONG, [100.0, 250.0, 120.0, 80.0], [0.3, 0.5, 0.4, 0.2])
    with matplotlib.rc_context(figures.RC):
        fig, _ = figures.draw_figure(comparison, store, "speedup", "single", dpi=100)
    ax = fig.axes[0]
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["A", "B", "C", "D"]
    footer = fig._supxlabel.get_text()
    for key, group in zip("ABCD", comparison.groups):
        assert f"{key}: {group.label.split()[0]}" in footer
    assert "speedup vs A" in ax.get_title()
    assert "all: workload=mlp" in footer


def test_memory_in_mib_or_gib_and_no_offset_or_multiplier(store, tmp_path):
    comparison = _compare(store, SHORT, [1.2e6, 1.3e6, 1.25e6], [0.0007, 0.0008, 0.00075])
    with matplotlib.rc_context(figures.RC):
        memory, _ = figures.draw_figure(comparison, store, "memory", "single", dpi=100)
        throughput, _ = figures.draw_figure(comparison, store, "throughput", "single", dpi=100)
        for fig in (memory, throughput):
            fig.savefig(io.BytesIO(), format="png")
    assert memory.axes[0].get_ylabel() == "peak memory (MiB)"
    assert throughput.axes[0].get_ylabel() == "thousand samples/s"
    for fig in (memory, throughput):
        ax = fig.axes[0]
        assert ax.yaxis.get_offset_text().get_text() == ""
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all("e" not in s and "×" not in s for s in labels), labels
    top = max(float(t.get_text().replace("−", "-")) for t in memory.axes[0].get_yticklabels() if t.get_text())
    assert 0.5 < top < 2.0  # ticks in MiB around 0.75 MiB, not 0.0007
    with RunStore(tmp_path / "big.sqlite3") as big:
        assert figures.memory_unit([0.5, 2.0]) == ("GiB", 1.0) and figures.memory_unit([0.5, 0.9])[0] == "MiB"
        assert big is not None


def test_mean_curve_by_hand():
    a = Curve(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]))
    b = Curve(np.array([1.0, 2.0]), np.array([0.0, 3.0]), np.array([3.0, 4.0]))
    d = Curve(np.array([1.0, 2.0, 3.0]), np.array([0.0, 2.0, 4.0]), np.array([9.0, 8.0, 27.0]))
    c = mean_curve([a, b, d], "step", smoothing=0.0)  # raw: the values as logged
    assert c.x.tolist() == [1.0, 2.0, 3.0] and c.n.tolist() == [3, 3, 2]
    # every value > 0: the geometric mean, (1·3·9)^(1/3) = 3, (2·4·8)^(1/3) = 4, (3·27)^(1/2) = 9
    assert c.mean == pytest.approx([3.0, 4.0, 9.0]) and c.centre == "geometric mean"
    logs = np.log([1.0, 3.0, 9.0])  # step 1: log-scale t-interval, exp(m ± t(2) · s / √3)
    half = t_quantile(2) * logs.std(ddof=1) / math.sqrt(3)
    assert (c.ci_lo[0], c.ci_hi[0]) == (pytest.approx(3 * math.exp(-half)), pytest.approx(3 * math.exp(half)))
    assert math.isnan(c.ci_lo[2]) and math.isnan(c.ci_hi[2])  # two runs: no interval
    assert mean_curve([a, b, d], "time", smoothing=0.0).x.tolist() == [0.0, 2.0, 3.0]  # the runs' mean time
    signed = mean_curve([a, b, Curve(d.step, d.time, -d.loss)], "step", smoothing=0.0)
    assert signed.centre == "mean" and signed.mean[0] == pytest.approx((1 + 3 - 9) / 3)
    half = t_quantile(2) * np.std([1.0, 3.0, -9.0], ddof=1) / math.sqrt(3)
    assert signed.ci_lo[0] == pytest.approx(signed.mean[0] - half)
    one = mean_curve([a], "step", smoothing=0.0)
    assert one.mean.tolist() == [1.0, 2.0, 3.0] and np.isnan(one.ci_lo).all()
    smooth = mean_curve([a], "step")  # TensorBoard's debiased EMA, weight 0.6: 1, (0.24 + 0.8) / 0.64, …
    assert smooth.mean[1] == pytest.approx((0.6 * 0.4 * 1 + 0.4 * 2) / (1 - 0.36)) and smooth.smoothing == 0.6


def test_band_envelope_covers_every_point_of_its_column():
    from ddpgui.core.outputs.curves import band_envelope

    rng = np.random.default_rng(3)
    x = np.arange(10_000, dtype=float)
    mid = np.sin(x / 500)
    low, high = mid - rng.random(10_000), mid + rng.random(10_000)
    valid = np.ones(10_000, bool)
    valid[4000:4100] = False
    bx, blo, bhi = band_envelope(x, low, high, valid, 100, 0.0, 9999.0)
    assert len(bx) == 100
    col = np.minimum((x / 9999.0 * 100).astype(int), 99)
    for k in (0, 17, 41, 99):
        mine = (col == k) & valid
        assert blo[k] == low[mine].min() and bhi[k] == high[mine].max()
    assert np.isnan(blo[40]) and np.isnan(bhi[40])  # a column without an interval: a gap in the band
    small = band_envelope(x[:50], low[:50], high[:50], valid[:50], 100, 0.0, 49.0)
    assert (small[1] == low[:50]).all()  # few points: drawn whole
    gap = band_envelope(x[3990:4110], low[3990:4110], high[3990:4110], valid[3990:4110], 100, 3990.0, 4109.0)
    assert np.isnan(gap[1][10:110]).all() and np.isfinite(gap[1][:10]).all()


def test_export_writes_curves_csv_with_the_repeats(store, tmp_path):
    comparison = _compare(store, SHORT[:2], [100.0, 200.0], [0.3, 0.5], repeats=3)
    written = export.export_comparison(comparison, store, tmp_path, ["curves"])
    assert [p.name for p in written.paths] == ["curves.csv"]
    with open(tmp_path / "curves.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["group", "x", "n", "mean", "ci_lo", "ci_hi", "centre", "smoothing"]
    assert {r["group"] for r in rows} == {"fp32", "bf16"}
    assert all(r["n"] == "3" for r in rows) and len(rows) == 2 * STEPS
    for r in rows:
        assert float(r["ci_lo"]) <= float(r["mean"]) <= float(r["ci_hi"])
    first = next(r for r in rows if r["group"] == "fp32" and r["x"] == "1")
    losses = [rec["loss"] for rec in (store.records(f"g0s{s}")[0] for s in range(3))]
    assert float(first["mean"]) == pytest.approx(np.mean(losses))
    assert "curves" in export.FORMATS


def test_cli_accepts_the_curves_format_and_lists_it(capsys):
    assert main(["compare", "--help"]) == 0
    assert "curves" in capsys.readouterr().out
    assert main(["compare", "x", "--out", "/nonexistent", "--format", "curvez"]) == 2
    err = capsys.readouterr().err
    assert "unknown format curvez" in err and "curves" in err


def test_speedup_interval_stays_above_zero_and_two_repeats_show_their_ratios(store):
    # three repeats that disagree by 4×: the old symmetric interval (t(0.975, 2) = 4.3) reached below zero;
    # the log-scale interval of the ratio cannot
    ids = []
    for k, (s, rates) in enumerate(zip(SHORT, ([100.0, 102.0, 98.0], [40.0, 160.0, 100.0]))):
        for seed, rate in enumerate(rates):
            store_run(store, f"n{k}{seed}", dict(s, seed=seed), _metrics(rate, 10 * k + seed, 0.3), environment=ENV)
            ids.append(f"n{k}{seed}")
    comparison = analysis.compute_comparison(store, None, ids, ids[0]).comparison
    speedup = comparison.speedup[comparison.groups[1].key]
    assert 0 < speedup.low < speedup.value < speedup.high
    with matplotlib.rc_context(figures.RC):
        fig, _ = figures.draw_figure(comparison, store, "speedup", "single", dpi=100)
    assert fig.axes[0].get_ylim()[0] == 0.0 and "95% CI" in fig.axes[0].get_title()
    # two repeats each: no interval; each repeat's ratio to each baseline repeat is a dot, and the notes say why
    two = analysis.compute_comparison(store, None, [i for i in ids if not i.endswith("2")], ids[0]).comparison
    ratio = two.speedup[two.groups[1].key]
    a, b = (g.metrics["throughput"].values for g in reversed(two.groups))
    assert ratio.low is None and len(ratio.values) == 4
    assert ratio.range == (pytest.approx(min(a) / max(b)), pytest.approx(max(a) / min(b)))  # ≈ 40/102, 160/100
    with matplotlib.rc_context(figures.RC):
        fig, _ = figures.draw_figure(two, store, "speedup", "single", dpi=100)
    dots = [line for line in fig.axes[0].get_lines() if line.get_marker() == "o"]
    assert len(dots) == 1 and len(dots[0].get_ydata()) == 4
    assert not [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]  # no interval drawn
    assert "needs ≥ 3 repeats" in fig._supxlabel.get_text()


def test_a_value_from_a_run_that_never_settled_is_drawn_and_its_footnote_says_so(store):
    from helpers.recorded_runs import put_recorded

    ids = put_recorded(store, "ordinary")  # four real runs of 40, 150, 600 steps and one stopped
    comparison = analysis.compute_comparison(store, None, ids, ids[0]).comparison
    with matplotlib.rc_context(figures.RC):
        fig, _ = figures.draw_figure(comparison, store, "throughput", "double", dpi=100)
    notes = fig._supxlabel.get_text()
    remarks = [line for line in notes.splitlines() if "not settled" in line]
    assert remarks and not any("n/a" in line for line in remarks), notes
    assert any(line.startswith("* from a run that never settled") for line in notes.splitlines()), notes
    marked = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text().endswith("*")]  # as in the app
    assert marked, [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(fig.axes[0].patches) == len(comparison.groups)  # every run has its bar
