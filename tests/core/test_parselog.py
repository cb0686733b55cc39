"""parse_log: the host's own readers run here on a log, before a launch: the real captures of Transformers'
Trainer, Lightning (tqdm and Rich bars), a tqdm loop and Accelerate (tests/fixtures/scriptlogs), a TensorBoard
folder written by the real SummaryWriter, CSV logs, and bad input (empty, binary, a 10 MiB line)."""
import ast
import re
import tracemalloc
from pathlib import Path

import pytest

from ddpgui.core.runs.parselog import parse_log

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"


def by_name(result):
    return {info.name: info for info in result.series}


def test_the_trainers_log_dicts_are_its_series_and_its_closing_dict_the_summary():
    text = (CAPTURES / "trainer_gpt2.stdout").read_text()
    dicts = [ast.literal_eval(line) for line in text.splitlines() if line.startswith("{")]
    logged = [float(d["loss"]) for d in dicts if "loss" in d]
    evals = [float(d["eval_loss"]) for d in dicts if "eval_loss" in d]
    result = parse_log(CAPTURES / "trainer_gpt2.stdout")
    series = by_name(result)
    assert result.kind == "file" and result.loss_from == "loss" and result.no_metrics is None
    assert (series["loss"].points, series["loss"].first[1], series["loss"].last[1]) == (len(logged), logged[0], logged[-1])
    assert (series["eval_loss"].points, series["eval_loss"].first[1], series["eval_loss"].last[1]) == (
        len(evals), evals[0], evals[-1])
    assert series["loss"].source == "printed lines (stdout)" and series["loss"].is_loss
    assert series["lr"].from_ == "lr" and "learning_rate" not in series
    assert result.summary == {k: float(v) for k, v in dicts[-1].items()}
    assert "train_runtime" not in series


@pytest.mark.parametrize("capture, stream, key", [
    ("lightning_tqdm", "stdout", "train_loss"),
    ("tqdm_stderr", "stderr", "loss"),
    ("tqdm_stdout", "stdout", "loss"),
])
def test_a_progress_bars_postfix_gives_the_loss_one_value_per_step(capture, stream, key):
    text = (CAPTURES / f"{capture}.{stream}").read_text()
    # a bar redraws a step's frame when its postfix is set: the last frame drawn at each n counts
    values = [float(v) for v in re.findall(r"\d+/\d+ \[[^\]]*?" + key + r"=([0-9.e+-]+)", text)]
    result = parse_log(CAPTURES / f"{capture}.{stream}")
    loss = by_name(result)["loss"]
    assert result.loss_from == key and loss.source == f"progress bar ({stream})"
    assert loss.first[1] == values[0] and loss.last[1] == values[-1]
    assert 0 < loss.points <= len(values)
    assert "v_num" not in by_name(result) and "train" not in by_name(result)  # no bar's description, no v_num


def test_lightnings_rich_bar_gives_the_loss_too():
    result = parse_log(CAPTURES / "lightning_rich_tty.stdout")
    series = by_name(result)
    assert result.loss_from == "train_loss" and series["loss"].source == "progress bar (stdout)"
    assert series["loss"].points >= 20 and series["val_loss"].points > 0


def test_accelerates_prints_give_the_loss_and_the_accuracy():
    result = parse_log(CAPTURES / "accelerate_print.stdout")
    series = by_name(result)
    text = (CAPTURES / "accelerate_print.stdout").read_text()
    losses = [float(v) for v in re.findall(r"loss ([0-9.]+)", text)]
    assert (series["loss"].points, series["loss"].first[1], series["loss"].last[1]) == (len(losses), losses[0],
                                                                                      losses[-1])
    assert series["accuracy"].points == 3 and series["accuracy"].last[1] == 0.9375


def test_torchtitans_coloured_lines_give_the_loss_and_its_validation_apart():
    text = (CAPTURES / "torchtitan.stdout").read_text()
    losses = [float(v) for v in re.findall(r"(?<!validate )step: +\d+ .*?loss: ([0-9.]+)", text)]
    result = parse_log(CAPTURES / "torchtitan.stdout")
    series = by_name(result)
    assert (series["loss"].points, series["loss"].first[1], series["loss"].last[1]) == (len(losses), losses[0],
                                                                                      losses[-1])
    assert series["val_loss"].points == 1 and series["tps"].last[1] == 4376 and len(losses) == 4


def test_a_log_without_metrics_says_what_it_saw_and_what_to_try():
    result = parse_log(CAPTURES / "trainer_gpt2.stderr")
    assert result.series == [] and result.records == 0
    report = result.no_metrics
    assert re.fullmatch(r"no metric found in trainer_gpt2\.stderr \(\d+ lines, \d+ progress-bar frames without values\)",
                        report["message"]), report["message"]
    assert "--metric-regex" in report["hint"] and "set_postfix" in report["hint"]
    assert report["last_lines"][-1].startswith("100%|") and not report["last_lines"][-1].startswith("stderr:")


def test_a_metric_regex_and_a_loss_series_are_honoured(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"it={i} | objective {1 / (i + 1):.4f} | val_loss: {2 / (i + 1):.3f}\n" for i in range(5)))
    plain = parse_log(log)  # a validation loss is never taken for the run's loss
    assert plain.loss_from is None and set(by_name(plain)) == {"objective", "val_loss"}
    result = parse_log(log, metric_regex=r"it=(?P<step>\d+) \| objective (?P<loss>[0-9.]+)")
    loss = by_name(result)["loss"]
    assert (loss.points, loss.first, loss.last) == (5, (0, 1.0), (4, 0.2))
    chosen = parse_log(CAPTURES / "trainer_gpt2.stdout", loss_series="eval_loss")
    assert chosen.loss_from == "eval_loss" and by_name(chosen)["loss"].points == 4
    assert by_name(chosen)["orig_loss"].points == 8  # the series the Trainer called loss, under its own name
    missing = parse_log(CAPTURES / "trainer_gpt2.stdout", loss_series="val_acc")
    assert missing.loss_from is None and "no series is named val_acc: a run would have no loss" in missing.notes
    with pytest.raises(re.error):
        parse_log(log, metric_regex="(")


@pytest.fixture(scope="module")
def tensorboard_folder(tmp_path_factory):
    """A Lightning-like log folder: a real SummaryWriter's event file (old-style scalars) and a CSV log."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path_factory.mktemp("logs")
    writer = SummaryWriter(str(folder / "version_0"))
    for step in range(50):
        writer.add_scalar("train/loss", 2.0 / (step + 1), step)
        if step % 10 == 9:
            writer.add_scalar("eval/accuracy", step / 100, step)
    writer.close()
    (folder / "version_0" / "metrics.csv").write_text(
        "epoch,step,train_loss,val_loss\n0,9,0.5,\n0,9,,0.7\n1,19,0.25,\n1,19,,0.6\n")
    (folder / "hparams.csv").write_text("name,value\nlr,0.1\n")
    return folder


def test_a_folder_gives_every_event_file_and_csv_log_under_it(tensorboard_folder):
    calls = []
    result = parse_log(tensorboard_folder, progress=lambda done, total: calls.append((done, total)))
    series = by_name(result)
    assert result.kind == "folder" and result.no_metrics is None and calls[-1] == (3, 3)
    assert result.loss_from == "loss"  # the event file comes first in version_0: its train/loss is the loss
    loss = series["loss"]
    assert (loss.points, loss.first, loss.last[0]) == (50, (0, 2.0), 49) and loss.last[1] == pytest.approx(2 / 50)
    assert loss.source == "TensorBoard tag train/loss" and loss.from_ == "loss" and "tfevents" in loss.file
    csv_loss = series["train_loss"]
    assert (csv_loss.points, csv_loss.first, csv_loss.last) == (2, (9, 0.5), (19, 0.25))
    assert csv_loss.source == "CSV log column train_loss"
    assert csv_loss.file == str(tensorboard_folder / "version_0" / "metrics.csv")
    assert series["eval_accuracy"].points == 5 and series["val_loss"].points == 2
    reading = {Path(f["path"]).name[:6]: f["reading"] for f in result.files}
    assert reading == {"hparam": False, "events": True, "metric": True}
    (skipped,) = result.skipped
    assert skipped.startswith(f"{tensorboard_folder / 'hparams.csv'}: not read (its header (name, value) ")


def test_one_event_file_or_one_csv_log_is_read_by_its_reader(tensorboard_folder):
    event_file = next((tensorboard_folder / "version_0").glob("events.out.tfevents.*"))
    result = parse_log(event_file)
    assert result.kind == "tensorboard" and result.loss_from == "loss"
    assert by_name(result)["loss"].points == 50 and by_name(result)["loss"].source == "TensorBoard tag train/loss"
    csv_log = parse_log(tensorboard_folder / "version_0" / "metrics.csv", loss_series="val_loss")
    assert csv_log.kind == "csv" and csv_log.loss_from == "val_loss" and by_name(csv_log)["loss"].last == (19, 0.6)


def test_a_damaged_event_file_is_read_up_to_the_damage_and_said(tensorboard_folder, tmp_path):
    event_file = next((tensorboard_folder / "version_0").glob("events.out.tfevents.*"))
    data = event_file.read_bytes()
    cut = tmp_path / event_file.name
    cut.write_bytes(data[:-7])  # the last record cut short, as a crash leaves it
    result = parse_log(tmp_path)
    series = by_name(result)  # the last record written was eval/accuracy at step 49
    assert series["loss"].points == 50 and series["eval_accuracy"].points == 4 and series["eval_accuracy"].last[0] == 39
    assert [s for s in result.skipped if str(cut) in s], result.skipped


def test_a_folder_without_logs_says_so(tmp_path):
    (tmp_path / "notes.txt").write_text("step 1 loss 0.5\n")
    result = parse_log(tmp_path)
    assert result.series == [] and result.no_metrics["message"] == (
        f"no metric found under {tmp_path}: it holds no log file; no TensorBoard event file "
        f"(events.out.tfevents.*) and no CSV file under {tmp_path}")


def test_an_empty_file_and_a_binary_file_give_nothing_and_say_why(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    result = parse_log(empty)
    assert result.series == [] and result.no_metrics["message"] == "no metric found in empty.log; the file is empty"
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4096 + b"\0\0\x01\x02")
    result = parse_log(binary)
    assert result.series == []
    assert result.no_metrics["message"].startswith("no metric found in model.bin (")
    assert result.no_metrics["message"].endswith("model.bin holds binary data (NUL bytes): it is not a text log")


def test_a_10_mib_line_without_a_newline_is_skipped_and_costs_little_memory(tmp_path):
    log = tmp_path / "train.log"
    with log.open("wb") as fh:
        fh.write(b"step 1 loss 0.9\n")
        fh.write(b"x" * (10 << 20) + b"\n")  # a 10 MiB line in the middle
        fh.write(b"step 2 loss 0.8\nstep 3 loss 0.7\n")
        fh.write(b"7" * (10 << 20))  # and one at the end, without a newline
    tracemalloc.start()
    try:
        result = parse_log(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    loss = by_name(result)["loss"]
    assert (loss.points, loss.first, loss.last) == (3, (1, 0.9), (3, 0.7))  # nothing after the long line lost
    assert result.skipped == ["2 lines longer than 64 KiB (no metric line is that long)"]
    assert peak < 8 << 20, f"reading a 20 MiB log peaked at {peak / 2**20:.1f} MiB"


def test_a_path_that_cannot_be_read_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        parse_log(tmp_path / "missing.log")
