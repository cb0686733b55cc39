"""A user's own script: metrics from its printed lines, and the entry each rank runs it under."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from remote_runner.scriptmode import SCRIPT_COMMAND
from remote_runner.scriptread.lines import MAX_LINE, parse_metric_line
from remote_runner.scriptread.output import OutputReader
from remote_runner.scriptread.sink import MetricSink
from remote_runner.spools import SpoolWriter


@pytest.mark.parametrize("line,expected", [
    ("Epoch 0, Step 10, Loss: 1.2341", {"epoch": 0, "step": 10, "loss": 1.2341}),
    ("iter 10: loss 4.2312, time 31.2ms", {"step": 10, "loss": 4.2312, "step_time_ms": 31.2}),
    ("iter 20: loss 3.9, time 31.20ms, mfu 12.50%", {"step": 20, "loss": 3.9, "step_time_ms": 31.2, "mfu": 0.125}),
    ("step 250: train loss 2.1234, val loss 2.3456", {"step": 250, "train_loss": 2.1234, "val_loss": 2.3456}),
    ("step=10 loss=0.5", {"step": 10, "loss": 0.5}),
    ("STEP=10 LOSS=5e-1 LR=3E-4", {"step": 10, "loss": 0.5, "lr": 3e-4}),
    ("step 7 loss 0.25 time 0.5s", {"step": 7, "loss": 0.25, "step_time_ms": 500.0}),
    ("Step 10/1000 | loss 0.7", {"step": 10, "loss": 0.7}),
    ('{"iter": 10, "loss": 0.5, "note": "x", "ok": true}', {"step": 10, "loss": 0.5}),
    ('{"Iteration": 3, "accuracy": 0.75}', {"step": 3, "accuracy": 0.75}),
    ("{'loss': 0.5, 'learning_rate': 5e-05, 'epoch': 0.12}", {"loss": 0.5, "lr": 5e-05, "epoch": 0.12}),
    ("Epoch 1: 100%|#####| 10/10 [00:01<00:00, 9.5it/s, loss=0.5]", {"epoch": 1, "loss": 0.5}),
    ("2024-05-01 12:00:00 INFO step 3 loss 1.5", {"step": 3, "loss": 1.5}),
    ("epoch 2 accuracy 0.91", {"epoch": 2, "accuracy": 0.91}),
    ("\x1b[32mstep 3 loss 0.5\x1b[0m", {"step": 3, "loss": 0.5}),
    ("step 1 loss 2.0\rstep 2 loss 1.0", {"step": 2, "loss": 1.0}),
])
def test_printed_forms(line, expected):
    assert parse_metric_line(line) == expected


def test_integer_counters_are_ints():
    record = parse_metric_line("step=10.0 loss=1")
    assert record == {"step": 10, "loss": 1.0} and isinstance(record["step"], int)


@pytest.mark.parametrize("line,expected", [
    ("step 5 loss nan", {"step": 5, "loss": None}),
    ("loss: NaN", {"loss": None}),
    ("step 6 loss -inf lr 1e-3", {"step": 6, "loss": None, "lr": 1e-3}),
    ('{"step": 7, "loss": Infinity}', {"step": 7, "loss": None}),
    ('{"step": 8, "loss": %s}' % ("9" * 400), {"step": 8, "loss": None}),
])
def test_non_finite_values_become_none(line, expected):
    assert parse_metric_line(line) == expected


@pytest.mark.parametrize("line", [
    "", "   ", "Using 4 GPUs", "Epoch 3/10", "Loading checkpoint step 1000", "Saving model_5.pt",
    "Traceback (most recent call last):", "step10 loss", "Influence of information", "[1, 2, 3]",
    '{"event": "start", "count": 3}', '{"loss": "high"}', "{not json step 1}", "loss: high",
])
def test_lines_without_metrics(line):
    assert parse_metric_line(line) is None


@pytest.mark.parametrize("line", [
    "a" * (MAX_LINE - 1) + "1",
    " " * (MAX_LINE - 1) + "1",
    "loss" + " " * (MAX_LINE - 4),
    "a " * (MAX_LINE // 2 - 1) + "1",
    "-" * (MAX_LINE - 1) + "1",
    "{" * (MAX_LINE // 2) + "}" * (MAX_LINE // 2),
    "[" * 3000 + "1" + "]" * 3000,
    "x" * 10 ** 6 + " loss 1",
    "\x00\x01\x02 loss \x7f 1 \udcff step 2",
    "loss=1e99999 step=1",
    "\u202e loss \u0661\u0662",
])
def test_hostile_text_is_handled(line):
    record = parse_metric_line(line)
    assert record is None or all(v is None or isinstance(v, (int, float)) for v in record.values())


def test_overlong_lines_are_not_parsed():
    assert parse_metric_line("step 1 loss 0.5 " + " " * MAX_LINE) is None


def test_user_regex_named_groups():
    regex = re.compile(r"it (?P<step>\d+) l=(?P<loss>\S+)(?: acc=(?P<Acc>\S+))?")
    assert parse_metric_line("it 5 l=0.3 acc=0.9", regex) == {"step": 5, "loss": 0.3, "acc": 0.9}
    assert parse_metric_line("it 6 l=2e-1", regex) == {"step": 6, "loss": 0.2}
    assert parse_metric_line("it 7 l=0.1 acc=high", regex) == {"step": 7, "loss": 0.1}
    assert parse_metric_line("it 8 l=nan", regex) == {"step": 8, "loss": None}
    # only the user's pattern is read: a built-in form does not match it
    assert parse_metric_line("step=10 loss=0.5", regex) is None


def read_lines(spool, lines, regex=None, world_size=None):
    """``lines`` as rank 0 prints them, through the supervisor's reader, into the metrics spool."""
    writer = SpoolWriter(str(spool))
    reader = OutputReader("stdout", MetricSink(writer, lambda *a, **k: None, world_size=world_size),
                          re.compile(regex) if regex else None)
    reader.feed("".join(line + "\n" for line in lines).encode())
    reader.close()
    writer.close()
    return [json.loads(line) for line in spool.read_text().splitlines()] if spool.exists() else []


def test_printed_lines_become_records_and_lines_without_a_step_are_counted(tmp_path):
    lines = ["starting", "loss 0.9", "Epoch 0 | train loss 0.8", "noise 12", "step 10 loss 0.7", "loss nan"]
    records = read_lines(tmp_path / "metrics.jsonl", lines, world_size=2)
    assert [r["seq"] for r in records] == [0, 1, 2, 3]
    assert [r["step"] for r in records] == [1, 2, 10, 10]
    # "loss" is the run's loss; "train_loss" (a different name) keeps its own
    assert [r.get("loss") for r in records] == [0.9, None, 0.7, None]
    assert records[1]["train_loss"] == 0.8 and records[1]["epoch"] == 0
    assert all(r["phase"] == "script" and r["world_size"] == 2 and isinstance(r["t"], float) for r in records)


def test_a_metric_regex_reads_only_its_own_lines(tmp_path):
    records = read_lines(tmp_path / "metrics.jsonl", ["batch 3 cost 0.5", "step 4 loss 0.4"],
                         regex=r"batch (?P<step>\d+) cost (?P<loss>\S+)")
    assert [(r["step"], r["loss"]) for r in records] == [(3, 0.5)]


# --- the script entry each rank runs: real subprocesses ---------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
LEAVING = '''import atexit, os, sys, threading, time
import helper  # next to the script: its folder is first on sys.path


class Tracked:
    def __del__(self):  # runs only when the interpreter tears the module down
        print("finalized", flush=True)


kept = Tracked()
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
print(__name__, sys.argv[1:], sys.path[0] == os.path.dirname(os.path.realpath(__file__)), os.getcwd(), helper.VALUE)
log = open("log.txt", "w")  # never closed: the teardown flushes it as it finalizes the file
log.write("a line the script never flushed")
sys.stdout.write("unflushed at the end")
'''


def _script_dir(tmp_path, source):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "train.py").write_text(source)
    (folder / "helper.py").write_text("VALUE = 42\n")
    return folder


def _run(argv, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *argv], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_entry_runs_the_script_as_main_and_leaves_without_interpreter_teardown(tmp_path):
    script = _script_dir(tmp_path, LEAVING) / "train.py"
    plain = _run([str(script), "--lr=1", "-h"], tmp_path)
    ours = _run(["-m", "remote_runner", SCRIPT_COMMAND, str(script), "--lr=1", "-h"], tmp_path)
    expected = "__main__ ['--lr=1', '-h'] True %s 42\n" % tmp_path
    assert ours.returncode == 0 and ours.stderr == "", ours.stderr
    assert ours.stdout.startswith(expected)
    # as plain Python: the thread is waited for, atexit runs, the last unflushed text comes out ...
    assert "thread done\n" in ours.stdout and "atexit ran\n" in ours.stdout
    assert "unflushed at the end" in ours.stdout
    assert (tmp_path / "log.txt").read_text() == "a line the script never flushed"  # an open file too
    # ... but the script's objects are not torn down (plain Python does, which is where gloo aborts)
    assert "finalized" in plain.stdout and "finalized" not in ours.stdout
    assert plain.stdout.startswith(expected)


@pytest.mark.parametrize("tail, code, said", [
    ("sys.exit(3)\n", 3, ""),
    ("sys.exit()\n", 0, ""),
    ("sys.exit('fatal: no data in /data')\n", 1, "fatal: no data in /data\n"),
    ("def f():\n    raise ValueError('loss is NaN')\nf()\n", 1, None),
])
def test_the_entry_gives_the_scripts_exit_status_and_traceback(tmp_path, tail, code, said):
    script = _script_dir(tmp_path, "import sys\n" + tail) / "train.py"
    ours = _run(["-m", "remote_runner", SCRIPT_COMMAND, str(script)], tmp_path)
    plain = _run([str(script)], tmp_path)
    assert ours.returncode == plain.returncode == code
    assert ours.stderr == plain.stderr  # the same traceback: the script's frames, none of runpy's or ours
    if said is not None:
        assert ours.stderr == said
    else:
        assert ours.stderr.startswith('Traceback (most recent call last):\n  File "%s", line 4' % script)
        assert ours.stderr.endswith("ValueError: loss is NaN\n")
