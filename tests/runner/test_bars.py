"""Progress-bar frames (remote_runner.scriptread.bars), on real captures of tqdm, Lightning and Transformers."""
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_runner.scriptread.bars import BarFrame, continuation_values, parse_bar
from remote_runner.scriptread.lines import MAX_LINE

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CURSOR_UP = re.compile(r"\x1b\[\d*A")


def segments(name: str) -> list[tuple[str, bool]]:
    """A capture split into frames at every \\r and \\n: (text without ANSI codes, whether it moved the cursor up)."""
    text = (CAPTURES / name).read_bytes().decode("utf-8", errors="replace")
    return [(ANSI.sub("", raw), bool(CURSOR_UP.search(raw))) for raw in re.split(r"\r|\n", text)]


def frames(name: str) -> list[BarFrame]:
    return [frame for frame in (parse_bar(text, up) for text, up in segments(name)) if frame is not None]


def rich_frames(name: str) -> list[BarFrame]:
    """Rich frames with the values of the indented lines drawn under them merged in (as the reader will)."""
    found: list[BarFrame] = []
    for text, up in segments(name):
        frame = parse_bar(text, up)
        if frame is not None:
            found.append(frame)
            continue
        values = continuation_values(text)
        if values is not None and found and found[-1].desc == "Epoch":
            found[-1].values.update(values)
    return found


def changes(values: list) -> list:
    """``values`` without consecutive repeats (a bar redraws the same postfix until the next log)."""
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


# --- real captures: tqdm ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("capture", ["tqdm_stderr.stderr", "tqdm_stdout.stdout"])
def test_tqdm_loop_with_set_postfix(capture):
    got = frames(capture)
    assert len(got) == 82 and {(f.desc, f.total, f.style, f.phase, f.nested, f.epoch) for f in got} == {
        ("train", 40, "tqdm", "train", False, None)}
    # the first draw, then a frame at each update and at each set_postfix (the last one: at close)
    assert [f.n for f in got] == [0, 0] + [n for n in range(1, 41) for _ in (0, 1)]
    assert got[0].values == {} and got[0].rate is None and got[0].remaining_s is None
    assert got[1].values == {"loss": 4.44, "lr": 0.05}
    assert changes([f.values["loss"] for f in got[1:]])[:12] == [4.44, 11.0, 7.35, 5.45, 2.72, 2.02, 2.61, 2.84,
                                                                  0.542, 0.965, 0.932, 1.53]
    assert all(f.values["lr"] == 0.05 for f in got[1:])
    assert all(f.elapsed_s is not None and f.elapsed_s >= 0 for f in got)
    assert all(f.rate is not None and f.rate > 1 for f in got[2:])


def test_tqdm_loop_on_stderr_leaves_stdout_alone():
    assert frames("tqdm_stderr.stdout") == [] and frames("tqdm_stdout.stderr") == []


def test_lightning_tqdm_bar():
    got = frames("lightning_tqdm.stdout")
    sanity = [f for f in got if f.phase == "sanity"]
    train = [f for f in got if f.desc == "Epoch"]
    validation = [f for f in got if f.phase == "validation"]
    assert len(got) == len(sanity) + len(train) + len(validation) + 2  # + the two "Training: 0/?" frames
    assert [f.desc for f in sanity] == ["Sanity Checking"] * 2 + ["Sanity Checking DataLoader"] * 3
    assert sanity[0].total is None and sanity[2].total == 2 and not any(f.nested for f in sanity)
    assert all(f.total == 10 and not f.nested and f.phase == "train" and f.epochs_total is None for f in train)
    assert changes([f.epoch for f in train]) == [0, 1, 2]
    # Lightning formats its values with 3 significant digits: 21.80, 3.800, 0.0335; v_num=2 is never a value
    assert changes([f.values.get("train_loss") for f in train if f.epoch == 0]) == [
        None, 21.8, 12.8, 3.8, 0.671, 0.484, 0.42, 0.77, 0.236, 0.9, 0.233]
    assert changes([f.values.get("val_loss") for f in train]) == [None, 0.221, 0.0188, 0.00199]
    assert all(set(f.values) <= {"train_loss", "val_loss"} for f in got)
    assert {f.desc for f in validation} == {"Validation", "Validation DataLoader"}
    assert all(f.nested for f in validation) and [f.n for f in validation[:5]] == [0, 0, 0, 1, 2]
    # at an epoch's end the bar is reset to 0 before its description changes: "Epoch 0: 0/10" after epoch 0 ended
    assert [(f.epoch, f.n) for f in train[22:25]] == [(0, 10), (0, 0), (1, 0)]


def test_trainer_bars_on_stderr():
    got = frames("trainer_gpt2.stderr")
    main = [f for f in got if not f.nested]
    evaluation = [f for f in got if f.nested]
    assert {(f.desc, f.total, f.phase) for f in main} == {("", 16, "train")}
    assert main[0].n == 0 and main[-1].n == 16 and all(f.values == {} for f in got)
    assert [(f.n, f.total) for f in evaluation] == [(0, 2), (2, 2)] * 4
    assert len(got) == 26  # the first frame, glued to a warning without a newline, is read too


def test_lines_that_are_no_bars():
    for capture in ("trainer_gpt2.stderr", "lightning_tqdm.stderr", "lightning_rich_tty.stderr",
                    "trainer_gpt2.stdout", "accelerate_print.stdout", "torchtitan.stdout", "nanogpt.stdout"):
        texts = [text for text, _ in segments(capture) if text.strip() and "it/s" not in text]
        assert texts and [t for t in texts if parse_bar(t) is not None] == []


# --- real captures: Rich ---------------------------------------------------------------------------------------

def test_lightning_rich_bar_live():
    got = rich_frames("lightning_rich_tty.stdout")
    assert all(f.style == "rich" and not f.nested for f in got)  # Rich's cursor-up redraws are not nesting
    assert [(f.desc, f.phase, f.n, f.total) for f in got[:2]] == [("Sanity Checking", "sanity", 1, 2),
                                                                   ("Epoch", "train", 0, 10)]
    train = [f for f in got if f.desc == "Epoch"]
    assert {(f.epochs_total, f.total, f.phase) for f in train} == {(2, 10, "train")}
    assert changes([f.epoch for f in train]) == [0, 1, 2]
    # the values wrap onto the lines under the bar (80 columns); Rich formats them with 3 decimals
    assert changes([f.values.get("train_loss") for f in train if f.epoch == 0]) == [
        None, 21.753, 12.796, 3.802, 0.484, 0.42, 0.77, 0.236, 0.233]
    # the sanity check's val_loss shows once, before training resets the values
    assert changes([f.values.get("val_loss") for f in train]) == [None, 12.273, None, 0.221, 0.019, 0.002]
    assert all(set(f.values) <= {"train_loss", "val_loss"} for f in got)
    assert [f.n for f in got if f.phase == "validation"] == [2, 2, 1]
    assert train[3].rate == 65.41 and train[3].elapsed_s == 0.0 and train[3].remaining_s == 1.0
    assert train[1].rate is None and train[1].remaining_s is None  # "0:00:00 • -:--:-- 0.00it/s"


def test_lightning_rich_bar_into_a_pipe_draws_the_last_frame_only():
    got = rich_frames("lightning_rich_pipe.stdout")
    assert len(got) == 1
    assert (got[0].desc, got[0].epoch, got[0].epochs_total, got[0].n, got[0].total, got[0].rate) == (
        "Epoch", 2, 2, 10, 10, 106.03)
    assert got[0].values == {"train_loss": 0.003, "val_loss": 0.002}


# --- formats ---------------------------------------------------------------------------------------------------

def test_tqdm_default_frame():
    frame = parse_bar("Epoch 3:  40%|████      | 4/10 [01:02<01:33, 72.39it/s, loss=0.671, lr=3e-4, mode=train]")
    assert frame == BarFrame(desc="Epoch", n=4, total=10, elapsed_s=62.0, remaining_s=93.0, rate=72.39,
                             values={"loss": 0.671, "lr": 3e-4}, epoch=3, epochs_total=None, nested=False,
                             style="tqdm", phase="train")


@pytest.mark.parametrize("text,n,total,elapsed,remaining,rate", [
    ("train: 5it [00:01, 4.90it/s, loss=0.5]", 5, None, 1.0, None, 4.9),                    # no total
    ("100%|##########| 1.23k/10.0k [1:02:03<00:09, 1.02kit/s]", 1230, 10000, 3723.0, 9.0, 1020.0),  # unit_scale
    ("tokens: 1.5M/2.00G [00:10<1:00:00, 150kB/s]", 1500000, 2000000000, 10.0, 3600.0, 150000.0),
    ("Epoch 3:  12%|#| 3/25 [00:04<00:30, 1.36s/it, loss=2]", 3, 25, 4.0, 30.0, 1 / 1.36),  # slow: s/it
    ("Sanity Checking: |          | 0/? [00:00<?, ?it/s]", 0, None, 0.0, None, None),       # Lightning, no total
    ("eval 12tok [00:00, 120.00tok/s]", 12, None, 0.0, None, 120.0),                         # own unit
    ("  0%|          | 0/16 [00:00<?, ?it/s][transformers] a warning glued on", 0, 16, 0.0, None, None),
    ("50%|█████     | 5/10 [00:01<00:01, 0.00it/s]   ", 5, 10, 1.0, 1.0, None),
])
def test_tqdm_counts_times_and_rates(text, n, total, elapsed, remaining, rate):
    frame = parse_bar(text)
    assert (frame.n, frame.total, frame.elapsed_s, frame.remaining_s) == (n, total, elapsed, remaining)
    assert frame.rate == pytest.approx(rate) if rate is not None else frame.rate is None


@pytest.mark.parametrize("text,desc,epoch,epochs_total,phase", [
    ("Epoch 3: 50%|#| 1/2 [00:00<00:00, 2it/s]", "Epoch", 3, None, "train"),
    ("Epoch 3/10 50%|#| 1/2 [00:00<00:00, 2it/s]", "Epoch", 3, 10, "train"),          # without ":"
    ("train 50%|#| 1/2 [00:00<00:00, 2it/s]", "train", None, None, "train"),
    ("50%|#| 1/2 [00:00<00:00, 2it/s]", "", None, None, "train"),                     # no description
    ("Validation DataLoader 0: 50%|#| 1/2 [00:00<00:00, 2it/s]", "Validation DataLoader", None, None, "validation"),
    ("Testing DataLoader 1: 50%|#| 1/2 [00:00<00:00, 2it/s]", "Testing DataLoader", None, None, "test"),
    ("Predicting: |#| 1/? [00:00<?, 2it/s]", "Predicting", None, None, "predict"),
    ("Evaluating: 50%|#| 1/2 [00:00<00:00, 2it/s]", "Evaluating", None, None, "eval"),
    ("GPU 0 warmup: 50%|#| 1/2 [00:00<00:00, 2it/s]", "GPU warmup", None, None, "train"),
    ("latest shard: 50%|#| 1/2 [00:00<00:00, 2it/s]", "latest shard", None, None, "train"),
])
def test_descriptions(text, desc, epoch, epochs_total, phase):
    frame = parse_bar(text)
    assert (frame.desc, frame.epoch, frame.epochs_total, frame.phase) == (desc, epoch, epochs_total, phase)
    assert frame.values == {}  # the description is never a metric


@pytest.mark.parametrize("postfix,values", [
    ("v_num=2, train_loss=21.80", {"train_loss": 21.8}),
    ("v_num=0", {}),
    ("loss=1.2e+03, acc=75%, mem=1.5GiB, lr=nan", {"loss": 1200.0, "acc": 0.75, "mem_gib": 1.5, "lr": None}),
    ("Learning_Rate=3e-4, tps=12,345, mode=train, note=a=b", {"lr": 3e-4, "tps": 12345.0}),
    ("loss=tensor(0.5123), step=4", {"loss": 0.5123, "step": 4.0}),
    ("train_loss=0.0335, val_loss=0.221", {"train_loss": 0.0335, "val_loss": 0.221}),
])
def test_postfix_values(postfix, values):
    assert parse_bar("Epoch 1:  10%|█         | 1/10 [00:00<00:00, 9.5it/s, " + postfix + "]").values == values


def test_nested_bars():
    text = "Validation DataLoader 0:  50%|█████     | 1/2 [00:00<00:00, 676.39it/s]"
    assert parse_bar(text, up=True).nested and not parse_bar(text).nested


@pytest.mark.parametrize("text,n,total,elapsed,remaining,rate,values", [
    ("Epoch 0/4  ━━━━━━━━━━━━━━━━━━━━━━━━━ 3/10 0:00:01 • 0:00:02 90.35it/s v_num: 1.000 train_loss: 3.888",
     3, 10, 1.0, 2.0, 90.35, {"train_loss": 3.888}),
    ("Epoch 1/9  ━━━━━━╸━━━━━━━━━━ 30/100 0:01:02 • -:--:-- 2.50s/it v_num: 0.000 loss: nan acc: 12.5",
     30, 100, 62.0, None, 0.4, {"loss": None, "acc": 12.5}),
    ("Epoch 7  ━━━━━━━━━ 3/-- 1 day, 2:03:04 • -:--:-- 0.00it/s", 3, None, 93784.0, None, None, {}),
    ("Validation ━━━━━━━━━━━━━━━━ 2/2   0:00:00 • 0:00:00 150.88it/s                  ", 2, 2, 0.0, 0.0, 150.88, {}),
    ("Sanity Checking ━━━━━━━━━━━━━━━╸━━━━ 1/2 0:00:00 • -:--:-- 0.00it/s ", 1, 2, 0.0, None, None, {}),
])
def test_rich_frames(text, n, total, elapsed, remaining, rate, values):
    frame = parse_bar(text, up=True)
    assert frame.style == "rich" and not frame.nested
    assert (frame.n, frame.total, frame.elapsed_s, frame.remaining_s, frame.values) == (
        n, total, elapsed, remaining, values)
    assert frame.rate == pytest.approx(rate) if rate is not None else frame.rate is None


def test_rich_descriptions():
    assert (parse_bar("Epoch 3/10 ━━━ 1/2 0:00:00 • 0:00:00 2.00it/s").desc,
            parse_bar("Epoch 3/10 ━━━ 1/2 0:00:00 • 0:00:00 2.00it/s").epoch,
            parse_bar("Epoch 3/10 ━━━ 1/2 0:00:00 • 0:00:00 2.00it/s").epochs_total) == ("Epoch", 3, 10)
    assert parse_bar("Testing ━━━ 1/2 0:00:00 • 0:00:00 2.00it/s").phase == "test"
    assert parse_bar("Predicting ━━━ 1/2 0:00:00 • 0:00:00 2.00it/s").phase == "predict"


@pytest.mark.parametrize("text,values", [
    ("                                                              val_loss: 12.273  ", {"val_loss": 12.273}),
    ("      train_loss: 0.233 val_acc: 0.5", {"train_loss": 0.233, "val_acc": 0.5}),
    ("   v_num: 1.000", {}),
    ("   loss: nan", {"loss": None}),
    ("no indent: 1.0", None),
    ('  File "train.py", line 3, in <module>', None),
    ("   loss: 0.5 acc:", None),
    ("   loss: high", None),
    ("   a:b: 1", None),
    ("   ", None),
    ("", None),
])
def test_continuation_values(text, values):
    assert continuation_values(text) == values


@pytest.mark.parametrize("text", [
    "", "train: 100%", "Epoch 3/10", "loss 0.5 [00:01]", "[rank0]:[W1202 10:36:16.228 reducer.cpp:1529] Warning",
    "see https://pypi.org/project/litlogger/ [docs]", "1/2 [not a time]", "3/10 0:00:01 0:00:02", "•/•",
    "step 10/100 [00:01<00:02]",  # no rate
])
def test_not_bars(text):
    assert parse_bar(text) is None


# --- hostile input ---------------------------------------------------------------------------------------------

HOSTILE = [
    "1/1 [" * 800, "1/1 [00:00<" * 370, "1" * 4000 + "/1 [00:00, 1it/s", "|" * 4000 + "1/1 [00:00, 1it/s]",
    "1/1 [00:00, 1it/s, " + "a=1, " * 800, "0/1 [00:00<00:00, 1it/s" * 150, "1/1 0:00:00 • " * 280,
    "1/1 " + " " * 4000 + "0:00:00 • 0:00:00", "━" * 4000 + " 1/1 0:00:00 • 0:00:00 1it/s",
    "/" * MAX_LINE, "[" * MAX_LINE, "•" * MAX_LINE, ":" * MAX_LINE, " " + "a: 1 " * 800, " " + ":" * 4000,
    (b"\x1b[A\x00\xff 50%|\xfe| 1/2 [00:00<00:00, 1it/s, loss=\x80]" * 40).decode("utf-8", errors="replace"),
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_frames(text):
    text = text[:MAX_LINE]
    start = time.perf_counter()
    frame, values = parse_bar(text, up=True), continuation_values(text)
    # linear regexes take milliseconds here; catastrophic backtracking would take minutes, so this cannot flake
    assert time.perf_counter() - start < 1.0
    assert frame is None or (isinstance(frame.n, int) and "v_num" not in frame.values)
    assert values is None or all(v is None or isinstance(v, float) for v in values.values())


def test_overlong_frames_are_not_parsed():
    assert parse_bar("x" * MAX_LINE + " 1/2 [00:00<00:00, 1it/s]") is None
    assert continuation_values(" " * MAX_LINE + "loss: 1") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.booleans())
def test_arbitrary_text_never_raises(text, up):
    frame = parse_bar(text, up)
    assert frame is None or (isinstance(frame.n, int) and frame.style in ("tqdm", "rich"))
    values = continuation_values(text)
    assert values is None or isinstance(values, dict)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["Epoch 1", ":", " ", "|", "█", "━", "1/2", "1.2k", "/?", "/--", " [", "]", "00:00",
                                 "1:00:00", "<", "?", ", ", "it/s", "s/it", "kit/s", "•", "-:--:--", "loss=", "0.5",
                                 "v_num: ", "nan", "=", "%", "9" * 40]), max_size=40), st.booleans())
def test_bar_like_text_never_raises(parts, up):
    text = "".join(parts)
    frame = parse_bar(text, up)
    if frame is not None:
        assert isinstance(frame.n, int) and (frame.total is None or isinstance(frame.total, int))
        assert "v_num" not in frame.values and all(v is None or isinstance(v, float) for v in frame.values.values())
    continuation_values(" " + text)


def test_a_rate_tqdm_pads_to_five_characters():
    # tqdm formats a rate under 10 as "{:5.2f}": "  8.65it/s" (Lightning's bar, a slow step)
    frame = parse_bar("Epoch 0:  17%|█▋        | 1/6 [00:00<00:00,  8.65it/s, v_num=0, train_loss=20.20]")
    assert (frame.n, frame.total, frame.rate, frame.values, frame.epoch) == (1, 6, 8.65, {"train_loss": 20.2}, 0)
