"""The probe a launch waits for: ``python -m remote_runner probe`` with torch's facts read again (--fresh, an
import of torch) against read from the probe's cache, interleaved in pairs in one run.

    python -m benchmarks.bench_probe
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import Row, median, percentile

PAIRS = 8


def _probe(cache: str, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "remote_runner", "probe", *args], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, XDG_CACHE_HOME=cache), timeout=300)
    return time.perf_counter() - start


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as cache:
        _probe(cache)  # fills the cache
        fresh, cached = [], []
        for _ in range(PAIRS):
            fresh.append(_probe(cache, "--fresh"))
            cached.append(_probe(cache))
    ratios = sorted(c / f for c, f in zip(cached, fresh))
    spread = lambda xs: f"p10 {percentile(xs, 10):.2f}, p90 {percentile(xs, 90):.2f}, min {min(xs):.2f}"  # noqa: E731
    return [
        Row("probe before a launch, torch imported (--fresh)", median(fresh), "s", "", None,
            f"{PAIRS} probes: {spread(fresh)} s"),
        Row("probe before a launch, torch's facts from the cache", median(cached), "s", "", None,
            f"{PAIRS} probes: {spread(cached)} s"),
        Row("probe: cached / fresh", median(ratios), "ratio", "< 0.25", median(ratios) < 0.25,
            f"pairs {ratios[0]:.2f}-{ratios[-1]:.2f}"),
    ]


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
