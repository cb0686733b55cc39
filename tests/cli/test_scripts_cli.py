"""The real ``ddpgui`` CLI on a script run's series: ``series`` (and --loss), ``parse-log``, and what ``show``,
``follow`` and ``export`` say of where series came from and of a run that gave no metric.  The runs are put
into the CLI's store as the follower stores them, with records and events the host's readers made from the
real captures in tests/fixtures/scriptlogs."""
import csv
import io
import json
import re

import pytest
from helpers.cli_process import cli_env, run_cli
from helpers.script_outputs import CAPTURES, SCRIPT_CONFIG, capture_run, read_as_host
from helpers.stored_runs import store_run
from tqdm import tqdm

from ddpgui.cli import build_parser
from ddpgui.cli.options import launch_settings
from ddpgui.core.runs.config import make_config
from ddpgui.core.runs.live import records_summary
from ddpgui.core.store import RunStore


@pytest.fixture
def env(tmp_path):
    return cli_env(tmp_path)


def put_run(tmp_path, run_id, metrics, events):
    """A finished script run in the CLI's store, with the summary the manager gives a run at its end."""
    (tmp_path / "data").mkdir(exist_ok=True)
    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        store_run(store, run_id, dict(SCRIPT_CONFIG, name=run_id), metrics, events=events)
        summary = records_summary(store, run_id)
        if summary:
            store.update_run(run_id, summary=dict(summary, source="records"))


def test_series_lists_where_each_came_from_and_loss_chooses_another(tmp_path, env):
    metrics, events = capture_run("lightning_tqdm")
    put_run(tmp_path, "lit", metrics, events)
    train = [r["loss"] for r in metrics if "loss" in r]
    val = [r["val_loss"] for r in metrics if "val_loss" in r]

    code, out, err = run_cli(["series", "lit"], env)
    assert code == 0, err
    header, first, *rest = out.splitlines()
    assert header.split() == ["series", "points", "first", "last", "source"]
    assert first.startswith("loss (from train_loss)") and first.endswith("progress bar (stdout)")
    assert f"  {len(train)}  " in first
    assert any(line.startswith("val_loss ") and line.endswith("progress bar (stdout)") for line in rest)

    code, out, err = run_cli(["show", "lit"], env)
    assert code == 0, err
    assert "  series      loss  from train_loss, progress bar (stdout)\n" in out
    assert "              epoch, val_loss: progress bar (stdout); printed_step: the step as printed" in out
    assert f"  final_loss            {train[-1]:.4g}\n" in out

    code, out, err = run_cli(["series", "lit", "--loss", "val_loss"], env)
    assert code == 0, err
    assert out.splitlines()[0] == "run lit: the loss is now val_loss (was train_loss)"
    assert out.splitlines()[2].startswith("loss (from val_loss, your choice)")
    code, out, err = run_cli(["show", "lit"], env)
    assert "  series      loss  from val_loss, progress bar (stdout)  (your choice)\n" in out
    assert f"  final_loss            {val[-1]:.4g}\n" in out
    code, out, err = run_cli(["series", "lit", "--json"], env)
    listed = json.loads(out)
    assert listed["loss_series"] == "val_loss" and listed["no_metrics"] is None
    assert [(s["name"], s["from"], s["points"]) for s in listed["series"][:1]] == [("loss", "val_loss", len(val))]
    assert ("train_loss", "train_loss", len(train)) in [(s["name"], s["from"], s["points"]) for s in listed["series"]]

    code, out, err = run_cli(["series", "lit", "--loss", "accuracy"], env)
    assert code == 2 and out == ""
    assert err.splitlines() == ["ddpgui: run lit has no series 'accuracy'",
                                "hint: its series: loss (from val_loss), train_loss, epoch, printed_step"]
    code, out, err = run_cli(["series", "lit", "--loss-default"], env)
    assert code == 0 and out.splitlines()[0] == "run lit: the loss is now train_loss (was val_loss)"
    code, out, err = run_cli(["show", "lit"], env)
    assert f"  final_loss            {train[-1]:.4g}\n" in out


def test_a_run_without_metrics_says_so_in_show_follow_and_series(tmp_path, env):
    bar = io.StringIO()
    for _ in tqdm(range(3), file=bar, desc="epoch", mininterval=0):  # a bar that shows no value
        pass
    metrics, events = read_as_host({"stderr": bar.getvalue().encode(), "stdout": b"loading data\ntraining done\n"})
    assert metrics == []
    put_run(tmp_path, "quiet", metrics, events)
    report = next(e for e in events if e["event"] == "no_metrics")

    code, out, err = run_cli(["show", "quiet"], env)
    assert code == 0, err
    assert f"  no metrics  {report['message']}\n" in out and f"  hint        {report['hint']}\n" in out
    assert "              | stdout: training done\n" in out
    code, out, err = run_cli(["follow", "quiet"], env)
    assert code == 0, err
    assert f"  no metrics: {report['message']}\n" in out and f"  hint:  {report['hint']}\n" in out
    code, out, err = run_cli(["series", "quiet"], env)
    assert code == 0 and out.startswith(report["message"] + "\nits last lines:\n")


def test_parse_log_prints_the_series_or_says_what_it_saw(tmp_path, env):
    code, out, err = run_cli(["parse-log", str(CAPTURES / "trainer_gpt2.stdout")], env)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"printed output in {CAPTURES / 'trainer_gpt2.stdout'}: 12 records, 8 series"
    assert lines[2].split() == ["loss", "8", "4.33", "@1", "4.33", "@11", "printed", "lines", "(stdout)"]
    assert "the loss: loss (chosen as a run would choose it; --loss-series NAME reads another)" in lines
    assert lines[-1] == ("script summary: train_runtime 0.425 · train_samples_per_second 301 · "
                         "train_steps_per_second 37.6 · train_loss 4.33 · epoch 2.00")

    code, out, err = run_cli(["parse-log", str(CAPTURES / "trainer_gpt2.stderr")], env)
    assert code == 1
    assert re.match(r"no metric found in trainer_gpt2\.stderr \(\d+ lines, \d+ progress-bar frames without values\)\n",
                    out), out
    assert "\nits last lines:\n  | " in out and "\nhint: ddpgui reads lines like" in out and "--metric-regex" in out

    (tmp_path / "empty.log").write_bytes(b"")
    code, out, err = run_cli(["parse-log", str(tmp_path / "empty.log"), "--json"], env)
    assert code == 1 and json.loads(out)["no_metrics"]["message"] == "no metric found in empty.log; the file is empty"
    code, out, err = run_cli(["parse-log", str(tmp_path / "missing.log")], env)
    assert code == 2 and err.startswith(f"ddpgui: cannot read {tmp_path / 'missing.log'}: No such file")
    code, out, err = run_cli(["parse-log", str(tmp_path / "empty.log"), "--metric-regex", "(?P<loss"], env)
    assert code == 2 and err.startswith("ddpgui: --metric-regex is not a valid regular expression")


def test_export_csv_writes_where_each_series_came_from(tmp_path, env):
    metrics, events = capture_run("trainer_gpt2", streams=["stdout"])
    put_run(tmp_path, "hf", metrics, events)
    code, out, err = run_cli(["export", "hf", "--format", "csv", "--out", str(tmp_path / "out")], env)
    assert code == 0, err
    assert str(tmp_path / "out" / "series.csv") in out.split()
    with open(tmp_path / "out" / "series.csv", newline="") as fh:
        rows = {r["metric"]: r for r in csv.DictReader(fh)}
    assert rows["loss"] == {"run": "hf", "metric": "loss", "source": "printed lines (stdout)", "from": "loss",
                            "also": "", "file": "", "points": "8"}
    assert rows["eval_loss"]["points"] == "4" and "epoch" not in rows  # epoch is an id column of points.csv
    with open(tmp_path / "out" / "points.csv", newline="") as fh:
        metrics_in_points = {r["metric"] for r in csv.DictReader(fh)}
    assert set(rows) <= metrics_in_points


def test_launch_takes_the_loss_series_of_a_script():
    args = build_parser().parse_args(["launch", "local", "--script", "/src", "--loss-series", "val_loss"])
    config = make_config(launch_settings(args))
    assert config.script.loss_series == "val_loss"
    assert make_config(launch_settings(build_parser().parse_args(["launch", "local", "--script", "/src"]))
                       ).script.loss_series is None
