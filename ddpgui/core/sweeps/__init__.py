"""Sweeps: a matrix of runs (settings × repeats × hosts), queued per host, resumable; re-exports plan, progress, runner."""
from .plan import SweepError, SweepSpec, plan_sweep
from .progress import SweepProgress, summary_line, sweep_progress
from .runner import SweepRunner

__all__ = ["SweepError", "SweepProgress", "SweepRunner", "SweepSpec", "plan_sweep", "summary_line", "sweep_progress"]
