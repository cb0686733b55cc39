"""Global rank 0's writer of a run's events and metrics, and the no-op logger every other rank gets instead."""
import os
from typing import Callable, Optional

from remote_runner.spools import METRICS, SpoolWriter, append_event


class RunLog:
    """The events and metrics records of the run in ``run_dir`` (global rank 0 only: docs/PROTOCOL.md).

    ``metrics``, when given, is written instead of the metrics spool: anything with SpoolWriter's ``write``
    and ``close`` (the benchmarks' no-spool hook gives one that writes nothing).
    """

    def __init__(self, run_dir: str, metrics: Optional[object] = None):
        self.run_dir = run_dir
        self.metrics = metrics if metrics is not None else SpoolWriter(os.path.join(run_dir, METRICS))

    def event(self, name: str, **fields: object) -> None:
        append_event(self.run_dir, name, **fields)

    def metric(self, record: dict) -> None:
        self.metrics.write(record)

    def close(self) -> None:
        self.metrics.close()


class NullLog:
    """What every rank but global rank 0 logs with: any method of a log, called with anything, does nothing.

    The loop then calls its log on every rank alike, and only rank 0's writes anything.
    """

    def __getattr__(self, name: str) -> Callable[..., None]:
        return _nothing


def _nothing(*args: object, **kwargs: object) -> None:
    return None
