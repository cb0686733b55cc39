"""Metrics from printed lines (remote_runner.scriptread.lines), on real captures and hostile text."""
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_runner.scriptread.lines import (
    MAX_COUNTER,
    MAX_LINE,
    is_summary,
    metric_key,
    metric_value,
    parse_metric_line,
)

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def segments(name: str) -> list[str]:
    """A capture split into frames at every \\r and \\n, ANSI codes removed (as scriptread.frames hands them on)."""
    text = (CAPTURES / name).read_bytes().decode("utf-8", errors="replace")
    return [ANSI.sub("", part) for part in re.split(r"\r|\n", text)]


def records(name: str) -> list[dict]:
    return [record for record in map(parse_metric_line, segments(name)) if record is not None]


# --- real captures ---------------------------------------------------------------------------------------------

def test_trainer_log_dicts_with_string_values():
    got = records("trainer_gpt2.stdout")
    train = [r for r in got if "loss" in r]
    evals = [r for r in got if "eval_loss" in r]
    assert train == [
        {"loss": 4.329, "grad_norm": 0.8928, "lr": 4.688e-05, "epoch": 0.25},
        {"loss": 4.325, "grad_norm": 0.8507, "lr": 4.063e-05, "epoch": 0.5},
        {"loss": 4.324, "grad_norm": 0.9101, "lr": 3.438e-05, "epoch": 0.75},
        {"loss": 4.324, "grad_norm": 0.887, "lr": 2.813e-05, "epoch": 1},
        {"loss": 4.322, "grad_norm": 0.8638, "lr": 2.187e-05, "epoch": 1.25},
        {"loss": 4.326, "grad_norm": 0.8623, "lr": 1.563e-05, "epoch": 1.5},
        {"loss": 4.324, "grad_norm": 0.9004, "lr": 9.375e-06, "epoch": 1.75},
        {"loss": 4.332, "grad_norm": 0.8683, "lr": 3.125e-06, "epoch": 2},
    ]
    assert evals[0] == {"eval_loss": 4.32, "eval_runtime": 0.0113, "eval_samples_per_second": 1413.0,
                        "eval_steps_per_second": 176.7, "epoch": 0.5}
    assert [r["eval_loss"] for r in evals] == [4.32, 4.32, 4.319, 4.319]
    assert [r["epoch"] for r in evals] == [0.5, 1, 1.5, 2]
    assert got[-1] == {"train_runtime": 0.4252, "train_samples_per_second": 301.0, "train_steps_per_second": 37.63,
                       "train_loss": 4.326, "epoch": 2}
    assert len(got) == 13
    assert [is_summary(r) for r in got] == [False] * 12 + [True]
    assert isinstance(train[3]["epoch"], int) and isinstance(train[0]["epoch"], float)


@pytest.mark.parametrize("capture", ["trainer_gpt2.stderr", "lightning_tqdm.stderr", "lightning_rich_tty.stderr",
                                     "lightning_rich_pipe.stderr"])
def test_framework_chatter_is_no_metric(capture):
    # warnings, "GLOBAL_RANK: 0, MEMBER: 1/2", "[rank0]:[W1202 10:36:16.2286 reducer.cpp:1529]", bars without values
    lines = [line for line in segments(capture) if line.strip()]
    assert len(lines) > 5
    assert [line for line in lines if parse_metric_line(line) is not None] == []


def test_accelerate_prints():
    assert records("accelerate_print.stdout") == [
        {"epoch": 0, "step": 0, "loss": 1.2983}, {"epoch": 0, "step": 2, "loss": 0.3683}, {"epoch": 0, "accuracy": 0.8125},
        {"epoch": 1, "step": 0, "loss": 0.3368}, {"epoch": 1, "step": 2, "loss": 0.3331}, {"epoch": 1, "accuracy": 0.9375},
        {"epoch": 2, "step": 0, "loss": 0.2629}, {"epoch": 2, "step": 2, "loss": 0.2718}, {"epoch": 2, "accuracy": 0.9375},
    ]


def test_torchtitan_lines_with_colours_units_and_thousands():
    raw = (CAPTURES / "torchtitan.stdout").read_text().splitlines()
    assert "\x1b[31mstep:" in raw[1]  # the capture keeps torchtitan's colours: the parser strips them itself
    got = [parse_metric_line(line) for line in raw]
    assert got[0] is None and got[2] is None  # "Training starts at step 1", "... timeout ... to 0:01:40"
    assert got[1] == {"step": 1, "loss": 12.25, "grad_norm": 4.1, "memory_gib": 48.87, "tps": 3502.0, "tflops": 2.9,
                      "mfu": 0.0029}
    assert got[3] == {"step": 10, "loss": 11.98765, "grad_norm": 9.6669, "memory_gib": 48.87, "tps": 4376.0,
                      "tflops": 1253.41, "mfu": 0.2562}
    assert got[4] == {"step": 20, "loss": 11.83506, "grad_norm": 9.6669, "memory_gib": 48.87, "tps": 4376.0,
                      "tflops": 253.41}  # "mfu: N/A"
    assert got[5] == {"step": 20, "val_loss": 11.9123, "val_memory_gib": 50.01, "val_tps": 12345.0}
    assert got[6] == dict(got[3], step=20, loss=11.83506, tflops=253.41)


def test_nanogpt_lines_exactly():
    assert records("nanogpt.stdout") == [
        {"step": 0, "train_loss": 4.2874, "val_loss": 4.2823},
        {"step": 0, "loss": 4.2654, "step_time_ms": 13500.54, "mfu": -1.0},
        {"step": 10, "loss": 3.1462, "step_time_ms": 13.86, "mfu": 0.2688},
        {"step": 20, "loss": 2.7321, "step_time_ms": 13.74, "mfu": 0.269},
        {"step": 250, "train_loss": 1.9686, "val_loss": 2.0748},
        {"step": 250, "loss": 1.9871, "step_time_ms": 13.75, "mfu": 0.2692},
    ]


def test_lightning_bar_lines_never_give_v_num_or_the_description():
    for capture in ("lightning_tqdm.stdout", "lightning_rich_tty.stdout", "tqdm_stderr.stderr"):
        for record in records(capture):
            assert "v_num" not in record and "train" not in record and "epoch_0" not in record


# --- forms -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line,expected", [
    # Transformers' Trainer, older versions (numbers) and v5 (strings); eval dicts keep their keys
    ("{'loss': 2.3041, 'grad_norm': 1.53, 'learning_rate': 4.5e-05, 'epoch': 0.5}",
     {"loss": 2.3041, "grad_norm": 1.53, "lr": 4.5e-05, "epoch": 0.5}),
    ("{'loss': '4.312', 'grad_norm': '0.8636', 'learning_rate': '4.688e-05', 'epoch': '0.25'}",
     {"loss": 4.312, "grad_norm": 0.8636, "lr": 4.688e-05, "epoch": 0.25}),
    ("{'eval_loss': '4.32', 'eval_accuracy': 0.5, 'epoch': 1.0}", {"eval_loss": 4.32, "eval_accuracy": 0.5, "epoch": 1}),
    ("{'loss': 'nan', 'grad_norm': 'inf', 'epoch': '1'}", {"loss": None, "grad_norm": None, "epoch": 1}),
    ("{'loss': '1.413e+03', 'epoch': 2}", {"loss": 1413.0, "epoch": 2}),
    ('{"loss": "0.5", "step": 3}', {"loss": 0.5, "step": 3}),
    ('{"loss": 0.5, "lr": "3e-4", "note": "warm"}', {"loss": 0.5, "lr": 3e-4}),
    # Accelerate's examples
    ("epoch 0: {'accuracy': 0.75, 'f1': 0.8}", {"epoch": 0, "accuracy": 0.75, "f1": 0.8}),
    ("epoch 1: perplexity: 12.5 eval_loss: 2.5257", {"epoch": 1, "perplexity": 12.5, "eval_loss": 2.5257}),
    ("epoch 0 - update step 5:: grad norm: 1.23 ::train loss: 4.5",
     {"epoch": 0, "step": 5, "grad_norm": 1.23, "train_loss": 4.5}),
    ("7: loss=tensor(4.5123, device='cuda:0', grad_fn=<NllLossBackward0>)", {"loss": 4.5123}),
    ("step 3 loss tensor(0.25) acc np.float64(0.5)", {"step": 3, "loss": 0.25, "acc": 0.5}),
    # key=value and key: value in general
    ("global_step=12 train/loss=0.5 val/acc=0.9", {"step": 12, "train/loss": 0.5, "val/acc": 0.9}),
    ("Iteration: 40 | training loss: 0.31 | lr: 1e-3", {"step": 40, "training_loss": 0.31, "lr": 1e-3}),
    ("epoch 3 v_num=2 train_loss=0.5", {"epoch": 3, "train_loss": 0.5}),
    # units: a size or time unit goes into the key, % makes a fraction
    ("step 1 loss 0.5 mem 1.5GiB peak_mem_gib 2.5GiB reserved 512MiB", {
        "step": 1, "loss": 0.5, "mem_gib": 1.5, "peak_mem_gib": 2.5, "reserved_mib": 512.0}),
    ("step 2 loss 0.5 data 30ms eval_time 2.5s time 0.25s", {
        "step": 2, "loss": 0.5, "data_ms": 30.0, "eval_time_s": 2.5, "step_time_ms": 250.0}),
    ("step 3 loss 0.5 mfu 9.72% util 100%", {"step": 3, "loss": 0.5, "mfu": 0.0972, "util": 1.0}),
])
def test_printed_forms(line, expected):
    assert parse_metric_line(line) == expected


@pytest.mark.parametrize("line,expected", [
    ("step 5 tps: 12,345", {"step": 5, "tps": 12345.0}),
    ("step 5 tokens 1,234,567 loss 0.5", {"step": 5, "tokens": 1234567.0, "loss": 0.5}),
    ("step 5 tflops: 1,234.56", {"step": 5, "tflops": 1234.56}),
    ("step 5 tps: 12,345, loss 0.5", {"step": 5, "tps": 12345.0, "loss": 0.5}),
    ("step 1,000 loss 0.5", {"step": 1000, "loss": 0.5}),
    ("loss 0.5, lr 3e-4", {"loss": 0.5, "lr": 3e-4}),      # a comma between pairs is no thousands separator
    ("loss=0.5,lr=3e-4", {"loss": 0.5, "lr": 3e-4}),
    ("step 5 sizes 1,2 loss 0.5", {"step": 5, "loss": 0.5}),  # "1,2" is a list, not 12 nor 1
    ("step 5 tps 12,34 loss 0.5", {"step": 5, "loss": 0.5}),
    ("step 5 tps 1,234,5 loss 0.5", {"step": 5, "loss": 0.5}),
    ("step 5 tps 12,3456 loss 0.5", {"step": 5, "loss": 0.5}),
    ("2025-10-30 14:32:58,897 - INFO - loss: 1.5", {"loss": 1.5}),  # the time's ",897" joins nothing
])
def test_thousands_separators(line, expected):
    assert parse_metric_line(line) == expected


@pytest.mark.parametrize("line,expected", [
    ("step 99999999999999999999999 loss 0.5", {"loss": 0.5}),
    ("step 1e300 loss 0.5", {"loss": 0.5}),
    ("step -3 loss 0.5", {"loss": 0.5}),
    ("step 99999999999999999999999 acc 0.5", None),   # without a step it is no record at all
    ("step 9007199254740992 loss 0.5", {"step": 9007199254740992, "loss": 0.5}),
    ('{"step": 1e400, "loss": 0.5}', {"loss": 0.5}),
    ("epoch 1e30 acc 0.5 loss 1", {"acc": 0.5, "loss": 1.0}),
])
def test_counters_that_cannot_be_counters_are_dropped(line, expected):
    record = parse_metric_line(line)
    assert record == expected
    assert record is None or all(isinstance(record[k], int) and 0 <= record[k] <= MAX_COUNTER
                                 for k in ("step", "epoch") if k in record)


@pytest.mark.parametrize("line", [
    "train: 100%|##########| 40/40 [00:01<00:00, 39.2it/s]",  # a bar's description: "train" is no metric
    "Using 4 GPUs, world size 8", "memory 12GiB free", "device cuda:0 rank:1", "v_num: 3 epoch 1",
    "GLOBAL_RANK: 0, MEMBER: 1/2", "[rank0]:[W1202 10:36:16.228657358 reducer.cpp:1529] Warning: x",
])
def test_lines_without_metrics(line):
    assert parse_metric_line(line) is None


def test_is_summary():
    assert is_summary({"train_runtime": 1.0, "train_loss": 0.5})
    assert not is_summary({"loss": 0.5, "epoch": 1}) and not is_summary({"eval_runtime": 0.1, "eval_loss": 0.5})


@pytest.mark.parametrize("key,text,expected", [
    ("loss", "0.5", ("loss", 0.5)), ("Learning_Rate", " 3e-4 ", ("lr", 3e-4)), ("lr", "'3e-4'", ("lr", 3e-4)),
    ("mem", "1.2GiB", ("mem_gib", 1.2)), ("acc", "75%", ("acc", 0.75)), ("tps", "12,345", ("tps", 12345.0)),
    ("loss", "nan", ("loss", None)), ("loss", "tensor(0.5000)", ("loss", 0.5)), ("time", "1.5s", ("step_time_ms", 1500.0)),
    ("v_num", "2", None), ("mode", "train", None), ("loss", "0.5 0.6", None), ("loss", "", None), ("", "1", None),
    ("loss", "1,2", None),
])
def test_metric_value(key, text, expected):
    assert metric_value(key, text) == expected


def test_metric_key():
    assert metric_key("Step_Time", None, "ms") == "step_time_ms"
    assert metric_key("time", "eval", "s") == "eval_time_s"
    assert metric_key("mem_gib", None, "GiB") == "mem_gib" and metric_key("Iteration") == "step"


# --- hostile input ---------------------------------------------------------------------------------------------

HOSTILE = [
    "1" * MAX_LINE, ":" * MAX_LINE, "=" * MAX_LINE, "a:" * (MAX_LINE // 2), "a=1" * (MAX_LINE // 3),
    "a " * (MAX_LINE // 2 - 1) + "1", "loss " + "1" * (MAX_LINE - 5), "x: " + "1,000" * 800, "1,2" * 1300,
    "{" + "'a': '1', " * 400 + "}", "'" * MAX_LINE, "loss: '" + "1" * 4000, "tensor(" * 580, "%|" * 2000,
    "step " + "9" * 4000 + " loss 1", "a" * (MAX_LINE - 1) + "1", "-" * (MAX_LINE - 1) + "1",
    bytes(range(256)).decode("utf-8", errors="replace") * 16,
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(200)) * 10).decode("utf-8", errors="replace"),
]


@pytest.mark.parametrize("line", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_lines_are_refused_quickly(line):
    line = line[:MAX_LINE]
    start = time.perf_counter()
    record = parse_metric_line(line)
    # linear regexes take milliseconds here; catastrophic backtracking would take minutes, so this cannot flake
    assert time.perf_counter() - start < 1.0
    assert record in (None, {"loss": None}, {"loss": 1.0})  # "loss 1111…" overflows to None; "step 9999… loss 1"


def test_binary_lines_decoded_with_replacement():
    garbled = b"\x00\xff\xfe loss \x80\x81 1.5 step \xc3\x28 2 \x1b[31m".decode("utf-8", errors="replace")
    assert parse_metric_line(garbled) is None  # U+FFFD between a key and its number: no pair
    framed = b"\x00\xff step 3 loss: 0.5 \xfe\x1b[0".decode("utf-8", errors="replace")
    assert parse_metric_line(framed) == {"step": 3, "loss": 0.5}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text):
    record = parse_metric_line(text)
    assert record is None or all(isinstance(k, str) and (v is None or isinstance(v, (int, float)))
                                 for k, v in record.items())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["step", "loss", "lr", "tps", ":", "=", " ", ",", "1", "0.5", "1,234", "'", "{",
                                 "}", "%", "GiB", "ms", "nan", "tensor(", "\x1b[31m", "v_num", "9" * 30]), max_size=60))
def test_metric_like_text_never_raises(parts):
    record = parse_metric_line("".join(parts))
    assert record is None or all(v is None or isinstance(v, (int, float)) for v in record.values())
    if record is not None and "step" in record:
        assert isinstance(record["step"], (int, float)) and 0 <= record["step"] <= MAX_COUNTER


@pytest.mark.parametrize("line, expected", [
    ("iter 1 of 3: the cost is 0.9", None),  # prose: no series "of" or "is"
    ("iter 2 of 3: loss is 0.8", None),  # "loss is", not "loss 0.8": no value read
    ("[rank 0] step 5 loss 0.3", {"step": 5, "loss": 0.3}),
    ("worker 3 pid 4242: step 4 loss 1", {"step": 4, "loss": 1.0}),
    ("epoch 2 took 31.5 s, loss 0.25", {"epoch": 2, "loss": 0.25}),
])
def test_words_of_prose_and_of_a_lines_address_are_no_series(line, expected):
    assert parse_metric_line(line) == expected
