"""ddpgui.core.analysis against numbers computed by hand (the computation is in the comments)."""
import math

import numpy as np
import pytest
from helpers.stored_runs import constant_run, store_run

from ddpgui.core import analysis
from ddpgui.core.analysis import (
    Estimate,
    SteadyRule,
    compare,
    estimate,
    noise_sigma,
    ratio,
    run_stats,
    setting_key,
    setting_labels,
    steady_start,
    t_quantile,
)
from ddpgui.core.analysis.steady import FALLBACK_MIN_INTERVALS, fallback_note
from ddpgui.core.hosts import HostProfile, HostStore
from ddpgui.core.store import RunStore

BASE = {"workload": "mlp", "nproc_per_node": 1, "compile": "off", "precision": "fp32", "batch_size": 32,
        "steps": 10, "seed": 0}


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        yield s


# -- Student t ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("df, table", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (10, 2.2281),
                                       (30, 2.0423), (120, 1.9799), (1e7, 1.9600)])
def test_t_quantile_matches_the_printed_table(df, table):
    # two-sided 95% critical values of Student's t, from any statistics table
    assert t_quantile(df) == pytest.approx(table, abs=6e-5)


def test_t_quantile_other_confidence_and_bad_df():
    assert t_quantile(5, 0.99) == pytest.approx(4.0321, abs=1e-4)  # table: df 5, two-sided 99%
    assert analysis.t_cdf(0.0, 3) == 0.5
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)


# -- estimates ---------------------------------------------------------------------------------------


def test_estimate_of_positive_values_is_the_geometric_mean_with_a_log_scale_interval():
    est = estimate([2.0, 4.0, 6.0, 8.0], "intervals")
    # logs 0.6931 1.3863 1.7918 2.0794 → mean m = 1.48765, sample std s = 0.60032
    # centre e^m = (2·4·6·8)^(1/4) = 4.42673; interval e^(m ± t(3) 3.18245 · s / √4) = [1.70075, 11.5219]
    logs = [math.log(v) for v in (2, 4, 6, 8)]
    m, s = sum(logs) / 4, math.sqrt(sum((v - sum(logs) / 4) ** 2 for v in logs) / 3)
    assert est.mean == pytest.approx(384 ** 0.25) and est.centre == "geometric mean"
    assert est.std == pytest.approx(math.sqrt(20 / 3))  # the values' own std, as before
    assert est.low == pytest.approx(math.exp(m - 3.182446 * s / 2), rel=1e-6)
    assert est.high == pytest.approx(math.exp(m + 3.182446 * s / 2), rel=1e-6)
    assert (est.low, est.high) == (pytest.approx(1.70075, abs=1e-5), pytest.approx(11.5219, abs=1e-4))
    assert est.ci95 is None and est.method == "log-t"  # asymmetric: no half-width
    assert (est.n, est.over, est.reason) == (4, "intervals", "")


def test_estimate_of_values_not_all_positive_is_the_plain_t_interval():
    est = estimate([-1.0, 1.0, 3.0, 5.0], "repeats")
    # mean 2; deviations -3 -1 1 3 → sum of squares 20, / (n-1) = 20/3 → std 2.58199
    # ci = t(3) 3.18245 · 2.58199 / √4 = 4.10848
    assert est.mean == 2.0 and est.centre == "mean" and est.method == "t"
    assert est.ci95 == pytest.approx(3.182446 * math.sqrt(20 / 3) / 2, rel=1e-6)
    assert est.low == pytest.approx(2 - est.ci95) and est.high == pytest.approx(2 + est.ci95)
    assert "not all > 0" in est.reason
    # a quantity that cannot be negative (a utilisation with a 0 %): the interval stops at 0
    util = estimate([0.0, 1.0, 8.0], "repeats", nonnegative=True)
    assert util.low == 0.0 and util.high == pytest.approx(3 + 4.302653 * math.sqrt(19) / math.sqrt(3), rel=1e-6)
    assert util.ci95 is None and "cut at 0" in util.reason


def test_estimate_edge_cases():
    one = estimate([7.0], "repeats")
    assert (one.mean, one.std, one.ci95, one.n, one.low) == (7.0, None, None, 1, None) and "no spread" in one.reason
    none = estimate([None, float("nan")], "repeats")
    assert none.mean is None and none.n == 0 and "no values" in none.reason
    flat = estimate([3.0] * 5, "intervals")
    assert (flat.mean, flat.std, flat.low, flat.high) == (3.0, 0.0, 3.0, 3.0)
    two = estimate([4.0, 9.0], "repeats")  # fewer than 3: no interval, the range of the repeats
    assert (two.mean, two.low, two.high, two.range, two.method) == (6.0, None, None, (4.0, 9.0), "range")
    assert "range of n=2 repeats" in two.interval_text and "≥ 3 repeats" in two.interval_text


def test_rate_estimate_is_work_over_time():
    est = analysis.rate_estimate(np.array([100.0, 50.0, 25.0]), "intervals")
    # τ = 0.01, 0.02, 0.04 s per sample → τ̄ = 0.07 / 3 → 42.857 samples/s (the mean of the rates, 58.3,
    # would credit the fast interval twice); s_τ = √((0.0133² + 0.0033² + 0.0167²) / 2) = 0.015275;
    # std = s_τ / τ̄²; τ̄'s interval τ̄ ± h, h = t(2) 4.30265 · s_τ / √3, inverted: [1 / (τ̄ + h), 1 / (τ̄ − h)]
    tau, s_tau = 0.07 / 3, math.sqrt(((0.01 - 0.07 / 3) ** 2 + (0.02 - 0.07 / 3) ** 2 + (0.04 - 0.07 / 3) ** 2) / 2)
    h = 4.302653 * s_tau / math.sqrt(3)
    assert est.mean == pytest.approx(3 / 0.07)
    assert est.std == pytest.approx(s_tau / tau ** 2)
    assert h > tau  # so noisy that τ̄'s interval reaches 0: no interval rather than one to infinity
    assert est.low is None and "too wide" in est.reason
    calm = analysis.rate_estimate(np.array([100.0, 95.0, 105.0, 100.0]), "intervals")
    tau = np.array([1 / 100, 1 / 95, 1 / 105, 1 / 100])
    h = 3.182446 * tau.std(ddof=1) / 2
    assert calm.low == pytest.approx(1 / (tau.mean() + h)) and calm.high == pytest.approx(1 / (tau.mean() - h))
    assert calm.low < calm.mean < calm.high and calm.method == "inverted-t"
    assert (calm.n, calm.over) == (4, "intervals")


# -- steady state ------------------------------------------------------------------------------------


def test_noise_sigma_by_hand():
    # d = diff([1,3,2,4,3]) = [2,-1,2,-1]; median(d) = 0.5; |d - 0.5| = 1.5 each → MAD 1.5
    # σ = 1.4826 · 1.5 / √2 = 1.57253
    assert noise_sigma(np.array([1.0, 3, 2, 4, 3])) == pytest.approx(1.4826 * 1.5 / math.sqrt(2))
    assert noise_sigma(np.array([1.0, 2.0])) == 0.0


def test_steady_state_drops_the_ramp_up():
    x = np.array([50.0, 60, 70] + [100.0] * 17)
    # m = 20, w = clamp(round(2), 3, 50) = 3; M = median of the last max(3, ceil(20/4) = 5) values = 100
    # diffs 10, 10, 30, 0 × 16 → MAD 0 → σ 0 → δ = max(0.05 · 100, 0) = 5 (the noise term is 0)
    # rolling medians: [50,60,70] → 60 (off), [60,70,100] → 70 (off), [70,100,100] → 100, then 100 …
    # the last unsettled window starts at 1 → start 2; x[2] = 70 is itself 30 > 5 away → start 3
    assert steady_start(x) == (3, "")


def test_steady_state_of_a_run_that_never_settles():
    x = np.arange(1.0, 21.0)
    # w = 3, M = median(16..20) = 18, diffs all 1 → σ 0 → δ = 0.9; window j has median j + 2,
    # so j = 17 (median 19) is the last unsettled one → start 18; x[18] = 19, x[19] = 20 are > 0.9
    # away → start 20: a tail of 0 < 20% of 20 intervals
    start, why = steady_start(x)
    assert start is None and "only the last 0 of 20 intervals" in why


def test_steady_state_edge_cases():
    assert steady_start(np.array([5.0])) == (0, "")
    assert steady_start(np.array([]))[0] is None
    assert steady_start(np.array([4.0] * 6)) == (0, "")
    # a rule with a wide tolerance accepts most of the ramp: δ = 0.9 · 18 = 16.2 holds every window median
    # (2 … 19); x[0] = 1 is 17 > 16.2 from 18, x[1] = 2 is 16 → start 1
    assert SteadyRule(tolerance=0.9).window(20) == 3
    assert steady_start(np.arange(1.0, 21.0), SteadyRule(tolerance=0.9)) == (1, "")


# -- one run -----------------------------------------------------------------------------------------

RATES = [100.0, 100, 104, 96, 100, 100, 104, 96, 100, 100]  # steps 3..12


def _worked_run(store):
    metrics = []
    for step in range(1, 13):
        metrics.append({"t": 100 + 0.5 * step, "phase": "train", "step": step,
                        "loss": 0.5 if step == 7 else (None if step == 12 else 3.0 - 0.2 * step),
                        "samples_per_s": {1: 10.0, 2: 50.0}.get(step) or RATES[step - 3],
                        "mem_peak_gib": 1.0 + 0.01 * step, "warmup": step <= 2, "global_batch": 10})
    telemetry = [
        {"t": 100.0, "kind": "gpu", "gpu": 0, "util_pct": 50, "power_w": 100.0},
        {"t": 100.0, "kind": "gpu", "gpu": 1, "util_pct": 30, "power_w": 50.0},
        {"t": 100.0, "kind": "cpu", "cpu_pct": 99.0},
        {"t": 101.0, "kind": "gpu", "gpu": 0, "util_pct": 70, "power_w": 200.0},
        {"t": 102.0, "kind": "gpu", "gpu": 0, "util_pct": 90, "power_w": 200.0},
        {"t": 102.0, "kind": "gpu", "gpu": 1, "util_pct": None, "power_w": 150.0},
    ]
    events = [{"event": "started", "t": 99.0}, {"event": "train_start", "t": 100.0},
              {"event": "compile_start", "t": 100.0}, {"event": "compile_end", "duration_s": 7.5, "t": 100.6},
              {"event": "warmup_done", "step": 2, "t": 101.0}, {"event": "finished", "t": 107.0}]
    config = dict(BASE, compile="default", nproc_per_node=2, steps=12)
    return store_run(store, "worked", config, metrics, telemetry, events, environment={"gpu": "H100"})


def test_run_stats_worked_example(store):
    _worked_run(store)
    s = run_stats(store, "worked", price_per_hour=3.6)
    # steady: warm-up flag and warmup_done drop steps 1-2, compile_end drops step 1: steps 3..12 remain
    # (m = 10). w = 3; M = median(96, 100, 100) = 100; diffs 0,4,-8,4,0,4,-8,4,0 → median 0, MAD 4
    # → σ = 1.4826 · 4 / √2 = 4.1934; M's block f = max(3, ceil(10/4)) = 3;
    # δ = max(5, 3 · 1.2533 · 4.1934 · √(1/3 + 1/3) = 12.874) = 12.874;
    # every window median is 100 → all 10 intervals are steady.
    # throughput is work over time: τ_i = 1 / rate_i, τ̄ = (6/100 + 2/104 + 2/96) / 10 = 0.0100064103
    # → 1 / τ̄ = 99.93594; s_τ² = Σ (τ_i − τ̄)² / 9, std = s_τ / τ̄², ci = t(9) 2.26216 · s_τ / √10 / τ̄²
    tau = np.array([1 / r for r in RATES])
    tau_mean = (6 / 100 + 2 / 104 + 2 / 96) / 10
    s_tau = math.sqrt(sum((v - tau_mean) ** 2 for v in tau) / 9)
    assert s.throughput.mean == pytest.approx(1 / tau_mean) and 1 / tau_mean == pytest.approx(99.93594, abs=1e-5)
    assert s.throughput.std == pytest.approx(s_tau / tau_mean ** 2)
    h = 2.262157 * s_tau / math.sqrt(10)  # τ̄'s half-width, t(9) · s_τ / √10; the rate's interval is its inverse
    assert (s.throughput.low, s.throughput.high) == (pytest.approx(1 / (tau_mean + h)), pytest.approx(1 / (tau_mean - h)))
    assert (s.throughput.n, s.throughput.over, s.throughput_unit, s.steady_from_step) == (10, "intervals",
                                                                                          "samples/s", 3.0)
    assert s.compile_s == 7.5
    assert s.mem_peak_gib == pytest.approx(1.12)  # 1 + 0.01 · 12
    # final loss: the last finite one (step 12 is null) = 3 - 0.2 · 11 = 0.8; best: 0.5 at step 7
    assert s.final_loss == pytest.approx(0.8) and s.best_loss == 0.5
    # time to the last step (12): t = 100 + 6 = 106, minus train_start 100 = 6 s
    assert (s.n_steps, s.time_to_n_s, s.steps) == (12, pytest.approx(6.0), 12)
    # utilisation: GPU samples 50, 30, 70, 90 (one null) → 240 / 4 = 60
    assert s.gpu_util_pct == pytest.approx(60.0)
    # energy: GPU 0 (100+200)/2·1 + (200+200)/2·1 = 350 J; GPU 1 (50+150)/2·2 = 200 J → 550 J
    assert s.energy_j == pytest.approx(550.0)
    assert s.energy_per_1000_steps_j == pytest.approx(550.0 / 12 * 1000)
    # duration: started 99 → finished 107 = 8 s; cost 3.6 / h · 8 s / 3600 = 0.008; per 1000 steps 0.008 / 12 · 1000
    assert s.duration_s == pytest.approx(8.0)
    assert s.cost == pytest.approx(0.008) and s.cost_per_1000_steps == pytest.approx(0.008 / 12 * 1000)
    assert s.world_size == 2 and s.reasons == {}


def test_time_to_n_steps(store):
    _worked_run(store)
    assert run_stats(store, "worked", n_steps=10).time_to_n_s == pytest.approx(5.0)  # t(step 10) = 105
    late = run_stats(store, "worked", n_steps=50)
    assert late.time_to_n_s is None and "before step 50" in late.reasons["time_to_n_s"]


def test_missing_telemetry_and_price_are_none_with_a_reason(store):
    constant_run(store, "cpu", 100.0, BASE)
    s = run_stats(store, "cpu")
    for name in ("gpu_util_pct", "energy_j", "energy_per_1000_steps_j", "cost", "cost_per_1000_steps",
                 "compile_s"):
        assert getattr(s, name) is None and s.reasons[name], name
    assert "GPU" in s.reasons["energy_j"] and "price" in s.reasons["cost"]
    assert s.reasons["compile_s"] == "not compiled (compile=off)"
    assert s.throughput.mean == 100.0 and s.throughput.std == 0.0  # zero variance: std 0, the interval a point
    assert s.throughput.low == s.throughput.high == 100.0


def test_one_point_and_no_points(store):
    store_run(store, "one", BASE, [{"t": 1.0, "phase": "train", "step": 1, "samples_per_s": 42.0, "warmup": False,
                                    "loss": 2.0}])
    one = run_stats(store, "one")
    assert one.throughput.mean == 42.0 and one.throughput.ci95 is None and "no spread" in one.throughput.reason
    store_run(store, "empty", BASE)
    empty = run_stats(store, "empty")
    assert empty.throughput.mean is None and empty.steps is None
    assert "no training intervals" in empty.reasons["throughput"]
    assert empty.final_loss is None and empty.reasons["final_loss"] == "no finite loss logged"
    assert empty.time_to_n_s is None and empty.reasons["mem_peak_gib"]


def test_a_script_run_without_samples_per_s_gives_steps_per_s(store):
    # a user script's records: step and loss only; rate_i = (step_i - step_i-1) / (t_i - t_i-1) = 10 / 2 = 5
    records = [{"t": 2.0 * i, "step": 10 * i, "loss": 1.0} for i in range(1, 8)]
    store_run(store, "script", dict(BASE, mode="script"), records)
    s = run_stats(store, "script")
    assert s.throughput_unit == "steps/s" and s.throughput.mean == pytest.approx(5.0)
    assert s.throughput.n == 6  # the first record has no interval before it


def test_run_price_from_the_host_profiles(store, tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    hosts.add(HostProfile(name="gpu-a", hostname="a", price_per_hour=2.0))
    hosts.add(HostProfile(name="gpu-b", hostname="b", price_per_hour=1.5))
    hosts.add(HostProfile(name="free", hostname="c"))
    store.create_run("multi", hosts=["gpu-a", "gpu-b"])
    store.create_run("unpriced", hosts=["gpu-a", "free"])
    assert analysis.run_price_per_hour(store.get_run("multi"), hosts) == 3.5  # both nodes are billed
    assert analysis.run_price_per_hour(store.get_run("unpriced"), hosts) is None


# -- settings and groups -----------------------------------------------------------------------------


def test_setting_key_ignores_seed_name_and_id_only():
    a = dict(BASE, seed=1, name="a", run_id="x", tags=["t"])
    b = dict(BASE, seed=2, name="b", run_id="y")
    assert setting_key(a, ["local"]) == setting_key(b, ["local"])
    assert setting_key(a, ["local"]) != setting_key(dict(a, precision="bf16"), ["local"])
    assert setting_key(a, ["local"]) != setting_key(a, ["gpu-box"])  # another host is another setting


def test_setting_labels_name_what_differs():
    labels = setting_labels([dict(BASE), dict(BASE, compile="default", precision="bf16", nproc_per_node=2)])
    assert labels == ["compile=off fp32 1×", "compile=default bf16 2×"]
    assert setting_labels([dict(BASE, lr=0.1), dict(BASE, lr=0.2)]) == ["lr=0.1", "lr=0.2"]
    assert setting_labels([BASE]) == ["compile=off fp32 1× workload=mlp"]


def test_compare_groups_repeats_speedup_scaling_and_memory(store):
    for i, rate in enumerate((100.0, 110.0, 120.0)):
        constant_run(store, f"a{i}", rate, dict(BASE, seed=i), mem=1.0)
    for i, rate in enumerate((180.0, 200.0, 220.0)):
        constant_run(store, f"b{i}", rate, dict(BASE, seed=i, nproc_per_node=2), mem=1.5)
    stats = [run_stats(store, r) for r in ("a0", "a1", "a2", "b0", "b1", "b2")]
    c = compare(stats, baseline="a1")
    a, b = c.groups
    assert (a.label, b.label, a.n, b.n, c.baseline) == ("1×", "2×", 3, 3, a.key)
    ta, tb = a.metrics["throughput"], b.metrics["throughput"]
    # A: 100, 110, 120 → geometric mean (100·110·120)^(1/3) = 109.696; std 10; the interval on the log scale
    la = np.log([100.0, 110.0, 120.0])
    assert (ta.mean, ta.std, ta.n, ta.over) == (pytest.approx(1320000 ** (1 / 3)), pytest.approx(10.0), 3, "repeats")
    half_a = 4.302653 * la.std(ddof=1) / math.sqrt(3)
    assert (ta.low, ta.high) == (pytest.approx(math.exp(la.mean() - half_a)), pytest.approx(math.exp(la.mean() + half_a)))
    # B: 180, 200, 220 → geometric mean 199.331, std 20
    lb = np.log([180.0, 200.0, 220.0])
    assert (tb.mean, tb.std) == (pytest.approx(math.exp(lb.mean())), pytest.approx(20.0))
    # speedup R = GM_B / GM_A = exp(m_B − m_A); on the log scale va = var(log a) / 3, vb likewise,
    # Welch df = (va + vb)² / (va² / 2 + vb² / 2), interval R · exp(± t(df) · √(va + vb))
    r = math.exp(lb.mean() - la.mean())
    va, vb = la.var(ddof=1) / 3, lb.var(ddof=1) / 3
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    assert df == pytest.approx(3.97, abs=0.01)
    half = t_quantile(df) * math.sqrt(va + vb)
    s = c.speedup[b.key]
    assert s.value == pytest.approx(r) and s.n == (3, 3) and s.over == "repeats" and s.method == "log-t"
    assert (s.low, s.high) == (pytest.approx(r * math.exp(-half)), pytest.approx(r * math.exp(half)))
    assert 2.776 < t_quantile(df) < 3.182  # between the table's t(4) and t(3)
    assert c.speedup[a.key].value == 1.0 and c.speedup[a.key].reason == "the baseline"
    # scaling efficiency of 2 processes: R / 2 = 0.90909, the interval halved too; 1 process: exactly 1
    e = c.scaling[b.key]
    assert e.value == pytest.approx(r / 2) and e.low == pytest.approx(r * math.exp(-half) / 2)
    assert c.scaling[a.key].value == 1.0
    # memory: 1 - 1.5 / 1.0 = -0.5 (50% more), no spread → the interval is the point
    m = c.memory_saving[b.key]
    assert (m.value, m.low, m.high) == (pytest.approx(-0.5), pytest.approx(-0.5), pytest.approx(-0.5))


def test_compare_single_runs_have_no_interval_at_the_group_level(store):
    constant_run(store, "x", 100.0, BASE)
    store_run(store, "y", dict(BASE, precision="bf16"), [
        {"t": float(s), "phase": "train", "step": s, "samples_per_s": v, "warmup": False}
        for s, v in enumerate([150.0, 150.0, 160.0, 140.0, 150.0, 150.0, 160.0, 140.0], start=1)])
    c = compare([run_stats(store, "x"), run_stats(store, "y")])
    y = c.groups[1]
    # y's throughput: τ̄ = (4/150 + 2/160 + 2/140) / 8 → 1 / τ̄ = 149.666; the run keeps its interval over its
    # 8 intervals, the group of one run has none (an interval needs ≥ 3 repeats)
    tau_mean = (4 / 150 + 2 / 160 + 2 / 140) / 8
    ty = y.metrics["throughput"]
    assert ty.mean == pytest.approx(1 / tau_mean) and ty.mean == pytest.approx(149.666, abs=1e-3)
    assert (ty.n, ty.over, ty.low, ty.high) == (1, "repeats", None, None)
    assert y.runs[0].throughput.n == 8 and y.runs[0].throughput.low < ty.mean < y.runs[0].throughput.high
    s = c.speedup[y.key]
    assert s.value == pytest.approx(ty.mean / 100) and s.low is None and "≥ 3 repeats" in s.reason
    # both are 1-process runs of their own settings: efficiency exactly 1, nothing to scale against
    assert c.scaling[y.key].value == 1.0 and c.scaling[y.key].reason == "the 1-process run"


def test_ratio_edge_cases():
    assert ratio(Estimate(1.0, 0.1, 0.1, 3, "repeats"), Estimate(0.0, 0.1, 0.1, 3, "repeats")).reason == \
        "the baseline's mean is zero"
    none = ratio(Estimate(None, reason="never settled"), Estimate(2.0, 0.1, 0.1, 3, "repeats"))
    assert none.value is None and none.reason == "never settled"
    single = ratio(Estimate(3.0, n=1, over="repeats", reason="one value"), Estimate(2.0, 0.1, 0.1, 3, "repeats"))
    assert single.value == 1.5 and single.low is None and "no interval" in single.reason


def test_compare_refuses_an_unknown_baseline(store):
    constant_run(store, "x", 100.0, BASE)
    with pytest.raises(ValueError, match="baseline 'nope'"):
        compare([run_stats(store, "x")], baseline="nope")
    with pytest.raises(ValueError, match="at least one run"):
        compare([])


def test_the_noise_band_widens_the_tolerance_on_noisy_runs():
    x = np.array([130.0, 90, 110, 90, 110, 90, 110, 90, 110, 90, 110, 90])
    # m = 12, w = 3, block f = max(3, ceil(12/4)) = 3 → M = median(90, 110, 90) = 90
    # d = -40, then +20, -20 alternating (five each); sorted -40, -20 × 5, 20 × 5 → median(d) = -20
    # |d + 20| = 20, 40 × 5, 0 × 5 → MAD 20 → σ = 1.4826 · 20 / √2 = 20.967
    # δ = max(0.05 · 90 = 4.5, 3 · 1.2533 · 20.967 · √(1/3 + 1/3) = 64.38) = 64.38
    # rolling medians are 110 or 90, all within 64.38 of 90 → start 0; x[0] = 130 is 40 away → kept
    assert noise_sigma(x) == pytest.approx(1.4826 * 20 / math.sqrt(2))
    assert steady_start(x) == (0, "")
    # without the noise term δ = 4.5: windows j = 0, 2, 4, 6, 8 have median 110 (off), the odd ones 90;
    # the last off is j = 8 → start 9; x[9] = 90 is within → 3 steady values, ≥ 20% of 12 = 2.4
    assert steady_start(x, SteadyRule(noise_z=0.0)) == (9, "")


def _rates_run(store, run_id, rates, steps=None):
    """A run whose intervals after its 2 warm-up steps have these throughputs (no compile)."""
    rates = [50.0, 50.0] + list(rates)
    metrics = [{"t": 1000.0 + s, "phase": "train", "step": s + 1, "loss": 1.0, "samples_per_s": r, "mem_peak_gib": 1.0,
                "warmup": s < 2} for s, r in enumerate(rates)]
    return store_run(store, run_id, dict(BASE, steps=steps or len(rates)), metrics, state="stopped")


@pytest.mark.parametrize("intervals", [FALLBACK_MIN_INTERVALS - 1, FALLBACK_MIN_INTERVALS, 40])
def test_a_run_that_never_settled_falls_back_on_all_its_intervals_when_it_has_enough(store, intervals):
    # a level, then a jump at the very end: only the last interval is near the final median → never settled
    rates = [10.0] * (intervals - 2) + [90.0, 50.0]
    _rates_run(store, "rough", rates)
    strict = analysis.run_stats(store, "rough")
    assert strict.throughput.mean is None and strict.throughput.reason.startswith("throughput never settled")
    result = analysis.compute_comparison(store, None, ["rough"])
    est = result.comparison.groups[0].metrics["throughput"]
    if intervals < FALLBACK_MIN_INTERVALS:  # too little to stand for the run: no value, the strict reason
        assert est.mean is None and est.reason == strict.throughput.reason
        return
    expected = 1.0 / np.mean(1.0 / np.array(rates))  # work over time across every interval after warm-up
    assert est.mean == pytest.approx(expected) and est.n == 1 and est.over == "repeats"  # one run: no interval
    assert result.comparison.groups[0].runs[0].throughput.n == intervals
    assert est.reason == fallback_note(intervals, strict.throughput.reason)
    assert est.reason.startswith(f"from {intervals} intervals after warm-up, not settled (only the last ")
    assert "throughput" not in result.comparison.groups[0].runs[0].reasons
    # a speedup against it says so; a settled run's own value has no such note
    constant_run(store, "steady", 100.0, dict(BASE, steps=30), steps=30)
    comparison = analysis.compute_comparison(store, None, ["steady", "rough"]).comparison
    rough = comparison.groups[1].key
    assert comparison.speedup[rough].value == pytest.approx(expected / 100.0)
    assert comparison.speedup[rough].reason.startswith("not settled: from")
    assert comparison.groups[0].metrics["throughput"].reason == ""
