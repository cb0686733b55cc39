"""Each summarised metric in words, with its unit: the one source of the names a reader sees.

The files written for programs (summary.csv) keep the metrics' keys (``mem_peak_gib``) and a unit column;
what people read (the app's Compare table) says ``peak memory (GiB)``::

    metric_words("time_to_n_s", comparison)      # "time to 200 steps (s)"
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .comparison import Comparison

#: Unit of each summarised metric ("{throughput}" is the runs' own throughput unit).
UNITS = {"throughput": "{throughput}", "mem_peak_gib": "GiB", "compile_s": "s", "time_to_n_s": "s",
         "final_loss": "", "best_loss": "", "gpu_util_pct": "%", "energy_j": "J", "energy_per_1000_steps_j": "J",
         "duration_s": "s", "cost": "price unit", "cost_per_1000_steps": "price unit",
         "speedup": "×", "memory_saving": "fraction", "scaling_efficiency": "fraction"}

#: Each metric in words, without its unit ("{n}": N of "time to N steps").
WORDS = {"throughput": "steady throughput", "mem_peak_gib": "peak memory", "compile_s": "compile time",
         "time_to_n_s": "time to {n} steps", "final_loss": "final loss", "best_loss": "best loss",
         "gpu_util_pct": "GPU utilisation", "energy_j": "energy", "energy_per_1000_steps_j": "energy per 1000 steps",
         "duration_s": "duration", "cost": "cost", "cost_per_1000_steps": "cost per 1000 steps",
         "speedup": "speedup vs baseline", "memory_saving": "memory saving vs baseline",
         "scaling_efficiency": "scaling efficiency"}


def metric_unit(metric: str, comparison: Comparison) -> str:
    """The unit of a summarised metric (throughput in the compared runs' own unit)."""
    unit = UNITS.get(metric, "")
    return comparison.runs[0].throughput_unit if unit == "{throughput}" else unit


def metric_words(metric: str, comparison: Comparison) -> str:
    """The metric in words with its unit in brackets: "peak memory (GiB)", "time to 200 steps (s)", "final loss"
    (a unitless one has none); a metric not listed keeps its key."""
    n = next((r.n_steps for r in comparison.runs if r.n_steps), None)
    words = WORDS.get(metric, metric).format(n=n if n is not None else "N")
    unit = metric_unit(metric, comparison)
    return f"{words} ({unit})" if unit else words
