"""The run store (one SQLite file of runs, sweeps and what runs wrote); re-exports the names the rest imports."""
from __future__ import annotations

from .records import (
    CELL_FINAL_STATES,
    SWEEP_FINAL_STATES,
    RunNotFound,
    RunRecord,
    StoreCorruptError,
    StoreError,
    StoreFileError,
    StoreFullError,
    StoreGapError,
    StoreReadOnlyError,
    StoreResult,
    StoreVersionError,
    SweepCell,
    SweepNotFound,
    SweepRecord,
)
from .run_store import STORE_FILE, RunStore

__all__ = [
    "CELL_FINAL_STATES", "STORE_FILE", "SWEEP_FINAL_STATES", "RunNotFound", "RunRecord", "RunStore",
    "StoreCorruptError", "StoreError", "StoreFileError", "StoreFullError", "StoreGapError", "StoreReadOnlyError",
    "StoreResult", "StoreVersionError", "SweepCell",
    "SweepNotFound", "SweepRecord",
]
