"""Users' own training scripts, written each framework's ordinary way, under the real
``ddpgui launch local --script DIR --nproc 2 --follow``: real torchrun (gloo, 2 CPU processes), the real
frameworks `make test` installs, the real supervisor and store. Each script records, in truth.jsonl, what it
printed or logged (the test's reference, written by the script itself: a callback or its own loop); every
stored loss value is compared with it, step by step. The scripts are tests/fixtures/scripts/frameworks/*;
each test runs a copy in tmp_path (a script on This computer runs in its own folder and writes there)."""
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.cli_process import cli_env, run_cli

from ddpgui.core.runs.series import no_metrics, series_info
from ddpgui.core.store import RunStore
from ddpgui.core.store.run_store import STORE_FILE

pytestmark = pytest.mark.slow

FRAMEWORKS = Path(__file__).resolve().parents[1] / "fixtures" / "scripts" / "frameworks"


def launch(tmp_path, name, *script_args, nproc=2):
    """Run the script folder ``name`` (a copy) to its end through the CLI; returns (store, run, folder, output)."""
    folder = tmp_path / name
    shutil.copytree(FRAMEWORKS / name, folder)
    env = cli_env(tmp_path, OMP_NUM_THREADS="1")
    code, out, err = run_cli(["launch", "local", "--script", str(folder), "--entry", "train.py", "--nproc",
                              str(nproc), "--follow", "--", *script_args], env, timeout=240)
    store = RunStore(tmp_path / "data" / STORE_FILE)
    (run,) = store.list_runs()
    assert run.state == "finished", (code, out, err, run.message, run.hint,
                                     store.log_tail(run.id, "stderr.log")[-3000:])
    return store, run, folder, out


def truth(folder):
    return [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]


def stored(store, run_id, key):
    """(step, value) of every finite value of ``key`` in the run's metric records, in order."""
    s = store.series(run_id, keys=["step", key])
    keep = np.isfinite(s[key])
    return list(zip(s["step"][keep].astype(int).tolist(), s[key][keep].tolist()))


def by_name(infos):
    return {i.name: i for i in infos}


def test_transformers_trainer_every_logged_loss_at_its_step_and_tensorboard_shown_once(tmp_path):
    store, run, folder, out = launch(tmp_path, "hf_trainer", "out")
    for key in ("loss", "eval_loss"):
        logged = [t for t in truth(folder) if key in t["logs"]]
        got = stored(store, run.id, key)
        # Trainer prints each float with .4g: the stored values are what it printed ...
        assert [v for _, v in got] == [float(f"{t['logs'][key]:.4g}") for t in logged]
        # ... at Trainer's global step, which its log dict (stdout) does not print: the step its bar (stderr)
        # showed when the dict was printed, kept however late the supervisor reads (rank 0's Python streams come
        # in order through one FIFO). tqdm draws a frame at most every 2 ms (TQDM_MININTERVAL), so a step
        # faster than that may leave the bar one step behind when the dict comes
        assert all(0 <= t["step"] - s <= 1 for (s, _), t in zip(got, logged)), (got, logged)
        assert sum(s == t["step"] for (s, _), t in zip(got, logged)) >= len(logged) - 1, (got, logged)
        assert [s for s, _ in got] == sorted(s for s, _ in got)
    infos = by_name(series_info(store, run.id))
    assert infos["loss"].source == "printed lines (stdout)" and infos["loss"].is_loss
    # report_to tensorboard wrote the same values under train/loss, found in out/runs/...: shown once
    assert any(a.startswith("TensorBoard tag train/loss") for a in infos["loss"].also), infos["loss"]
    assert "train/loss" not in infos and "train_runtime" not in infos
    events = store.events(run.id)
    (summary,) = [e for e in events if e.get("event") == "script_summary"]
    assert summary["values"]["train_runtime"] > 0
    assert any(e.get("event") == "log_file" and "/out/runs/" in e["path"] for e in events)
    assert "16 steps" in out, out


def rich_frames(log: str, per_epoch: int) -> dict[int, float]:
    """step → the train_loss the last frame Rich drew at that step showed (read here on its own, plainly: the
    log split at carriage returns, colour codes dropped; a frame is the bar's line and the values wrapped
    below it)."""
    shown = {}
    for frame in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", log).split("\r"):
        bar = re.search(r"Epoch (\d+)/\d+ .*? (\d+)/\d+ ", frame)
        loss = re.search(r"train_loss: ([0-9.]+)", frame)
        if bar and loss and int(bar.group(2)) > 0:
            shown[int(bar.group(1)) * per_epoch + int(bar.group(2))] = float(loss.group(1))
    return shown


def test_lightning_rich_bar_and_a_csv_log_at_an_absolute_path(tmp_path):
    logs = tmp_path / "elsewhere" / "csv"
    store, run, folder, out = launch(tmp_path, "lightning_rich", str(logs))
    logged = truth(folder)  # the bar's metrics after each batch: Rich prints them with 3 decimals
    expected = {i + 1: round(t["train_loss"], 3) for i, t in enumerate(logged)}
    # What Rich drew: Lightning moves the bar, then sets its values and redraws, and Rich's own refresh thread
    # draws too; on a loaded machine the last frame of a step now and then still shows the step before's
    # value, or (the first step) none. The run stores what the bar last showed at each step, as a user saw it.
    drawn = rich_frames(store.log_tail(run.id, "stdout.log").decode(errors="replace"), per_epoch=8)
    got = stored(store, run.id, "loss")
    assert [s for s, _ in got] == sorted(drawn) and set(drawn) <= set(expected), (got, drawn)
    assert all(math.isclose(v, drawn[s], abs_tol=1e-9) for s, v in got), (got, drawn)
    assert len(got) >= 14  # 2 epochs of 8 batches: a point per step, counted on ...
    same = [s for s, v in got if math.isclose(v, expected[s], abs_tol=1.5e-3)]
    assert len(same) >= 13, (got, expected)  # ... each (but a rare stale frame) the script's own value
    infos = by_name(series_info(store, run.id))
    assert infos["loss"].from_ == "train_loss" and infos["loss"].source == "progress bar (stdout)"
    csv = str(logs)
    assert any(a.startswith("CSV log column train_loss") for a in infos["loss"].also), infos["loss"]
    assert any(e.get("event") == "log_file" and e["path"].startswith(csv) and e["reading"]
               for e in store.events(run.id))
    assert "v_num" not in infos and "epoch" in infos


def test_lightning_tqdm_bar_with_its_default_tensorboard_logger_in_the_folder(tmp_path):
    store, run, folder, out = launch(tmp_path, "lightning_tqdm")
    done = truth(folder)
    got = stored(store, run.id, "loss")
    # Lightning's tqdm bar draws each batch with 3 significant digits; steps count on through the epochs
    assert [s for s, _ in got] == [t["global_step"] for t in done] == list(range(1, 13))
    assert all(math.isclose(v, float(f"{t['train_loss']:.3g}"), rel_tol=6e-3) for (_, v), t in zip(got, done))
    assert list(folder.glob("lightning_logs/version_0/events.out.tfevents.*")), "the logs land in the folder"
    infos = by_name(series_info(store, run.id))
    assert any(a.startswith("TensorBoard tag train_loss") for a in infos["loss"].also), infos["loss"]


def test_a_tqdm_loop_and_a_summary_writer_given_an_absolute_logdir(tmp_path):
    logdir = tmp_path / "scratch" / "tb"
    store, run, folder, out = launch(tmp_path, "tqdm_tensorboard", "--logdir", str(logdir))
    done = truth(folder)
    # the bar (stderr) shows loss=... with tqdm's 3 significant digits at n = step - 1 (set_postfix runs inside
    # `for step in bar`, before the bar counts the step)
    got = dict(stored(store, run.id, "loss"))
    expected = {t["step"] - 1: float(t["shown"]) for t in done}
    expected[done[-1]["step"]] = float(done[-1]["shown"])  # the bar's last frame, drawn as it closes
    assert got == expected
    # Accuracy/train is only in the event file: read from the absolute path, exact (float32), at its steps
    acc = stored(store, run.id, "accuracy")
    assert acc == [(t["step"], float(np.float32(t["accuracy"]))) for t in done if "accuracy" in t]
    infos = by_name(series_info(store, run.id))
    assert infos["accuracy"].source == "TensorBoard tag Accuracy/train" and infos["accuracy"].file.startswith(
        str(logdir))
    assert infos["loss"].source == "progress bar (stderr)"
    assert any(a == "TensorBoard tag Loss/train" for a in infos["loss"].also)


def test_accelerate_prints_and_its_tensorboard_tracker(tmp_path):
    project = tmp_path / "tracking"
    store, run, folder, out = launch(tmp_path, "accelerate_tb", str(project))
    done = truth(folder)
    losses = [(t["step"], float(np.float32(t["train_loss"]))) for t in done if "train_loss" in t]
    assert stored(store, run.id, "loss") == losses  # from the TensorBoard tracker, every step, exact
    # accuracy: printed by accelerator.print once an epoch, and logged too: shown once
    assert [v for _, v in stored(store, run.id, "accuracy")] == [t["accuracy"] for t in done if "accuracy" in t]
    infos = by_name(series_info(store, run.id))
    assert infos["loss"].from_ == "train_loss" and infos["loss"].source == "TensorBoard tag train_loss"


def test_a_script_that_prints_no_metric_says_so_with_what_it_saw(tmp_path):
    store, run, folder, out = launch(tmp_path, "silent", nproc=1)
    report = no_metrics(store, run.id)
    assert report is not None and "2 lines on stdout" in report["message"], report
    assert "stdout: done, saving the model" in report["last_lines"]
    assert "no metric" in out and "--metric-regex" in out, out
    code, shown, _ = run_cli(["show", run.id], cli_env(tmp_path))
    assert code == 0 and "no metric" in shown, shown


def test_hostile_output_is_skipped_and_nothing_after_it_is_lost(tmp_path):
    store, run, folder, out = launch(tmp_path, "hostile", nproc=1)
    assert stored(store, run.id, "loss") == [(1, 0.5), (1, 0.25), (3, 0.125)]
    assert stored(store, run.id, "acc") == [(4, 0.5)]
    assert len(store.log_tail(run.id, "stdout.log")) > 0
