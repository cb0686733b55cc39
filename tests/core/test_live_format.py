"""Header numbers: significant digits, windowed throughput consistent with steps/s × global batch, compiling."""
import json
from pathlib import Path

import pytest

from ddpgui.core.runs.live import RATE_WINDOW_S, LiveRun, format_number, format_rate, shown_rates, stats_line

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "compile"


@pytest.mark.parametrize("value,text", [(5e-5, "5.00e-05"), (0.137, "0.137"), (1.234e-4, "1.23e-04"), (2.3456, "2.35"),
                                        (123.4, "123"), (9.999, "10.0"), (0.0, "0"), (None, "–"), (-0.5, "-0.500"),
                                        (1.5e5, "1.50e+05"), (float("nan"), "nan")])
def test_numbers_keep_three_significant_digits(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize("value,text", [(0.5, "0.500 steps/s"), (99.64, "99.6 steps/s"), (320.0, "320 steps/s"),
                                        (999.6, "1.00k steps/s"), (6551.12, "6.55k steps/s"),
                                        (12_345.0, "12.3k steps/s"), (999_999.7, "1.00M steps/s"), (None, "- steps/s")])
def test_rates_keep_three_significant_digits(value, text):
    assert format_rate(value, "steps/s") == text


def test_an_ended_runs_two_rates_come_from_one_mean():
    """The walk-through's run: 99.6 steps/s since its first (warm-up) record beside the runner's steady 6,551
    samples/s at a global batch of 64. Both now come from the steady mean: 6551 / 64 = 102 steps/s."""
    live = LiveRun(total_steps=200, state="running")
    live.add_metric(_interval(0.0, 1, 640.0, batch=64, warmup=True))  # the slow first step
    for i in range(1, 200):
        live.add_metric(_interval(0.0 + 0.00998 * i + 0.01 * (i > 0), 1 + i, 6551.0, batch=64))
    live.add_event({"event": "summary", "steady_samples_per_s": 6551.0})
    live.add_event({"event": "finished", "t": 3.0})
    steps_per_s, samples_per_s = shown_rates(live, active=False)
    assert live.steps_per_s != pytest.approx(steps_per_s, rel=0.01)  # what the header said before
    assert samples_per_s == 6551.0 and steps_per_s * 64 == pytest.approx(samples_per_s)
    line = stats_line(live, active=False)
    assert "102 steps/s" in line and "6.55k samples/s" in line, line


def test_the_header_never_reads_loss_zero_for_a_small_loss():
    live = LiveRun(total_steps=10, state="running")
    live.add_metric({"t": 1.0, "step": 1, "loss": 5e-5, "warmup": False})
    assert "loss 5.00e-05" in stats_line(live, active=True) and "0.0000" not in stats_line(live, active=True)


def _interval(t, step, rate, batch=8, warmup=False):
    return {"t": t, "step": step, "samples_per_s": rate, "global_batch": batch, "warmup": warmup, "loss": 1.0}


def test_live_samples_per_s_is_the_window_mean_and_agrees_with_steps_per_s():
    live = LiveRun(total_steps=10_000, state="running")
    live.add_metric(_interval(0.0, 1, 4.0, warmup=True))  # compile: excluded
    t, step = 0.0, 1
    for i in range(200):  # alternately fast and slow intervals of 10 steps, 0.1 s and 0.4 s
        dt = 0.1 if i % 2 else 0.4
        t, step = t + dt, step + 10
        live.add_metric(_interval(t, step, 8 * 10 / dt))
    steps_per_s, samples_per_s = live.window_rates
    assert samples_per_s == pytest.approx(8 * steps_per_s)
    assert steps_per_s == pytest.approx(10 / 0.25, rel=0.05)  # the window's mean, not the last (fast) interval
    assert samples_per_s < live.samples_per_s  # the instantaneous last value is the fast one: 800
    assert live.recent[-1][0] - live.recent[1][0] < RATE_WINDOW_S <= live.recent[-1][0] - live.recent[0][0]
    line = stats_line(live, active=True)
    assert "40.0 steps/s" in line and "320 samples/s" in line, line


def test_without_a_global_batch_the_window_weights_each_interval_by_its_time():
    live = LiveRun(state="running")
    for i, (t, rate) in enumerate([(0.0, 1.0), (1.0, 100.0), (4.0, 200.0)]):
        live.add_metric({"t": t, "step": i + 1, "samples_per_s": rate, "warmup": i == 0})
    assert live.window_rates[1] == pytest.approx((1 * 100 + 3 * 200) / 4)


def _records(name):
    return [json.loads(line) for line in (FIXTURE / name).read_text().splitlines()]


def test_a_recorded_compiled_run_reads_compiling_with_its_time_until_compile_end():
    events, metrics = _records("events.jsonl"), _records("metrics.jsonl")
    live = LiveRun(total_steps=30, state="running")
    start, = [e for e in events if e["event"] == "compile_start"]
    for event in events[:events.index(start) + 1]:
        live.add_event(event)
    assert live.compiling
    assert stats_line(live, active=True, now=start["t"] + 12.4).startswith("compiling · 00:12")
    assert "step 0" not in stats_line(live, active=True, now=start["t"] + 12.4)
    end, = [e for e in events if e["event"] == "compile_end"]
    live.add_event(end)
    for rec in metrics:
        live.add_metric(rec)
    assert not live.compiling
    line = stats_line(live, active=True)
    assert line.startswith("step 30/30") and "compile 2.0 s" in line, line


def test_an_ended_run_is_not_compiling():
    live = LiveRun(state="running")
    live.add_event({"event": "compile_start", "t": 5.0})
    live.add_event({"event": "stopped", "t": 6.0})
    assert not live.compiling and not stats_line(live, active=False).startswith("compiling")
