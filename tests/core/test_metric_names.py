"""Metrics in words with their units: one source for what people read, the same units as summary.csv's."""
import csv

from ddpgui.core.analysis.comparison import compare
from ddpgui.core.analysis.metric_names import UNITS, WORDS, metric_unit, metric_words
from ddpgui.core.analysis.run_stats import RUN_METRICS, RunStats
from ddpgui.core.analysis.stats import Estimate
from ddpgui.core.outputs.tables import write_summary_csv


def _stats(run_id: str, unit: str = "samples/s", n_steps: int | None = 200) -> RunStats:
    return RunStats(run_id, run_id, {"precision": "fp32", "seed": 0}, ["local"], {}, 1, 200,
                    Estimate(100.0, n=1, over="intervals"), throughput_unit=unit, n_steps=n_steps,
                    time_to_n_s=20.0, mem_peak_gib=1.5)


def test_every_metric_and_ratio_has_words_and_a_unit():
    comparison = compare([_stats("a")])
    for metric in (*RUN_METRICS, "speedup", "memory_saving", "scaling_efficiency"):
        assert metric in WORDS and metric in UNITS, metric
        words = metric_words(metric, comparison)
        assert "_" not in words and words.startswith(WORDS[metric].format(n=200)), words
        unit = metric_unit(metric, comparison)
        assert words.endswith(f" ({unit})") if unit else "(" not in words, words


def test_words_with_units_and_n_of_time_to_n_steps():
    comparison = compare([_stats("a", unit="steps/s", n_steps=350)])
    assert metric_words("mem_peak_gib", comparison) == "peak memory (GiB)"
    assert metric_words("throughput", comparison) == "steady throughput (steps/s)"
    assert metric_words("time_to_n_s", comparison) == "time to 350 steps (s)"
    assert metric_words("energy_per_1000_steps_j", comparison) == "energy per 1000 steps (J)"
    assert metric_words("final_loss", comparison) == "final loss"
    assert metric_words("speedup", comparison) == "speedup vs baseline (×)"
    assert metric_words("time_to_n_s", compare([_stats("b", n_steps=None)])) == "time to N steps (s)"


def test_summary_csv_keeps_the_keys_with_the_same_units(tmp_path):
    comparison = compare([_stats("a")])
    with open(write_summary_csv(comparison, tmp_path / "summary.csv"), newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["level"] == "group"]
    assert {r["metric"] for r in rows} == {*RUN_METRICS, "speedup", "memory_saving", "scaling_efficiency"}
    assert all(r["unit"] == metric_unit(r["metric"], comparison) for r in rows)
