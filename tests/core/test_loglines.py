"""The run's own lines in its log (started, compiled, warm-up done, its end with the summary), on a real store."""
import time

import pytest
from helpers.stored_runs import put_spool

from ddpgui.core.runs.live import RunSummary
from ddpgui.core.runs.loglines import MARK, end_lines, event_lines, log_text, stored_lines
from ddpgui.core.store import RunStore

T0 = 1_764_500_000.0
CONFIG = {"workload": "mlp", "nproc_per_node": 2, "precision": "fp32", "compile": "default", "batch_size": 32}
EVENTS = [
    {"seq": 0, "t": T0, "event": "started", "world_size": 2, "nnodes": 1, "node_rank": 0},
    {"seq": 1, "t": T0 + 2, "event": "train_start", "backend": "gloo", "device": "cpu", "params": 167178,
     "global_batch": 64},
    {"seq": 2, "t": T0 + 2.5, "event": "compile_start"},
    {"seq": 3, "t": T0 + 24.5, "event": "compile_end", "duration_s": 22.04},
    {"seq": 4, "t": T0 + 25, "event": "warmup_done", "step": 5},
]


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


def _run(store, run_id="r", state="stopped", message="stopped on request", hint="", hosts=("local",),
         config=CONFIG, events=EVENTS):
    store.create_run(run_id, name=run_id, hosts=list(hosts), config=config, state="running",
                     run_dirs={0: f"/runs/{run_id}"})
    store.update_run(run_id, started_at=T0)
    put_spool(store, run_id, "events.jsonl", events)
    put_spool(store, run_id, "metrics.jsonl", [{"seq": i, "t": T0 + 25 + i, "step": i + 1, "loss": 1.0 / (i + 1),
                                                "samples_per_s": 1000.0, "warmup": i < 5} for i in range(40)])
    if state != "running":
        store.update_run(run_id, state=state, message=message, hint=hint, ended_at=T0 + 72)
    return store.get_run(run_id)


def _clock(t):
    return time.strftime("%H:%M:%S", time.localtime(t))


def test_a_stopped_runs_life_and_its_end_with_the_summary(store):
    _run(store)
    lines = stored_lines(store, "r")
    assert lines.before() == [
        f"{MARK} {_clock(T0)}  run started on This computer · 2 processes · mlp ×2 fp32 compile=default batch=32",
        f"{MARK} {_clock(T0 + 2)}  training · gloo on cpu · 167,178 parameters · global batch 64",
        f"{MARK} {_clock(T0 + 2.5)}  torch.compile: compiling the model (the first steps wait for it)",
        f"{MARK} {_clock(T0 + 24.5)}  compiled in 22.0 s",
        f"{MARK} {_clock(T0 + 25)}  warm-up done at step 5: throughput counts from here",
    ]
    first, *rest = lines.after
    assert first == f"{MARK} {_clock(T0 + 72)}  run stopped by you (SIGTERM) after 01:12: 40 steps"
    assert [line.split(None, 1)[1] for line in rest] == [
        "final loss          0.0250", "steady throughput   1.00k samples/s", "compile time        22.0 s"]


def test_a_failed_run_ends_with_its_error_and_hint(store):
    _run(store, state="failed", message="Rank 1 died: ValueError: injected failure", hint="fix rank 1's error")
    after = stored_lines(store, "r").after
    assert "run failed after 01:12: 40 steps" in after[0]
    assert after[-2:] == [f"{MARK} {' ' * 10}error: Rank 1 died: ValueError: injected failure",
                          f"{MARK} {' ' * 10}hint:  fix rank 1's error"]


def test_a_live_run_has_no_end_yet_and_lines_shown_live_are_not_repeated(store):
    _run(store, state="running")
    lines = stored_lines(store, "r")
    assert lines.after == [] and len(lines.before()) == 5
    shown_live = {3, 4}  # compile_end and warmup_done arrived live while the store was read
    assert [line.split("  ", 1)[1] for line in lines.before(shown_live)] == [
        "run started on This computer · 2 processes · mlp ×2 fp32 compile=default batch=32",
        "training · gloo on cpu · 167,178 parameters · global batch 64",
        "torch.compile: compiling the model (the first steps wait for it)"]


def test_a_script_run_on_two_hosts_names_the_hosts_the_processes_and_the_script(store):
    config = {"mode": "script", "nproc_per_node": 2, "nnodes": 2, "script": {"entry": "train.py", "args": ["--x"]}}
    run = _run(store, hosts=("node-a", "node-b"), config=config, state="running",
               events=[{"seq": 0, "t": T0, "event": "started", "world_size": 4, "nnodes": 2}])
    assert event_lines(store.events("r")[0], run) == [
        f"{MARK} {_clock(T0)}  run started on node-a + node-b · 4 processes on 2 nodes · script train.py ×2 (args --x)"]


def test_the_other_events_in_words_and_the_records_the_summary_shows_in_none():
    assert event_lines({"event": "retry", "t": T0, "reason": "rendezvous port 29500 was taken", "attempt": 2}) == [
        f"{MARK} {_clock(T0)}  rendezvous port 29500 was taken: trying again (attempt 2)"]
    assert event_lines({"event": "warning", "t": T0, "message": "skipped an oversize line"})[0].endswith(
        "warning: skipped an oversize line")
    assert event_lines({"event": "placed", "t": T0, "node": "n1", "job": "12"})[0].endswith("placed on n1 (Slurm job 12)")
    for name in ("summary", "inference_summary", "finished", "failed", "stopped", "something_new"):
        assert event_lines({"event": name, "t": T0}) == []


def test_a_stop_other_than_the_users_says_why():
    summary = RunSummary(state="stopped", elapsed_s=5.0, steps=3, message="requeued by Slurm (node failure)")
    assert end_lines(summary, None) == [f"{MARK} --:--:--  run stopped (requeued by Slurm (node failure)) after "
                                        "00:05: 3 steps"]
    finished = RunSummary(state="finished", elapsed_s=None, steps=0)
    assert end_lines(finished, T0) == [f"{MARK} {_clock(T0)}  run finished after --:--: 0 steps"]


def test_a_log_is_shown_without_the_escape_sequences_of_bars_and_colours():
    """Real bytes of a script's logs (tests/fixtures/scriptlogs): tqdm's cursor-up after a nested bar, Rich's
    colours and erase-line; a terminal acts on them, the app's text views would show boxes."""
    tqdm = b"Epoch 2: 100%|\xe2\x96\x88\xe2\x96\x88| 10/10 [00:00<00:00, 92.25it/s, train_loss=0.00343]\n\x1b[A\n"
    rich = b"\r\x1b[2K\x1b[1A\x1b[2KEpoch 0/1  \x1b[35m\xe2\x94\x81\xe2\x94\x81\x1b[0m 3/8 \x1b[3mv_num: 0.000\x1b[0m\n"
    assert log_text(tqdm) == "Epoch 2: 100%|\u2588\u2588| 10/10 [00:00<00:00, 92.25it/s, train_loss=0.00343]\n\n"
    assert log_text(rich) == "\rEpoch 0/1  \u2501\u2501 3/8 v_num: 0.000\n"
    assert log_text(b"caf\xc3\xa9 \xff ok\n") == "caf\u00e9 \ufffd ok\n"  # undecodable bytes shown, not dropped


def test_the_training_line_says_the_model_size_a_run_built():
    event = {"seq": 1, "t": T0, "event": "train_start", "backend": "nccl", "gpu_name": "NVIDIA H200",
             "workload": "transformer", "model_size": "large", "params": 43_118_592, "global_batch": 32}
    (line,) = event_lines(event)
    assert line.endswith("training · nccl on NVIDIA H200 · 43,118,592 parameters (large transformer) · global batch 32")
