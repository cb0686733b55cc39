"""A run's series on a real RunStore: where each came from, the user's choice of the loss (read by every reader,
and reset), the loss choice in bundles, and a store of the previous schema opening with its runs.

The runs are stored as the follower stores them (spool chunks); their records and events come from the host's
own readers (remote_runner.scriptread) fed the real captures in tests/fixtures/scriptlogs, or are written
out by hand where a test needs a shape no capture has."""
import csv
import io
import json
import re
import sqlite3

import numpy as np
import pytest
from helpers.script_outputs import SCRIPT_CONFIG, capture_run, read_as_host
from helpers.stored_runs import put_spool, store_run
from tqdm import tqdm

from ddpgui.core.analysis import run_stats
from ddpgui.core.analysis.comparison import load_curve
from ddpgui.core.outputs.bundle import import_bundle, write_bundle
from ddpgui.core.outputs.points import write_points_csv
from ddpgui.core.runs.live import LiveRun, progress_line, records_summary, run_summary, stats_line, summary_lines
from ddpgui.core.runs.protocol import Chunk
from ddpgui.core.runs.series import (
    LossSeriesError,
    no_metrics,
    run_series_lines,
    script_summary,
    series_info,
    set_loss_series,
)
from ddpgui.core.store import RunStore, run_store, schema


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        yield s


def test_a_lightning_runs_series_say_where_they_came_from(store):
    metrics, events = capture_run("lightning_tqdm")
    store_run(store, "r1", SCRIPT_CONFIG, metrics, events=events)
    infos = {i.name: i for i in series_info(store, "r1")}
    assert list(infos)[0] == "loss" and infos["loss"].is_loss
    assert (infos["loss"].from_, infos["loss"].source) == ("train_loss", "progress bar (stdout)")
    losses = [(r["step"], r["loss"]) for r in metrics if "loss" in r]
    assert infos["loss"].points == len(losses) and (infos["loss"].first, infos["loss"].last) == (losses[0], losses[-1])
    assert infos["val_loss"].source == "progress bar (stdout)" and not infos["val_loss"].is_loss
    assert "v_num" not in infos
    lines = dict((label, text) for label, text in run_series_lines(store, "r1") if label)
    assert lines["series"] == "loss  from train_loss, progress bar (stdout)"
    assert no_metrics(store, "r1") is None


def test_a_series_given_by_two_sources_names_both(store):
    metrics = [{"step": s, "loss": 1.0 / s, "src": "tensorboard", "phase": "script", "t": 10.0 + s} for s in (1, 2)]
    events = [{"event": "series", "name": "loss", "from": "loss", "source": "TensorBoard tag train/loss",
               "file": "/logs/events.out.tfevents.1", "loss": True},
              {"event": "series", "name": "loss", "also": "printed lines (stdout)"},
              {"event": "series", "name": "loss", "also": "printed lines (stdout)"}]
    store_run(store, "r1", SCRIPT_CONFIG, metrics, events=events)
    (info,) = series_info(store, "r1")
    assert (info.source, info.also, info.file, info.points) == ("TensorBoard tag train/loss",
                                                                ["printed lines (stdout)"],
                                                                "/logs/events.out.tfevents.1", 2)
    assert run_series_lines(store, "r1")[0] == (
        "series", "loss  TensorBoard tag train/loss; also printed lines (stdout)")


def test_the_trainer_summary_is_the_runs_summary_not_a_step(store):
    metrics, events = capture_run("trainer_gpt2", streams=["stdout"])
    store_run(store, "r1", SCRIPT_CONFIG, metrics, events=events)
    assert script_summary(store, "r1") == {"train_runtime": 0.4252, "train_samples_per_second": 301.0,
                                           "train_steps_per_second": 37.63, "train_loss": 4.326, "epoch": 2.0}
    assert "train_runtime" not in {i.name for i in series_info(store, "r1")}
    assert ("script", "train_runtime 0.425 · train_samples_per_second 301 · train_steps_per_second 37.6 · "
                      "train_loss 4.33 · epoch 2.00") in run_series_lines(store, "r1")


def test_choosing_another_loss_changes_what_every_reader_reads_and_resetting_brings_it_back(store, tmp_path):
    metrics, events = capture_run("trainer_gpt2", streams=["stdout"])
    store_run(store, "r1", SCRIPT_CONFIG, metrics, events=events)
    train = [(r["step"], r["loss"]) for r in metrics if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in metrics if "eval_loss" in r]
    assert len(evals) == 4 and train[-1][1] != evals[-1][1]
    store.update_run("r1", summary=records_summary(store, "r1") | {"source": "records"})  # as the manager does

    def read_by_everyone():
        curve = load_curve(store, "r1")
        rows = write_points_csv(store, ["r1"], tmp_path / "out")[0].read_text().splitlines()
        points = [(int(r["step"]), float(r["value"])) for r in csv.DictReader(rows) if r["metric"] == "loss"]
        live = LiveRun()
        for rec in store.records("r1"):
            live.add("metrics.jsonl", rec)
        return {"curve": list(zip(curve.step.astype(int).tolist(), curve.loss.tolist())), "points": points,
                "records": [(r["step"], r["loss"]) for r in store.records("r1") if "loss" in r],
                "stats": (run_stats(store, "r1").final_loss, run_stats(store, "r1").best_loss),
                "summary": run_summary(store, "r1").final_loss, "shown": store.get_run("r1").summary["final_loss"],
                "live": live.loss}

    before = read_by_everyone()
    assert before == {"curve": train, "points": train, "records": train, "stats": (train[-1][1], min(v for _, v in train)),
                      "summary": train[-1][1], "shown": train[-1][1], "live": train[-1][1]}

    record = set_loss_series(store, "r1", "eval/loss")  # the name as TensorBoard would have it: the same series
    assert record.loss_series == "eval_loss"
    after = read_by_everyone()
    assert after == {"curve": evals, "points": evals, "records": evals, "stats": (evals[-1][1], min(v for _, v in evals)),
                     "summary": evals[-1][1], "shown": evals[-1][1], "live": evals[-1][1]}
    # the host's loss is read under its own name; eval_loss is not read twice
    columns = store.series("r1", keys=["loss", "eval_loss"])
    assert np.isnan(columns["eval_loss"]).all()
    assert [(r["step"], r["orig_loss"]) for r in store.records("r1") if "orig_loss" in r] == train
    infos = {i.name: i for i in series_info(store, "r1")}
    assert infos["loss"].from_ == "eval_loss" and infos["orig_loss"].points == len(train)
    assert "eval_loss" not in infos
    assert run_series_lines(store, "r1")[0] == ("series", "loss  from eval_loss, printed lines (stdout)  (your choice)")
    # what the follow stores from now on (the live view's records) is read the same way
    new = store.store_chunk("r1", 0, _chunk(store, [{"seq": 10_000, "t": 2000.0, "step": 13, "eval_loss": 4.2,
                                                     "src": "stdout", "phase": "script"},
                                                    {"seq": 10_001, "t": 2001.0, "step": 14, "loss": 4.1,
                                                     "src": "stdout", "phase": "script"}])).new["metrics.jsonl"]
    assert [(r.get("loss"), r.get("orig_loss")) for r in new] == [(4.2, None), (None, 4.1)]

    record = set_loss_series(store, "r1", None)
    assert record.loss_series is None
    again = read_by_everyone()
    assert again["records"] == train + [(14, 4.1)] and again["shown"] == 4.1
    assert store.records("r1", as_stored=True) == store.records("r1")


def _chunk(store, records):
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    offset = store.offsets("r1").get("metrics.jsonl", 0)
    return Chunk("metrics.jsonl", offset, offset + len(data), data)


def test_the_loss_is_named_as_the_script_named_it_or_as_listed(store):
    metrics = [{"step": 1, "loss": 2.0, "orig_loss": 3.0, "val_loss": 4.0, "src": "stdout", "phase": "script"},
               {"step": 2, "loss": 1.5, "orig_loss": 2.5, "val_loss": 3.5, "src": "stdout", "phase": "script"}]
    events = [{"event": "series", "name": "loss", "from": "train_loss", "source": "printed lines (stdout)",
               "loss": True},
              {"event": "series", "name": "orig_loss", "from": "loss", "source": "printed lines (stdout)"},
              {"event": "series", "name": "val_loss", "from": "val_loss", "source": "printed lines (stdout)"}]
    store_run(store, "r1", SCRIPT_CONFIG, metrics, events=events)
    assert set_loss_series(store, "r1", "loss").loss_series == "orig_loss"  # what the script printed as "loss"
    assert [r["loss"] for r in store.records("r1")] == [3.0, 2.5]
    assert [r["train_loss"] for r in store.records("r1")] == [2.0, 1.5]
    assert set_loss_series(store, "r1", "Val Loss").loss_series == "val_loss"
    assert set_loss_series(store, "r1", "loss").loss_series == "orig_loss"
    assert set_loss_series(store, "r1", "train_loss").loss_series is None
    with pytest.raises(LossSeriesError, match="no series 'accuracy'") as err:
        set_loss_series(store, "r1", "accuracy")
    assert err.value.hint == "its series: loss (from train_loss), orig_loss, val_loss"
    with pytest.raises(LossSeriesError):
        set_loss_series(store, "r1", "step")  # bookkeeping, not a series
    assert store.get_run("r1").loss_series is None


def test_a_built_in_workloads_loss_can_be_chosen_too(store):
    metrics = [{"step": s, "phase": "train", "loss": 1.0 / s, "samples_per_s": 100.0 * s, "warmup": False}
               for s in (1, 2, 3)]
    store_run(store, "r1", {"workload": "mlp", "nproc_per_node": 1}, metrics, events=[{"event": "finished"}])
    assert run_series_lines(store, "r1") == []  # nothing to say of a built-in workload's series
    assert {i.name: i.source for i in series_info(store, "r1")} == {"loss": "built-in workload",
                                                                    "samples_per_s": "built-in workload"}
    set_loss_series(store, "r1", "samples_per_s")
    assert [(r["loss"], r["orig_loss"]) for r in store.records("r1")] == [(100.0, 1.0), (200.0, 0.5), (300.0, 1 / 3)]
    assert run_series_lines(store, "r1")[0] == ("series", "loss  from samples_per_s, built-in workload  (your choice)")


def test_a_bundle_carries_the_loss_choice_and_the_records_as_stored(store, tmp_path):
    metrics, events = capture_run("lightning_tqdm")
    store_run(store, "r1", SCRIPT_CONFIG, metrics, events=events)
    set_loss_series(store, "r1", "val_loss")
    path = write_bundle(store, ["r1"], tmp_path / "runs.json")
    with RunStore(tmp_path / "other.sqlite3") as other:
        (copy,) = import_bundle(other, path)
        assert copy.loss_series == "val_loss"
        assert other.records("r1") == store.records("r1")
        assert other.records("r1", as_stored=True) == store.records("r1", as_stored=True) == metrics_with_seq(metrics)


def metrics_with_seq(metrics):
    return [dict(r, seq=i) for i, r in enumerate(metrics)]


def test_a_run_that_gave_no_metric_says_what_it_saw(store):
    bar = io.StringIO()
    for _ in tqdm(range(4), file=bar, ascii=True, desc="training", mininterval=0):  # a bar without values
        pass
    metrics, events = read_as_host({"stdout": b"epoch one done\n" + bar.getvalue().encode() + b"saving checkpoint\n"})
    assert metrics == []
    store_run(store, "r1", SCRIPT_CONFIG, [], events=events)
    report = no_metrics(store, "r1")
    assert re.fullmatch(r"the script gave no metric ddpgui could read \(rank 0 printed \d+ lines on stdout, "
                        r"\d+ progress-bar frames without values on stdout\)", report["message"]), report["message"]
    assert report["last_lines"][-1] == "stdout: saving checkpoint"
    assert "parse-log" in report["hint"] and "--metric-regex" in report["hint"]
    labels = [label for label, _ in run_series_lines(store, "r1")]
    assert labels[0] == "no metrics" and labels[-1] == "hint" and series_info(store, "r1") == []
    lines = summary_lines(run_summary(store, "r1"))
    assert lines[1] == f"  no metrics: {report['message']}" and lines[-1] == f"  hint:  {report['hint']}"
    assert "    | stdout: saving checkpoint" in lines


def test_the_progress_line_shows_a_scripts_bar_and_its_eta_and_invents_no_total():
    live = LiveRun()
    live.add_metric({"t": 10.0, "step": 120, "loss": 0.5, "printed_step": 20, "bar_total": 50, "eta_s": 12.0})
    line = progress_line(live)
    assert "step 120  bar 20/50  loss 0.500" in line and line.endswith("ETA 00:12")
    assert "step 120   ·   bar 20/50   ·   loss 0.500" in stats_line(live, active=True)
    assert "ETA 00:12" in stats_line(live, active=True) and "ETA" not in stats_line(live, active=False)
    plain = LiveRun()
    plain.add_metric({"t": 10.0, "step": 120, "loss": 0.5, "printed_step": 3})  # a printed counter: no bar
    assert "bar" not in progress_line(plain) and "ETA" not in progress_line(plain)
    assert "/" not in progress_line(plain).split("loss")[0]  # no total made up for the step


def test_a_store_of_the_previous_schema_opens_with_its_runs(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite3"
    migrations = schema.MIGRATIONS
    monkeypatch.setattr(schema, "MIGRATIONS", migrations[:2])
    monkeypatch.setattr(run_store, "loss_choice", lambda conn, run_id: None)  # that ddpgui had no choice
    with RunStore(path) as old:
        assert old.schema_version == 2
        old._conn().execute("INSERT INTO runs (id, name, config, created_at, updated_at) "
                            "VALUES ('r1', 'before', '{\"mode\": \"script\"}', 0, 0)")
        put_spool(old, "r1", "metrics.jsonl", [{"seq": 0, "t": 1.0, "step": 1, "loss": 2.0, "acc": 0.5}])
    monkeypatch.undo()
    assert "loss_series" not in [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(runs)")]
    with RunStore(path) as new:
        assert new.schema_version == len(schema.MIGRATIONS) == 3
        assert new.get_run("r1").loss_series is None
        assert [i.name for i in series_info(new, "r1")] == ["loss", "acc"]
        set_loss_series(new, "r1", "acc")
        assert new.records("r1") == [{"seq": 0, "t": 1.0, "step": 1, "orig_loss": 2.0, "loss": 0.5}]
