"""Rows of the benchmark table and small statistics helpers."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Row:
    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None
    note: str = ""


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on sorted values."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values)


def cpu_seconds(pid: int) -> float:
    """The process's own CPU seconds (user + system; not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(predicate, timeout: float, what: str = "the benchmark's runs") -> None:
    """Poll ``predicate`` every 0.1 s; RuntimeError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not get there in time")
        time.sleep(0.1)
