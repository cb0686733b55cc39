"""The sink every reader of a script's output feeds: names, one source per series, the run's loss, steps that
keep counting through epochs, and the report of a run that gave no metric (remote_runner/scriptread/sink.py)."""
import json

import pytest

from remote_runner.scriptread.sink import FILE_GRACE_S, MetricSink, canonical, loss_rank
from remote_runner.spools import SpoolWriter


class Events(list):
    def __call__(self, event, /, **fields):
        self.append(dict(fields, event=event))

    def named(self, name):
        return [e for e in self if e["event"] == name]


@pytest.fixture
def spool(tmp_path):
    return tmp_path / "metrics.jsonl"


def make_sink(spool, **kwargs):
    events = Events()
    kwargs.setdefault("now", lambda: 0.0)
    return MetricSink(SpoolWriter(str(spool)), events, **kwargs), events


def records(spool):
    return [json.loads(line) for line in spool.read_text().splitlines()] if spool.exists() else []


@pytest.mark.parametrize("name, expected", [
    ("Loss", "loss"), ("train/loss", "loss"), ("eval/loss", "eval_loss"), ("test/accuracy", "test_accuracy"),
    ("learning_rate", "lr"), ("train/learning_rate", "lr"), ("val loss", "val_loss"), ("train/", "train/"),
    ("Loss/train", "loss"), ("Loss/test", "test_loss"), ("Accuracy/val", "val_accuracy"), ("a/b/train", "a/b/train"),
    ("/train", "/train"),
])
def test_canonical_names(name, expected):
    assert canonical(name) == expected


def test_what_counts_as_the_training_loss():
    ranked = sorted((loss_rank(n), n) for n in ("val_loss", "train_loss", "loss", "eval_loss", "my_loss", "acc")
                    if loss_rank(n) is not None)
    assert [n for _, n in ranked] == ["loss", "train_loss", "my_loss"]


def test_the_first_loss_like_series_becomes_loss_and_its_source_is_said(spool):
    sink, events = make_sink(spool, world_size=2)
    sink.printed("stdout", {"train_loss": 0.5, "val_loss": 0.7}, step=1)
    sink.printed("stdout", {"train_loss": 0.4}, step=2)
    got = records(spool)
    assert [(r["step"], r["loss"]) for r in got] == [(1, 0.5), (2, 0.4)]
    assert got[0]["val_loss"] == 0.7 and "train_loss" not in got[0]
    assert got[0]["src"] == "stdout" and got[0]["world_size"] == 2 and got[0]["phase"] == "script"
    loss = [e for e in events.named("series") if e.get("loss")]
    assert loss == [{"event": "series", "name": "loss", "from": "train_loss", "source": "printed lines (stdout)",
                     "loss": True}]


def test_a_chosen_loss_series_wins_and_a_plain_loss_keeps_its_values_apart(spool):
    sink, events = make_sink(spool, loss_series="val_loss")
    sink.printed("stdout", {"loss": 0.5, "val_loss": 0.7}, step=1)
    (rec,) = records(spool)
    assert rec["loss"] == 0.7 and rec["orig_loss"] == 0.5 and "val_loss" not in rec


def test_a_value_from_a_second_source_is_shown_once(spool):
    sink, events = make_sink(spool)
    sink.printed("stdout", {"loss": 0.5123, "lr": 1e-3}, step=2)
    # Transformers' TensorBoard callback logs the same dict as train/loss, train/learning_rate, plus one more
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 2, {"train/loss": 0.51234, "train/learning_rate": 1e-3,
                                                               "train/grad_norm": 1.5}, t=100.0)
    sink.release(everything=True)
    got = records(spool)
    assert got[0]["loss"] == 0.5123
    assert got[1] == {**got[1], "step": 2, "grad_norm": 1.5, "src": "tensorboard", "t": 100.0}
    assert "loss" not in got[1] and "lr" not in got[1]
    also = [e for e in events.named("series") if "also" in e]
    assert {(e["name"], e["also"]) for e in also} == {("loss", "TensorBoard tag train/loss"),
                                                      ("lr", "TensorBoard tag train/learning_rate")}
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 4, {"train/loss": 0.4}, t=101.0)
    assert len(records(spool)) == 2  # a record with nothing of its own is not written
    assert len([e for e in events.named("series") if "also" in e]) == 2  # said once


def test_a_per_epoch_step_keeps_counting(spool):
    sink, _ = make_sink(spool)
    for epoch in range(3):
        for step in (0, 1, 2):
            sink.printed("stdout", {"loss": 1.0, "epoch": epoch}, step=step)
    got = records(spool)
    assert [r["step"] for r in got] == list(range(9))
    assert [r.get("printed_step") for r in got] == [None, None, None, 0, 1, 2, 0, 1, 2]
    assert [r["epoch"] for r in got] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_a_one_based_counter_that_restarts_continues_after_the_last_step(spool):
    sink, _ = make_sink(spool)
    for step in (1, 2, 3, 1, 2, 3):
        sink.printed("stdout", {"loss": 1.0}, step=step)
    assert [r["step"] for r in records(spool)] == [1, 2, 3, 4, 5, 6]


def test_lines_without_a_step_take_the_bars_step_else_their_count(spool):
    sink, _ = make_sink(spool)
    sink.printed("stdout", {"loss": 1.0})
    sink.printed("stdout", {"loss": 0.9})
    assert [r["step"] for r in records(spool)] == [1, 2]
    other, _ = make_sink(spool.with_name("b.jsonl"))
    for n in (1, 2, 3, 4, 5):
        other.bar_step("tqdm:top:", n, main=True)
    other.printed("stdout", {"loss": 0.5})  # Transformers: the log dict after its bar reached 5
    for n in (1, 2):  # the next epoch's bar
        step = other.bar_step("tqdm:top:", n, main=True)
    assert step == 7
    other.bar_step("tqdm:nested:Validation", 9, main=False)  # a validation bar leaves the step alone
    other.printed("stdout", {"eval_loss": 0.7})
    assert [r["step"] for r in records(spool.with_name("b.jsonl"))] == [5, 7]


def test_an_epochs_last_frame_never_drawn_still_counts_its_steps(spool):
    """Rich redraws at its own rate: epoch 0's bar may stop at 5/6 on screen though 6 steps ran; the next
    epoch's bar (Epoch 1, n = 0) starts after the 6. Without a later epoch, a bar that starts again continues
    after its last n."""
    sink, _ = make_sink(spool)
    assert [sink.bar_step("rich:top:Epoch", n, True, 6, 0) for n in (1, 2, 5)] == [1, 2, 5]
    assert [sink.bar_step("rich:top:Epoch", n, True, 6, 1) for n in (0, 1, 6)] == [6, 7, 12]
    assert [sink.bar_step("rich:top:Epoch", n, True, 6, 1) for n in (0, 2)] == [12, 14]  # the same epoch again


def test_an_absurd_printed_step_is_no_step(spool):
    sink, _ = make_sink(spool)
    sink.printed("stdout", {"loss": 0.1}, step=10 ** 23)
    (rec,) = records(spool)
    assert rec["step"] == 1 and rec["loss"] == 0.1


def test_non_finite_and_non_numbers_become_null(spool):
    sink, _ = make_sink(spool)
    sink.printed("stdout", {"loss": float("nan"), "acc": "high", "big": 10 ** 400}, step=1)
    (rec,) = records(spool)
    assert rec["loss"] is None and rec["acc"] is None and rec["big"] is None


def test_the_closing_summary_is_an_event_not_a_step(spool):
    sink, events = make_sink(spool)
    sink.summary("stdout", {"train_runtime": "0.3267", "train_loss": 4.324, "epoch": 2.0})
    assert records(spool) == []
    (summary,) = events.named("script_summary")
    assert summary["values"] == {"train_runtime": None, "train_loss": 4.324, "epoch": 2.0}


class Seen:
    def __init__(self, lines, frames, last):
        self.lines, self.bar_frames, self._last = lines, frames, last

    def last_lines(self):
        return self._last


def test_a_run_without_any_metric_says_what_it_saw_and_what_to_do(spool):
    sink, events = make_sink(spool)
    sink.file_found("/scratch/run/events.out.tfevents.1", "tensorboard", False, "no tensorboard on this Python")
    sink.close([("stdout", Seen(12, 0, ["hello", "done"])), ("stderr", Seen(3, 40, ["100%|##| 10/10"]))])
    (report,) = events.named("no_metrics")
    assert "12 lines on stdout" in report["message"] and "40 progress-bar frames without values on stderr" \
        in report["message"]
    assert "TensorBoard file /scratch/run/events.out.tfevents.1 (not read: no tensorboard" in report["message"]
    assert "parse-log" in report["hint"] and "--metric-regex" in report["hint"]
    assert report["last_lines"] == ["stdout: hello", "stdout: done", "stderr: 100%|##| 10/10"]
    assert report["seen"]["stdout_lines"] == 12 and report["seen"]["stderr_bar_frames"] == 40


def test_a_run_with_metrics_gets_no_report(spool):
    sink, events = make_sink(spool)
    sink.printed("stdout", {"loss": 1.0}, step=1)
    sink.close([("stdout", Seen(1, 0, []))])
    assert events.named("no_metrics") == []


def test_a_counter_printed_every_other_batch_continues_by_its_stride(spool):
    sink, _ = make_sink(spool)
    for epoch in range(3):  # Accelerate's examples: "epoch E step S: loss X" every 2 batches of 4
        for step in (0, 2):
            sink.printed("stdout", {"loss": 1.0, "epoch": epoch}, step=step)
    assert [r["step"] for r in records(spool)] == [0, 2, 4, 6, 8, 10]


def test_the_summarys_numbers_logged_to_a_file_too_are_no_series(spool):
    sink, events = make_sink(spool)
    sink.summary("stdout", {"train_runtime": 0.7, "train_loss": 4.3})
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 16, {"train/train_runtime": 0.7,
                                                                "train/train_loss": 4.3})
    sink.close()
    assert records(spool) == [] and events.named("series") == []


def test_a_file_logs_first_values_wait_so_the_printed_output_keeps_the_name(spool):
    clock = [0.0]
    sink, events = make_sink(spool, now=lambda: clock[0])
    # the TensorBoard file is read before the progress bar's frame with the same value
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 1, {"train_loss": 0.51234}, t=10.0)
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 1, {"accuracy": 0.5}, t=10.0)
    clock[0] = 0.2
    sink.claim("stdout", {"train_loss": 0.512})  # the bar's frame is held until the bar moves on
    clock[0] = FILE_GRACE_S
    sink.release()
    sink.bar("stdout", 1, {"train_loss": 0.512})
    got = records(spool)
    assert [(r["src"], r.get("loss"), r.get("accuracy")) for r in got] == [("tensorboard", None, 0.5),
                                                                            ("stdout", 0.512, None)]
    (loss,) = [e for e in events.named("series") if e.get("loss")]
    assert loss["source"] == "progress bar (stdout)"
    # once a name has a source, the file's next values are not held
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 2, {"accuracy": 0.6}, t=11.0)
    assert records(spool)[-1]["accuracy"] == 0.6


def test_a_name_only_a_file_gives_is_written_after_the_wait(spool):
    clock = [0.0]
    sink, _ = make_sink(spool, now=lambda: clock[0])
    sink.logged("csv", "/x/metrics.csv", 3, {"train_loss": 0.4})
    assert records(spool) == []
    clock[0] = FILE_GRACE_S + 0.01
    sink.release()
    assert [(r["step"], r["loss"], r["src"]) for r in records(spool)] == [(3, 0.4, "csv")]


def test_values_that_waited_behind_a_new_name_go_with_it_and_the_next_ones_at_once(spool):
    clock = [0.0]
    sink, _ = make_sink(spool, now=lambda: clock[0])
    for step in range(1, 4):
        clock[0] = step * 0.1
        sink.logged("tensorboard", "/x/events.out.tfevents.1", step, {"acc": step / 10})
    sink.release()
    assert records(spool) == []  # the first value has waited 0.3 s
    clock[0] = FILE_GRACE_S + 0.1
    sink.release()
    assert [r["step"] for r in records(spool)] == [1, 2, 3]
    sink.logged("tensorboard", "/x/events.out.tfevents.1", 4, {"acc": 0.4})
    assert [r["step"] for r in records(spool)] == [1, 2, 3, 4]  # a name already given waits no more


def test_a_better_named_loss_that_comes_later_is_the_loss_from_then_on(spool):
    sink, events = make_sink(spool)
    sink.printed("stdout", {"train_loss": 4.2, "val_loss": 4.3}, step=0)  # nanoGPT's evaluation at iter 0
    sink.printed("stdout", {"loss": 4.25, "step_time_ms": 30.0}, step=0)  # then "iter 0: loss 4.25"
    sink.printed("stdout", {"loss": 4.1}, step=1)
    sink.printed("stdout", {"train_loss": 3.9, "val_loss": 4.0}, step=2)
    got = records(spool)
    assert [r.get("loss") for r in got] == [4.2, 4.25, 4.1, None]
    assert got[3]["train_loss"] == 3.9 and "orig_loss" not in str(got)
    loss = [e for e in events.named("series") if e.get("loss")]
    assert [e["from"] for e in loss] == ["train_loss", "loss"]
