"""Try the reading before a launch: the launch form's Loss series (kept with the launch settings) and Try reading a
log…, which reads a real capture (tests/fixtures/scriptlogs) or a TensorBoard folder written by PyTorch's
SummaryWriter on a real worker and shows the series table, what was skipped, and for a log without a metric why
and what to try."""
import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QFileDialog, QScrollArea
from script_runs import CAPTURES

from ddpgui.core.runs.parselog import parse_log
from ddpgui.ui.dialogs.parse_log import COLUMNS, ParseLogDialog, for_the_form, point_text, try_reading
from ddpgui.ui.widgets.launch_panel import SCRIPT, LaunchPanel
from ddpgui.ui.workers import WorkerPool

WAIT = 20_000


@pytest.fixture
def pool():
    workers = WorkerPool(2)
    yield workers
    assert workers.shutdown(10_000)


def _read(qtbot, pool, path, regex="", loss=""):
    dialog = try_reading(None, pool.start, str(path), regex, loss)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.result is not None or dialog.problem.isVisible(), timeout=WAIT)
    return dialog


def _rows(dialog):
    table = dialog.table
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


def test_the_loss_series_is_in_the_scripts_advanced_settings_and_kept(qtbot):
    panel = LaunchPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.advanced.setChecked(True)
    reading = panel.reading
    assert not reading.loss_series.isVisible() and not reading.button.isVisible()  # a built-in workload
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(CAPTURES / "scripts"))
    assert reading.loss_series.isVisible() and reading.button.isVisible()
    assert "loss_series" not in panel.settings()["script"]  # empty: the first loss-like series
    reading.loss_series.setText(" val_loss ")
    settings = panel.settings()
    assert settings["script"]["loss_series"] == "val_loss" and panel.launch_button.isEnabled()
    saved = json.loads(json.dumps(settings))  # as the window keeps the launch settings
    again = LaunchPanel()
    qtbot.addWidget(again)
    again.apply_settings(saved)
    assert again.advanced.isChecked() and again.reading.loss_series.text() == "val_loss"
    assert again.settings()["script"] == settings["script"]


def test_a_trainer_log_shows_every_series_the_loss_marked_and_the_summary(qtbot, pool):
    path = CAPTURES / "trainer_gpt2.stdout"
    dialog = _read(qtbot, pool, path)
    expected = parse_log(path)
    assert [dialog.table.horizontalHeaderItem(c).text() for c in range(len(COLUMNS))] == list(COLUMNS)
    rows = _rows(dialog)
    assert [r[0] for r in rows] == [s.name for s in expected.series] and rows[0][0] == "loss"
    for row, info in zip(rows, expected.series):
        assert row[1:] == [str(info.points), point_text(info.first), point_text(info.last), info.source]
    assert rows[0][2] == "4.33 @1" and rows[0][4] == "printed lines (stdout)"
    assert dialog.table.item(0, 0).font().bold() and not dialog.table.item(1, 0).font().bold()
    assert "The loss: <b>loss</b> (the first loss-like series, as a run would take it)" in dialog.loss_line.text()
    assert "the script's summary: train_runtime 0.425" in dialog.notes.text()
    assert not dialog.problem.isVisible() and not dialog.progress.isVisible()
    assert dialog.heading.text() == f"printed output in {path}: 12 records, 8 series"


def test_the_forms_loss_series_and_regex_are_used(qtbot, pool, tmp_path):
    dialog = _read(qtbot, pool, CAPTURES / "lightning_tqdm.stdout", loss="val_loss")
    assert _rows(dialog)[0][0] == "loss (from val_loss)" and "(as you chose)" in dialog.loss_line.text()
    log = tmp_path / "custom.log"
    log.write_text("it=1 cost=0.9\nit=2 cost=0.7\nit=3 cost=0.4\n")
    plain = _read(qtbot, pool, log)
    assert [r[0] for r in _rows(plain)] == [i.name for i in parse_log(log).series]
    regex = _read(qtbot, pool, log, regex=r"it=(?P<step>\d+) cost=(?P<loss>[\d.]+)")
    assert _rows(regex)[0][:4] == ["loss", "3", "0.900 @1", "0.400 @3"]


def test_a_loss_series_the_log_lacks_leaves_no_loss(qtbot, pool):
    dialog = _read(qtbot, pool, CAPTURES / "tqdm_stderr.stderr", loss="val_loss")
    assert [r[0] for r in _rows(dialog)] == ["orig_loss", "lr"]  # the loss-like series read under its own name
    assert not any(dialog.table.item(r, 0).font().bold() for r in range(dialog.table.rowCount()))
    assert dialog.loss_line.text().startswith("No series is the loss: select one")
    assert "note: no series is named val_loss: a run would have no loss" in dialog.notes.text()


def test_a_log_without_a_metric_says_why_with_the_forms_words(qtbot, pool, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("loading the data\n" + "".join(f"batch {i} done\n" for i in range(30)))
    dialog = _read(qtbot, pool, log)
    report = parse_log(log).no_metrics
    assert not dialog.table.isVisible() and dialog.problem.isVisible()
    text = dialog.problem.text()
    assert report["message"].startswith("no metric found in train.log (31 lines")
    assert report["message"] in text and "--metric-regex" in report["hint"]
    assert "fill in Metric regex" in text and "--metric-regex" not in text
    lines = dialog.last_lines.toPlainText().splitlines()
    assert dialog.last_lines.isVisible() and lines[-1] == "batch 29 done" and len(lines) <= 10
    assert for_the_form("or give --metric-regex with named groups, e.g. --metric-regex 'x'") == \
        "or fill in Metric regex with named groups, e.g. 'x'"
    assert not dialog.use_button.isVisible()  # nothing to use


def test_an_invalid_regex_and_a_missing_file_are_said(qtbot, pool, tmp_path):
    dialog = _read(qtbot, pool, CAPTURES / "tqdm_stderr.stderr", regex="(")
    assert "Metric regex is not a valid regular expression" in dialog.problem.text() and dialog.result is None
    gone = _read(qtbot, pool, tmp_path / "nothing.log")
    assert f"cannot read {tmp_path / 'nothing.log'}" in gone.problem.text()


def _summary_writer_folder(log_dir):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir / "version_0"))
    for step in range(5):
        writer.add_scalar("train/loss", 2.0 / (step + 1), step)
        writer.add_scalar("learning_rate", 0.1, step)
    writer.close()
    (log_dir / "notes.csv").write_text("name,comment\na,b\n")  # a CSV that is no log
    return log_dir


def test_a_folder_of_tensorboard_logs(qtbot, pool, tmp_path):
    folder = _summary_writer_folder(tmp_path / "logs")
    dialog = _read(qtbot, pool, folder)
    rows = _rows(dialog)
    assert [r[0] for r in rows] == ["loss", "lr"]
    assert rows[0][1:4] == ["5", "2.00 @0", "0.400 @4"] and rows[0][4].startswith("TensorBoard tag train/loss in ")
    assert rows[1][4].startswith("TensorBoard tag learning_rate in ")
    assert "read " + str(next((folder / "version_0").iterdir())) in dialog.notes.text()
    assert "skipped: " in dialog.notes.text() and "notes.csv" in dialog.notes.text()


def test_closing_the_dialog_stops_the_reading(qtbot, pool, tmp_path):
    big = tmp_path / "big.log"
    big.write_bytes(b"".join(b"step %d loss %f\n" % (i, 1.0 / (i + 1)) for i in range(100_000)))  # 2.5 MB: 3 pieces
    dialog = try_reading(None, pool.start, str(big))
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.progress.maximum() > 0, timeout=WAIT)  # a piece was read
    dialog.reject()
    qtbot.waitUntil(lambda: pool.active == 0, timeout=WAIT)
    qtbot.wait(50)  # the worker's last signals
    assert dialog.result is None and not dialog.problem.isVisible() and dialog.progress.value() < big.stat().st_size


def test_the_form_reads_a_picked_log_and_takes_a_series_from_it(window, qtbot, monkeypatch):
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(CAPTURES / "scripts"))
    panel.advanced.setChecked(True)
    picked = str(CAPTURES / "lightning_tqdm.stdout")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (picked, ""))
    panel.reading.menu.findChild(type(panel.reading.menu.actions()[0]), "try_log_file").trigger()
    dialog = window.findChild(ParseLogDialog)
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=WAIT)
    assert dialog.isVisible() and dialog.path == picked
    row = next(r for r in range(dialog.table.rowCount()) if dialog.table.item(r, 0).text() == "val_loss")
    dialog.table.selectRow(row)
    assert dialog.use_button.isEnabled()
    dialog.use_button.click()
    assert panel.reading.loss_series.text() == "val_loss" and not dialog.isVisible()
    assert panel.settings()["script"]["loss_series"] == "val_loss"


def test_the_tables_first_columns_fit_their_text(qtbot, pool):
    dialog = _read(qtbot, pool, CAPTURES / "trainer_gpt2.stdout")
    dialog.resize(640, 400)
    qtbot.waitExposed(dialog)
    table = dialog.table
    for row in range(table.rowCount()):
        for column in range(len(COLUMNS) - 1):  # the source stretches over the rest (its full text as tooltip)
            item = table.item(row, column)
            need = QFontMetrics(item.font()).horizontalAdvance(item.text())
            assert need < table.columnWidth(column), (row, column, item.text())
    assert table.item(0, 0).data(Qt.ItemDataRole.UserRole) == "loss"


def test_a_scripts_advanced_settings_scroll_in_a_small_window(window, qtbot):
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.advanced.setChecked(True)
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.height() == 700, timeout=WAIT)  # the form does not make the window taller
    scroll = window.findChild(QScrollArea, "launch_scroll")
    assert scroll.widget() is panel and scroll.verticalScrollBar().maximum() > 0
    scroll.ensureWidgetVisible(panel.reading.button)
    qtbot.waitUntil(lambda: not panel.reading.button.visibleRegion().isEmpty(), timeout=WAIT)
