"""Rank 0's output read as the supervisor reads it (frames → bars or lines → sink → records), on the real
captures of tests/fixtures/scriptlogs (what each framework printed, SOURCES.md), fed in small pieces as a
pipe delivers them."""
import re
from pathlib import Path

import pytest

from remote_runner.scriptread.output import HOLD_S, OutputReader
from remote_runner.scriptread.sink import MetricSink

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"
FRAME = re.compile(rb"[\r\n]")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Written(list):
    def write(self, record, t=None):
        self.append(dict(record))


class Events(list):
    def __call__(self, event, /, **fields):
        self.append(dict(fields, event=event))


def read(*names, piece=97, regex=None):
    """The records and events the captures ``names`` ("trainer_gpt2.stderr", ...) give, in that order."""
    written, events = Written(), Events()
    sink = MetricSink(written, events, world_size=2)
    for name in names:
        reader = OutputReader(name.rsplit(".", 1)[1], sink, regex)
        data = (CAPTURES / name).read_bytes()
        for i in range(0, len(data), piece):
            reader.feed(data[i:i + piece])
        reader.close()
    return written, events


def frames_text(name):
    """The capture's frames as text, ANSI removed (independent of the reader under test)."""
    return [ANSI.sub("", f.decode("utf-8", "replace")) for f in FRAME.split((CAPTURES / name).read_bytes())]


def test_lightning_tqdm_bar_gives_a_loss_per_step_through_its_epochs():
    written, events = read("lightning_tqdm.stdout")
    losses = [(r["step"], r["loss"]) for r in written if "loss" in r]
    assert [s for s, _ in losses] == list(range(1, 31))  # 3 epochs of 10 batches, counted on
    # each step's value is the one its last frame showed ("Epoch 1: 20%|...| 2/10 [..., train_loss=0.0335, ...]")
    shown = {}
    for text in frames_text("lightning_tqdm.stdout"):
        m = re.match(r"Epoch (\d+): .*\| (\d+)/10 \[.*train_loss=([0-9.e+-]+)", text)
        if m and m[2] != "0":  # a new epoch's bar first shows the last epoch's values at 0/10
            shown[int(m[1]) * 10 + int(m[2])] = float(m[3])
    assert losses == [(s, shown[s]) for s in range(1, 31)]
    assert [r["epoch"] for r in written if "loss" in r][9:12] == [0, 1, 1]
    # val_loss stays in the postfix for a whole epoch: written when it changes, at the epoch's end
    assert [(r["step"], r["val_loss"]) for r in written if "val_loss" in r] == [(10, 0.221), (20, 0.0188),
                                                                             (30, 0.00199)]
    assert all("v_num" not in r and "epoch 0" not in r for r in written)
    loss = [e for e in events if e["event"] == "series" and e.get("loss")]
    assert loss == [{"event": "series", "name": "loss", "from": "train_loss", "source": "progress bar (stdout)",
                     "loss": True}]


def test_lightning_rich_bar_reads_the_values_rich_wraps_under_it():
    written, _ = read("lightning_rich_tty.stdout")
    losses = {r["step"]: r["loss"] for r in written if "loss" in r}
    # Rich redraws at its own pace: every frame it drew is a point (a fast toy loop lets it skip a few)
    assert len(losses) >= 20 and losses[1] == 21.753 and losses[2] == 12.796 and losses[30] == 0.003
    # the sanity check's validation shows before the first step (step 0), then each epoch's
    assert [(r["step"], r["val_loss"]) for r in written if "val_loss" in r] == [(0, 12.273), (10, 0.221),
                                                                             (20, 0.019), (30, 0.002)]
    assert max(losses) == 30 and all(r["bar_total"] == 10 for r in written)


def test_rich_into_a_pipe_draws_only_its_last_frame():
    written, _ = read("lightning_rich_pipe.stdout")
    assert [(r["step"], r["loss"]) for r in written] == [(10, 0.003)]


@pytest.mark.parametrize("name", ["tqdm_stderr.stderr", "tqdm_stdout.stdout"])
def test_a_tqdm_loop_with_set_postfix_on_either_stream(name):
    written, _ = read(name)
    shown = {}
    for text in frames_text(name):
        m = re.match(r"train: .*\| (\d+)/40 \[.*loss=([0-9.e+-]+), lr=([0-9.e+-]+)\]", text)
        if m:
            shown[int(m[1])] = (float(m[2]), float(m[3]))
    assert {r["step"]: (r["loss"], r["lr"]) for r in written} == shown
    assert len(shown) >= 30 and all(r["src"] == name.rsplit(".", 1)[1] for r in written)
    assert all("train" not in r for r in written)  # the description is no metric


def test_transformers_trainer_dicts_string_values_eval_dicts_and_the_closing_summary():
    written, events = read("trainer_gpt2.stderr", "trainer_gpt2.stdout")
    printed = [line for line in (CAPTURES / "trainer_gpt2.stdout").read_text().splitlines() if "'loss'" in line]
    assert [r["loss"] for r in written if "loss" in r] == [float(re.search(r"'loss': '([^']+)'", p)[1])
                                                         for p in printed]
    assert len([r for r in written if "eval_loss" in r]) == 4 and all("train_runtime" not in r for r in written)
    (summary,) = [e for e in events if e["event"] == "script_summary"]
    assert summary["values"]["train_loss"] == 4.326 and summary["values"]["train_runtime"] == 0.4252
    assert all(isinstance(r["lr"], float) for r in written if "lr" in r)


def test_accelerate_prints_and_their_per_epoch_step():
    written, _ = read("accelerate_print.stdout")
    assert [(r["step"], r["loss"]) for r in written if "loss" in r] == [
        (0, 1.2983), (2, 0.3683), (4, 0.3368), (6, 0.3331), (8, 0.2629), (10, 0.2718)]
    assert [(r["step"], r["accuracy"]) for r in written if "accuracy" in r] == [(2, 0.8125), (6, 0.9375),
                                                                               (10, 0.9375)]


def test_torchtitan_and_nanogpt_lines():
    titan, _ = read("torchtitan.stdout")
    assert [(r["step"], r["loss"]) for r in titan if "loss" in r][:2] == [(1, 12.25), (10, 11.98765)]
    assert titan[1]["tps"] == 4376.0 and titan[1]["mfu"] == pytest.approx(0.2562)
    nano, _ = read("nanogpt.stdout")
    assert [r["step"] for r in nano if "loss" in r] == sorted(r["step"] for r in nano if "loss" in r)


def test_a_frame_held_while_the_bar_stops_is_written_after_the_hold():
    written, events = Written(), Events()
    now = [0.0]
    reader = OutputReader("stderr", MetricSink(written, events), clock=lambda: now[0])
    reader.feed(b"\rtrain:  50%|#####     | 5/10 [00:05<00:05, 1.00it/s, loss=0.5]")
    reader.feed(b"\rtrain:  50%|#####     | 5/10 [00:05<00:05, 1.00it/s, loss=0.4]")  # same n, new values
    reader.idle()
    assert written == []
    now[0] = HOLD_S
    reader.idle()
    assert [(r["step"], r["loss"]) for r in written] == [(5, 0.4)]
    reader.feed(b"\rtrain:  50%|#####     | 5/10 [00:06<00:05, 1.00it/s, loss=0.4]")  # drawn again: nothing new
    reader.close()
    assert len(written) == 1


def test_hostile_output_loses_nothing_after_it():
    written, events = Written(), Events()
    reader = OutputReader("stdout", MetricSink(written, events))
    reader.feed(b"step 1 loss 0.5\n")
    reader.feed(bytes(range(256)) * 4 + b"\n")  # a binary line
    for _ in range(160):  # a 10 MiB line without a newline, in 64 KiB pieces
        reader.feed(b"9" * 65536)
    reader.feed(b"\nstep 99999999999999999999999 loss 0.1\n")  # an absurd step: no step
    reader.feed(b"\x1b[31mstep 3 loss 0.3\x1b[0m\n")
    reader.close()
    assert [(r["step"], r["loss"]) for r in written] == [(1, 0.5), (1, 0.1), (3, 0.3)]
    assert reader.splitter.long_skipped == 1

