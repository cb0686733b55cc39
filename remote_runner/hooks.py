"""Test and benchmark hooks: read from the environment once, in ``train.main``; the training loop never reads it.

- ``DDPGUI_TEST_FAIL_RANK=R`` with ``DDPGUI_TEST_FAIL_STEP=S``: rank R raises ``RuntimeError("injected failure
  ...")`` at the start of step S; the tests use it to prove that the other ranks do not hang.
- ``DDPGUI_TEST_STEP_SECONDS=S``: every step takes at least S seconds (the loop waits before fetching the step's
  batch), so a test that needs a settled throughput gets one on a loaded machine.
- ``DDPGUI_BENCH_NO_SPOOL`` and ``DDPGUI_BENCH_TIMINGS=PATH`` (benchmarks/bench_runner.py measures what the spool
  costs): skip the metrics writes, and write the steady-state step rate to PATH, with the time rank 0 spent
  in the metrics writes when it made them.
"""
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional, TypeVar

from remote_runner.spools import SpoolWriter

FAIL_RANK_ENV = "DDPGUI_TEST_FAIL_RANK"
FAIL_STEP_ENV = "DDPGUI_TEST_FAIL_STEP"
STEP_SECONDS_ENV = "DDPGUI_TEST_STEP_SECONDS"
#: Benchmark hooks (benchmarks/bench_runner.py measures what the spool costs): skip the
#: metrics writes, and write the steady-state step rate to the named file.
BENCH_NO_SPOOL_ENV = "DDPGUI_BENCH_NO_SPOOL"
BENCH_TIMINGS_ENV = "DDPGUI_BENCH_TIMINGS"

T = TypeVar("T")


class NoSpool:
    """Stands in for the metrics SpoolWriter in the no-spool benchmark."""

    def write(self, record: dict) -> int:
        return 0

    def close(self) -> None:
        pass


class TimedSpool:
    """The metrics SpoolWriter with the time spent in its writes counted (the timings benchmark's in-run measure):
    wall time, and this thread's CPU time (which a preemption by the other rank's threads does not inflate)."""

    def __init__(self, writer: SpoolWriter):
        self.writer = writer
        self.writes = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def write(self, record: dict) -> int:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.writer.write(record)
        finally:
            self.seconds += time.perf_counter() - started
            self.cpu_seconds += time.thread_time() - cpu
            self.writes += 1

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class Hooks:
    """The hooks this rank runs with; ``Hooks()`` is none."""

    rank: int = 0
    fail_step: Optional[int] = None  # this rank fails at the start of this step
    no_spool: bool = False  # metrics are not written
    timings_path: Optional[str] = None  # where the steady-state step rate goes
    step_seconds: float = 0.0  # every step takes at least this long

    @classmethod
    def from_environ(cls, rank: int) -> "Hooks":
        return cls(rank, injected_failure_step(rank), bool(os.environ.get(BENCH_NO_SPOOL_ENV)),
                   os.environ.get(BENCH_TIMINGS_ENV) or None, float(os.environ.get(STEP_SECONDS_ENV) or 0.0))

    def batches(self, batches: Iterator[T], grad_accum: int) -> Iterator[T]:
        """The training loop's stream of micro-batches, failing when step ``fail_step`` asks for its first."""
        if self.step_seconds > 0:
            batches = self._paced(batches, grad_accum)
        if self.fail_step is None or self.fail_step < 1:  # a step the loop never starts never fails
            return batches
        return self._failing(batches, grad_accum)

    def _paced(self, batches: Iterator[T], grad_accum: int) -> Iterator[T]:
        due = time.perf_counter()
        for i, batch in enumerate(batches):
            if i % grad_accum == 0:
                time.sleep(max(0.0, due - time.perf_counter()))
                due = max(due, time.perf_counter() - self.step_seconds) + self.step_seconds
            yield batch

    def _failing(self, batches: Iterator[T], grad_accum: int) -> Iterator[T]:
        for _ in range((self.fail_step - 1) * grad_accum):  # the micro-batches of the steps before it
            yield next(batches)
        raise RuntimeError("injected failure on rank %d at step %d (%s)" % (self.rank, self.fail_step, FAIL_STEP_ENV))

    def metrics_spool(self, path: str) -> object:
        """The metrics spool at ``path``: a SpoolWriter, a NoSpool in the no-spool benchmark, a TimedSpool in
        the timings benchmark."""
        if self.no_spool:
            return NoSpool()
        return TimedSpool(SpoolWriter(path)) if self.timings_path else SpoolWriter(path)

    def steady_rate(self, steady_samples_per_s: Optional[float], global_batch: int, spool: object = None) -> None:
        """Write the run's steady-state step rate for the benchmark, when it asked and there is one, and the
        writes and seconds of a TimedSpool ``spool``."""
        if self.timings_path and steady_samples_per_s:
            timings = {"steady_steps_per_s": steady_samples_per_s / global_batch}
            if isinstance(spool, TimedSpool):
                timings.update(spool_writes=spool.writes, spool_write_s=spool.seconds, spool_write_cpu_s=spool.cpu_seconds)
            with open(self.timings_path, "w") as fh:
                json.dump(timings, fh)


def injected_failure_step(rank: int) -> Optional[int]:
    """The step at which this rank must fail (the test hook), or None."""
    if os.environ.get(FAIL_RANK_ENV) == str(rank) and os.environ.get(FAIL_STEP_ENV):
        return int(os.environ[FAIL_STEP_ENV])
    return None
