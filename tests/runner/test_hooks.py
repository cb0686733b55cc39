"""remote_runner.hooks and ranklog: the test and benchmark hooks read once from the environment, the no-op log."""
import itertools
import json

import pytest

from remote_runner import hooks
from remote_runner.hooks import Hooks, NoSpool, TimedSpool
from remote_runner.ranklog import NullLog, RunLog
from remote_runner.spools import METRICS, SpoolWriter


def test_no_environment_means_no_hooks(monkeypatch):
    for name in (hooks.FAIL_RANK_ENV, hooks.FAIL_STEP_ENV, hooks.BENCH_NO_SPOOL_ENV, hooks.BENCH_TIMINGS_ENV):
        monkeypatch.delenv(name, raising=False)
    assert Hooks.from_environ(0) == Hooks(0)
    stream = iter(range(3))
    assert Hooks(0).batches(stream, 2) is stream


def test_the_failing_rank_fails_when_its_step_asks_for_its_first_batch(monkeypatch):
    monkeypatch.setenv(hooks.FAIL_RANK_ENV, "1")
    monkeypatch.setenv(hooks.FAIL_STEP_ENV, "3")
    assert Hooks.from_environ(0).fail_step is None  # another rank
    hook = Hooks.from_environ(1)
    stream = hook.batches(itertools.count(), grad_accum=2)
    assert [next(stream) for _ in range(4)] == [0, 1, 2, 3]  # steps 1 and 2, two micro-batches each
    with pytest.raises(RuntimeError, match=r"^injected failure on rank 1 at step 3 \(DDPGUI_TEST_FAIL_STEP\)$"):
        next(stream)


@pytest.mark.parametrize("step", ["0", "-1"])
def test_a_step_the_loop_never_starts_never_fails(monkeypatch, step):
    monkeypatch.setenv(hooks.FAIL_RANK_ENV, "0")
    monkeypatch.setenv(hooks.FAIL_STEP_ENV, step)
    assert [x for _, x in zip(range(5), Hooks.from_environ(0).batches(itertools.count(), 1))] == [0, 1, 2, 3, 4]


def test_bench_hooks_skip_the_spool_and_write_the_step_rate(monkeypatch, tmp_path):
    monkeypatch.setenv(hooks.BENCH_NO_SPOOL_ENV, "1")
    monkeypatch.setenv(hooks.BENCH_TIMINGS_ENV, str(tmp_path / "timings.json"))
    hook = Hooks.from_environ(0)
    assert isinstance(hook.metrics_spool(str(tmp_path / METRICS)), NoSpool)
    assert not (tmp_path / METRICS).exists()
    hook.steady_rate(None, 64)  # no steady state: nothing written
    assert not (tmp_path / "timings.json").exists()
    hook.steady_rate(640.0, 64)
    assert json.loads((tmp_path / "timings.json").read_text()) == {"steady_steps_per_s": 10.0}
    writer = Hooks(0).metrics_spool(str(tmp_path / METRICS))
    assert isinstance(writer, SpoolWriter)
    writer.close()


def test_the_timings_hook_counts_the_time_of_the_metrics_writes(monkeypatch, tmp_path):
    monkeypatch.setenv(hooks.BENCH_TIMINGS_ENV, str(tmp_path / "timings.json"))
    hook = Hooks.from_environ(0)
    spool = hook.metrics_spool(str(tmp_path / METRICS))
    assert isinstance(spool, TimedSpool)
    for step in range(1, 4):
        spool.write({"step": step, "loss": 1.0 / step})
    spool.close()
    assert [json.loads(line)["step"] for line in (tmp_path / METRICS).read_text().splitlines()] == [1, 2, 3]
    hook.steady_rate(640.0, 64, spool)
    timings = json.loads((tmp_path / "timings.json").read_text())
    assert timings["steady_steps_per_s"] == 10.0 and timings["spool_writes"] == 3
    assert 0 < timings["spool_write_s"] < 1 and 0 <= timings["spool_write_cpu_s"] < 1


def test_rank_zero_writes_and_the_null_log_does_nothing(tmp_path):
    log = RunLog(str(tmp_path))
    log.event("inference_start", world_size=1)
    log.metric({"step": 1})
    log.close()
    assert [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()] == \
        ["inference_start"]
    assert json.loads((tmp_path / METRICS).read_text())["step"] == 1
    null = NullLog()
    assert null.event("x", a=1) is None and null.interval(1, 0, [], 0.1) is None and null.summary(3) is None
