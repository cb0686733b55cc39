"""Statistics of stored runs (docs/ANALYSIS.md); re-exports the public names of its modules for ``analysis.x``."""
from .comparison import (
    HIGHER_IS_BETTER,
    CompareResult,
    Comparison,
    Curve,
    GroupStats,
    compare,
    compute_comparison,
    differing_settings,
    family_key,
    group_stats,
    load_curve,
)
from .run_stats import RUN_METRICS, RunStats, common_steps, run_price_per_hour, run_stats, world_size
from .settings import HOSTS_KEY, REPEAT_KEYS, setting_key, setting_labels, settings_of
from .stats import CONFIDENCE, Estimate, Ratio, estimate, rate_estimate, ratio, t_cdf, t_quantile
from .steady import DEFAULT_RULE, SteadyRule, events_cut_step, noise_sigma, steady_start

__all__ = ["CONFIDENCE", "DEFAULT_RULE", "HIGHER_IS_BETTER", "HOSTS_KEY", "REPEAT_KEYS", "RUN_METRICS",
           "CompareResult", "Comparison", "Curve", "Estimate", "GroupStats", "Ratio", "RunStats", "SteadyRule",
           "common_steps", "compare", "compute_comparison", "differing_settings", "estimate", "events_cut_step",
           "family_key", "group_stats", "load_curve", "noise_sigma", "rate_estimate", "ratio", "run_price_per_hour",
           "run_stats", "setting_key", "setting_labels", "settings_of", "steady_start", "t_cdf", "t_quantile",
           "world_size"]
