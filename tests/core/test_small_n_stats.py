"""Statistics that hold at small n (issue 24): SciPy's t, no interval below 3 repeats, intervals of positive
quantities and ratios that never leave the positive axis, TensorBoard's smoothing, tables without ±, and
exported figures whose text never collides at either column width."""
import math
import re
from itertools import combinations

import matplotlib
import numpy as np
import pytest
import scipy.stats
from helpers.stored_runs import store_run
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ddpgui.core import analysis
from ddpgui.core.analysis.comparison import Curve
from ddpgui.core.analysis.curves import ema, mean_curve
from ddpgui.core.analysis.stats import MIN_N, Estimate, estimate, ratio, t_cdf, t_quantile
from ddpgui.core.outputs import figures, tables
from ddpgui.core.outputs.style import label_tokens, wrap_tokens
from ddpgui.core.store import RunStore

POSITIVE = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
ANY = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


# -- the t distribution is SciPy's ------------------------------------------------------------------


@given(st.floats(min_value=0.5, max_value=1e4), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_t_quantile_and_cdf_are_scipys(df, confidence):
    q = t_quantile(df, confidence)
    assert q == pytest.approx(scipy.stats.t.ppf(0.5 + confidence / 2, df), rel=1e-12)
    assert t_cdf(q, df) == pytest.approx(0.5 + confidence / 2, rel=1e-9)


# -- no interval below 3 values; positive quantities stay positive -----------------------------------


@given(st.lists(ANY, min_size=1, max_size=MIN_N - 1), st.sampled_from(["repeats", "intervals"]))
def test_one_or_two_values_give_no_interval(values, over):
    est = estimate(values, over)
    assert est.low is None and est.high is None and est.ci95 is None and not est.has_interval
    assert est.range == ((min(values), max(values)) if len(values) == 2 else None)


@settings(max_examples=200)
@given(st.lists(POSITIVE, min_size=1, max_size=12))
def test_no_interval_of_a_positive_quantity_has_a_negative_end(values):
    est = estimate(values, "repeats", nonnegative=True)
    if len(values) < MIN_N:
        assert not est.has_interval
        return
    assert 0 < est.low <= est.mean * (1 + 1e-9) and est.mean <= est.high * (1 + 1e-9)
    assert est.method == "log-t" and est.centre == "geometric mean"


@given(st.lists(ANY, min_size=MIN_N, max_size=10))
def test_a_nonnegative_quantity_with_zeros_is_cut_at_zero(values):
    values = [abs(v) for v in values] + [0.0]
    est = estimate(values, "repeats", nonnegative=True)
    assert est.low >= 0.0 and est.high >= est.mean


def test_log_scale_interval_is_scipys_t_interval_of_the_logs():
    x = np.array([5100.0, 5400.0, 5327.0, 6100.0, 4900.0])
    est = estimate(x, "repeats")
    lo, hi = scipy.stats.t.interval(0.95, len(x) - 1, loc=np.log(x).mean(), scale=scipy.stats.sem(np.log(x)))
    assert (est.low, est.high) == (pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi)))
    assert est.mean == pytest.approx(scipy.stats.gmean(x))
    signed = np.array([-0.2, 0.1, 0.4, 0.05])  # a user's loss may be negative: the plain t-interval
    est = estimate(signed, "repeats")
    lo, hi = scipy.stats.t.interval(0.95, 3, loc=signed.mean(), scale=scipy.stats.sem(signed))
    assert (est.low, est.high, est.mean) == (pytest.approx(lo), pytest.approx(hi), pytest.approx(signed.mean()))
    assert "plain t-interval" in est.reason


@settings(max_examples=200)
@given(st.lists(POSITIVE, min_size=1, max_size=8), st.lists(POSITIVE, min_size=1, max_size=8))
def test_a_ratio_never_goes_below_zero_and_needs_three_on_each_side(a, b):
    r = ratio(estimate(a, "repeats"), estimate(b, "repeats"))
    assert r.value > 0
    if min(len(a), len(b)) < MIN_N:
        assert not r.has_interval and "≥ 3 repeats" in r.reason
        if len(a) * len(b) >= 2:  # the pairwise ratios and their range instead
            assert r.range == (pytest.approx(min(a) / max(b)), pytest.approx(max(a) / min(b)))
        return
    assert 0 < r.low <= r.value * (1 + 1e-9) and r.value <= r.high * (1 + 1e-9)
    saving = r.mapped(lambda v: 1 - v, flips=True)  # memory saving: 1 − ratio, its ends swapped
    assert saving.low <= saving.value <= saving.high < 1


def test_ratio_is_welchs_t_on_the_log_scale():
    a, b = np.log([210.0, 190.0, 205.0, 200.0]), np.log([100.0, 104.0, 96.0])
    r = ratio(estimate(np.exp(a), "repeats"), estimate(np.exp(b), "repeats"))
    welch = scipy.stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (r.low, r.high) == (pytest.approx(math.exp(welch.low)), pytest.approx(math.exp(welch.high)))
    assert r.value == pytest.approx(math.exp(a.mean() - b.mean()))


def test_an_estimate_without_values_still_gets_a_log_scale_ratio():
    # a mean and std alone (no values): the delta method on the log scale, var(log) ≈ (std / mean)²
    r = ratio(Estimate(200.0, 20.0, None, 4, "repeats"), Estimate(100.0, 5.0, None, 4, "repeats"))
    va, vb = (0.1 ** 2) / 4, (0.05 ** 2) / 4
    half = t_quantile((va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3)) * math.sqrt(va + vb)
    assert (r.low, r.high) == (pytest.approx(2 * math.exp(-half)), pytest.approx(2 * math.exp(half)))


# -- smoothing and curves ----------------------------------------------------------------------------


def _tensorboard_ema(values, weight):
    """TensorBoard's own smoothing (tensorboard/webapp …/line_chart_v2/lib/data_transformer.ts), transliterated."""
    last, accumulated, out = 0.0, 0, []
    constant = all(v == values[0] for v in values)
    for v in values:
        if constant or not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        accumulated += 1
        out.append(last / (1 - weight ** accumulated))
    return np.array(out)


@settings(max_examples=60)
@given(st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=1, max_size=3000),
       st.sampled_from([0.0, 0.3, 0.6, 0.9, 0.99, 0.999]))
def test_ema_is_tensorboards(values, weight):
    np.testing.assert_allclose(ema(np.array(values), weight), _tensorboard_ema(values, weight), rtol=1e-9, atol=1e-9)


def test_curve_bands_only_from_three_repeats_and_positive_losses_stay_positive():
    rng = np.random.default_rng(4)
    step = np.arange(1.0, 201.0)
    runs = [Curve(step, step * 0.1, 2.0 / step + 0.3 * rng.random(200)) for _ in range(3)]
    two = mean_curve(runs[:2], "step")
    assert np.isnan(two.ci_lo).all() and len(two.runs) == 2  # the repeats are drawn instead
    three = mean_curve(runs, "step")
    assert np.isfinite(three.ci_lo).all() and (three.ci_lo > 0).all() and (three.ci_lo <= three.mean).all()
    # the band is over the smoothed repeats: a smoothed centre lies inside the smoothed runs' span
    smooth = np.array([ema(c.loss, 0.6) for c in runs])
    assert (three.mean >= smooth.min(axis=0) - 1e-12).all() and (three.mean <= smooth.max(axis=0) + 1e-12).all()


# -- text: broken between tokens, measured -------------------------------------------------------------


def test_label_tokens_keep_a_host_name_with_spaces_whole():
    assert label_tokens("compile=default bf16 2× @This computer lr=0.1") == [
        "compile=default", "bf16", "2×", "@This computer", "lr=0.1"]
    lines = wrap_tokens(["all:", "workload=mlp", "fp32", "1×", "@This computer"], 2.3, lambda s: 0.1 * len(s))
    assert lines == ["all: workload=mlp fp32", "1× @This computer"]  # never "@This" / "computer"


# -- exported tables and figures ---------------------------------------------------------------------

LONG_NAMES = [{"workload": "transformer", "compile": c, "precision": p, "optimizer": o, "batch_size": b}
              for c, p, o, b in (("off", "fp32", "adamw_torch_fused", 64),
                                 ("max-autotune-no-cudagraphs", "bf16", "adamw_torch_fused", 128),
                                 ("reduce-overhead", "bf16", "sgd_with_nesterov_momentum", 64),
                                 ("default", "fp16", "adafactor_relative_step", 256),
                                 ("max-autotune", "fp32", "lion_8bit_paged", 32),
                                 ("off", "bf16", "sophia_g_second_order", 512))]
ENV = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "driver": "550.54.15", "cuda": "12.4", "torch": "2.5.1"}


def _sweep(store, settings_list, repeats, hosts=("This computer",)):
    ids = []
    for k, s in enumerate(settings_list):
        for seed in range(repeats):
            rng = np.random.default_rng(10 * k + seed)
            rate = 1000.0 * (1 + 0.3 * k) * (1 + 0.05 * rng.standard_normal())
            metrics = [{"t": 1000.0 + 0.5 * i, "phase": "train", "step": i + 1,
                        "loss": 2.0 / (i + 1) + 0.02 * rng.random(), "samples_per_s": rate * (1 + 0.01 * rng.random()),
                        "mem_peak_gib": 2.0 + k + 0.1 * seed, "warmup": i < 3} for i in range(60)]
            run_id = f"s{k}r{seed}"
            store_run(store, run_id, dict(s, seed=seed, nproc_per_node=1), metrics, hosts=hosts, environment=ENV)
            ids.append(run_id)
    return analysis.compute_comparison(store, None, ids, ids[0]).comparison


def test_summary_tex_prints_asymmetric_intervals_and_ranges_never_plus_minus(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as store:
        for repeats in (2, 5):
            comparison = _sweep(store, LONG_NAMES[:3], repeats) if repeats == 2 else \
                _sweep(RunStore(tmp_path / "five.sqlite3"), LONG_NAMES[:3], repeats)
            text = tables.write_latex_table(comparison, tmp_path / f"summary{repeats}.tex").read_text()
            body = text[text.index(r"\midrule"):]
            assert r"\pm" not in text and "±" not in text
            if repeats == 2:  # "centre (min--max)" of the repeats
                assert re.search(r"\$[\d.]+\$ \(\$[\d.]+\$--\$[\d.]+\$\)", body) and "[" not in body
            else:  # "centre [low, high]", every end ≥ 0
                cells = re.findall(r"\[\$(-?[\d.]+)\$, \$(-?[\d.]+)\$\]", body)
                assert cells and all(float(lo) >= 0 and float(hi) >= float(lo) for lo, hi in cells)


def _texts(fig):
    """Every drawn text's extent (ticks outside the view are not drawn), rendered as savefig does."""
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, abs(hi - lo))
            undrawn |= {id(t.label1) for t in axis.get_major_ticks() + axis.get_minor_ticks()
                        if not lo - eps <= t.get_loc() <= hi + eps}
    return [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(matplotlib.text.Text)
            if t.get_visible() and t.get_text().strip() and id(t) not in undrawn]


@pytest.mark.parametrize("case", [(3, 2), (6, 5)], ids=["3 settings x 2 repeats", "6 settings x 5 repeats"])
@pytest.mark.parametrize("width", ["single", "double"])
def test_exported_figures_of_long_setting_names_have_no_colliding_text(tmp_path, case, width):
    n_settings, repeats = case
    with RunStore(tmp_path / "runs.sqlite3") as store:
        comparison = _sweep(store, LONG_NAMES[:n_settings], repeats)
        drawn = 0
        with matplotlib.rc_context(figures.RC):
            for name in ("loss", "throughput", "memory", "speedup"):
                fig, why = figures.draw_figure(comparison, store, name, width, dpi=100)
                assert fig is not None, why
                drawn += 1
                texts = _texts(fig)
                canvas = fig.bbox
                for text, box in texts:
                    assert canvas.x0 - 0.5 <= box.x0 and box.x1 <= canvas.x1 + 0.5, (name, width, text, "leaves")
                    assert canvas.y0 - 0.5 <= box.y0 and box.y1 <= canvas.y1 + 0.5, (name, width, text, "leaves")
                for (a, box_a), (b, box_b) in combinations(texts, 2):
                    assert not box_a.overlaps(box_b), (name, width, a, b)
                axes = fig.axes[0].get_window_extent()
                assert canvas.x0 <= axes.x0 and axes.x1 <= canvas.x1 and canvas.y0 <= axes.y0 <= axes.y1 <= canvas.y1
                assert axes.height > 0.25 * canvas.height, (name, width, "the axes were squeezed")
                footer = fig._supxlabel.get_text()
                assert "@This\n" not in footer and "\ncomputer" not in footer  # a host name is never broken
                if repeats < MIN_N:
                    assert "needs ≥ 3 repeats" in footer, (name, footer)
                if name == "loss":
                    assert "EMA, weight 0.6" in footer
    assert drawn == 4
