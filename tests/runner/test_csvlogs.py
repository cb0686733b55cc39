"""CsvLogTail on Lightning's real CSVLogger files (its whole-file rewrite when a column appears included) and
on hand-written CSV logs: a header that changes midway, rows of the wrong width, bad cells, long lines."""
import warnings

import pytest
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from remote_runner.scriptread.csvlogs import MAX_LINE, CsvLogTail


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's "directory exists and is not empty"
        yield


def test_lightning_csvlogger(tmp_path):
    logger = CSVLogger(str(tmp_path), name="exp", version=0)
    for step in range(4):
        logger.log_metrics({"train_loss": 1.0 / (step + 1), "epoch": 0}, step=step)
    logger.save()
    tail = CsvLogTail(logger.experiment.metrics_file_path)
    assert tail.read() == [(step, {"epoch": 0.0, "train_loss": 1.0 / (step + 1)}) for step in range(4)]
    logger.log_metrics({"train_loss": 0.125, "epoch": 1}, step=4)
    logger.save()
    assert tail.read() == [(4, {"epoch": 1.0, "train_loss": 0.125})]
    assert tail.read() == [] and (tail.corrupt, tail.rewrites, tail.not_a_log) == (0, 0, "")


def test_lightning_rewrites_the_file_when_a_column_appears(tmp_path):
    writer = ExperimentWriter(str(tmp_path))
    tail = CsvLogTail(writer.metrics_file_path)
    assert tail.read() == []
    for step in range(3):
        writer.log_metrics({"train_loss": 1.0 / (step + 1), "epoch": 0}, step=step)
    writer.save()
    first = tail.read()
    writer.log_metrics({"val_loss": 0.7, "epoch": 0}, step=2)  # a new column: the whole file is written again
    writer.log_metrics({"train_loss": 0.2, "epoch": 1}, step=3)
    writer.save()
    header = open(writer.metrics_file_path).readline().strip()
    assert header == "epoch,step,train_loss,val_loss"
    second = tail.read()
    writer.log_metrics({"train_loss": 0.1, "epoch": 1}, step=4)
    writer.save()
    third = tail.read()
    assert first == [(0, {"epoch": 0.0, "train_loss": 1.0}), (1, {"epoch": 0.0, "train_loss": 0.5}),
                     (2, {"epoch": 0.0, "train_loss": 1.0 / 3})]
    assert second == [(2, {"epoch": 0.0, "val_loss": 0.7}), (3, {"epoch": 1.0, "train_loss": 0.2})]
    assert third == [(4, {"epoch": 1.0, "train_loss": 0.1})]
    assert tail.rewrites == 1 and tail.corrupt == 0


def test_a_rewrite_seen_half_done_gives_each_row_once(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,1.0\n1,0.5\n2,0.25\n")
    tail = CsvLogTail(str(path))
    assert [s for s, _ in tail.read()] == [0, 1, 2]
    with path.open("w") as fh:  # the rewrite, caught after its header and one row
        fh.write("acc,step,loss\n,0,1.0\n")
    assert tail.read() == []
    with path.open("a") as fh:
        fh.write(",1,0.5\n,2,0.25\n0.9,3,0.125\n")
    assert tail.read() == [(3, {"acc": 0.9, "loss": 0.125})]
    assert tail.rewrites == 1


def test_a_file_replaced_by_another(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("iter,loss\n10,2.0\n20,1.0\n")
    tail = CsvLogTail(str(path))
    assert tail.read() == [(10, {"loss": 2.0}), (20, {"loss": 1.0})]
    replacement = tmp_path / "log.csv.tmp"
    replacement.write_text("iter,loss,lr\n10,2.0,0.1\n20,1.0,0.1\n30,0.5,0.05\n")
    replacement.replace(path)  # pandas' to_csv through a temporary file: another inode
    assert tail.read() == [(30, {"loss": 0.5, "lr": 0.05})]


def test_a_header_that_changes_midway(tmp_path):
    path = tmp_path / "train_log.csv"
    path.write_text("global_step,loss\n1,0.5\n2,0.4\nglobal_step,loss,acc\n3,0.3,0.9\n4,0.2,0.95\n")
    tail = CsvLogTail(str(path))
    assert tail.read() == [(1, {"loss": 0.5}), (2, {"loss": 0.4}), (3, {"loss": 0.3, "acc": 0.9}),
                           (4, {"loss": 0.2, "acc": 0.95})]
    assert tail.corrupt == 0 and tail.rewrites == 0


def test_bad_rows_and_cells_are_counted_and_skipped(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"step,loss,lr\n"
                     b"1,0.5,0.1\n"
                     b"2,0.4\n"                      # too few cells
                     b"3,0.3,0.1,9\n"                # too many
                     b"4,abc,0.1\n"                  # a cell that is no number: the rest of the row is kept
                     b"\x00\xff\xfe garbage \x01\n"  # a binary line (no header of a metrics log)
                     b"5.5,0.2,0.1\n"                # a step that is not whole: the row is kept without it
                     b"\n"                           # a blank line: nothing
                     b"6,nan,0.1\n"                  # a diverged loss is a value
                     b"7,0.1,0.1\n")
    tail = CsvLogTail(str(path))
    rows = tail.read()
    nan_row = rows.pop(3)
    assert rows == [(1, {"loss": 0.5, "lr": 0.1}), (4, {"lr": 0.1}), (None, {"loss": 0.2, "lr": 0.1}),
                    (7, {"loss": 0.1, "lr": 0.1})]
    assert nan_row[0] == 6 and nan_row[1]["loss"] != nan_row[1]["loss"] and nan_row[1]["lr"] == 0.1
    assert tail.corrupt == 5


def test_a_line_longer_than_max_line_is_skipped_without_holding_it(tmp_path):
    path = tmp_path / "log.csv"
    with path.open("wb") as fh:
        fh.write(b"step,loss\n1,0.5\n")
        fh.write(b"9" * (2 * MAX_LINE + 10))
    tail = CsvLogTail(str(path))
    assert tail.read() == [(1, {"loss": 0.5})]
    with path.open("ab") as fh:
        fh.write(b"\n2,0.25\n")
    assert tail.read() == [(2, {"loss": 0.25})]
    assert tail.corrupt == 1


def test_a_partial_row_is_waited_for(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"epoch,val_loss\n0,0.")
    tail = CsvLogTail(str(path))
    assert tail.read() == []
    with path.open("ab") as fh:
        fh.write(b"75\r\n1,0.5\r\n")  # Windows line ends
    assert tail.read() == [(0, {"val_loss": 0.75}), (1, {"val_loss": 0.5})]


def test_a_csv_that_is_no_metrics_log(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("name,age\nann,31\nbob,42\n")
    tail = CsvLogTail(str(path))
    assert tail.read() == []
    assert "no step column" in tail.not_a_log and "name, age" in tail.not_a_log


def test_a_loss_column_without_a_step(tmp_path):
    path = tmp_path / "losses.csv"
    path.write_text("\ufefftrain_loss,val_loss\n0.9,\n0.8,0.85\n")  # with a BOM, as Excel writes
    assert CsvLogTail(str(path)).read() == [(None, {"train_loss": 0.9}), (None, {"train_loss": 0.8, "val_loss": 0.85})]


def test_a_last_row_without_its_newline_is_read_at_the_end(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n1,0.5\n2,0.4")
    tail = CsvLogTail(str(path))
    assert tail.read() == [(1, {"loss": 0.5})]  # the run goes on: "2,0.4" may be a row being written
    assert tail.finish() == [(2, {"loss": 0.4})]
    assert tail.finish() == [] and tail.rows == 2
