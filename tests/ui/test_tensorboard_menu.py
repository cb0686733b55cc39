"""File ▸ Export selected runs to TensorBoard… and Import TensorBoard folder… in the real main window, on its
workers: the export read back with TensorBoard's own reader, the import of folders written by PyTorch's
SummaryWriter shown in the runs table, with what it skipped and why."""
import numpy as np
from helpers.stored_runs import store_run
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMessageBox
from script_runs import store_capture_run
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util

from ddpgui.core.runs.tbimport import IMPORTED_HOST
from ddpgui.ui.tensorboard_io import export_to_tensorboard, import_tensorboard_folder

WAIT = 30_000


def _status(window):
    return window.statusBar().currentMessage()


def _read_back(folder):
    acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if not tag.startswith("_hparams_")}


def test_the_file_menu_offers_both(window):
    for name, text in (("menu_export_tensorboard", "Export selected runs to TensorBoard…"),
                       ("menu_import_tensorboard", "Import TensorBoard folder…")):
        action = window.findChild(QAction, name)
        assert action is not None and action.text() == text


def test_export_of_the_selected_runs(window, qtbot, tmp_path):
    metrics = store_capture_run(window.store, "light", "lightning_tqdm")
    store_run(window.store, "other", {"workload": "mlp"}, [{"step": 1, "loss": 2.0, "t": 5.0}])
    export_to_tensorboard(window, str(tmp_path / "tb"))  # nothing selected: nothing written
    assert _status(window) == "Select the runs to export in the Runs tab first" and not (tmp_path / "tb").exists()
    window.runs_table.model.reload()
    window.runs_table.select_runs(["light"])
    export_to_tensorboard(window, str(tmp_path / "tb"))
    qtbot.waitUntil(lambda: _status(window).startswith("Exported"), timeout=WAIT)
    (folder,) = (tmp_path / "tb").iterdir()
    back = _read_back(folder)
    points = sum(len(v) for v in back.values())
    assert _status(window) == (f"Exported 1 run ({points} points) to {tmp_path / 'tb'}: open it with tensorboard "
                               f"--logdir {tmp_path / 'tb'}")
    assert back["loss"] == [(r["step"], r["loss"]) for r in metrics if "loss" in r]
    assert back["val_loss"] == [(r["step"], r["val_loss"]) for r in metrics if "val_loss" in r]


def _summary_writer_runs(log_dir):
    from torch.utils.tensorboard import SummaryWriter

    for name, scale in (("lr=0.1,bs=32", 1.0), ("lr=0.01,bs=32", 2.0)):
        writer = SummaryWriter(str(log_dir / name))
        for step in range(8):
            writer.add_scalar("train/loss", scale / (step + 1), step)
            writer.add_scalar("learning_rate", 0.1, step)
        writer.close()
    writer = SummaryWriter(str(log_dir / "histograms only"))
    writer.add_histogram("weights", np.arange(5.0), 0)
    writer.close()


def test_import_shows_the_runs_and_says_what_it_skipped(window, qtbot, tmp_path):
    _summary_writer_runs(tmp_path / "logs")
    import_tensorboard_folder(window, str(tmp_path / "logs"))
    qtbot.waitUntil(lambda: _status(window).startswith("Imported"), timeout=WAIT)
    model = window.runs_table.model
    imported = [r for r in model.runs if r.host == IMPORTED_HOST]
    assert sorted(r.name for r in imported) == ["lr=0.01,bs=32", "lr=0.1,bs=32"]
    assert all(r.state == "finished" for r in imported)
    assert sorted(window.runs_table.selected_ids()) == sorted(r.id for r in imported)
    assert window.tabs.currentWidget() is window.runs_table.parentWidget()
    assert _status(window) == f"Imported 2 runs (32 points) from {tmp_path / 'logs'} (1 note)"
    box = window.findChild(QMessageBox, "tensorboard_import_box")
    assert box.isVisible() and box.text() == f"Imported 2 runs (32 points) from {tmp_path / 'logs'}"
    assert box.informativeText() == f"skipped {tmp_path / 'logs' / 'histograms only'}: its event files hold no " \
                                    "scalar values"
    box.close()
    loss = window.store.series(imported[0].id, keys=["step", "loss"])
    assert np.isfinite(loss["loss"]).sum() == 8

    import_tensorboard_folder(window, str(tmp_path / "logs"))  # again: nothing new
    qtbot.waitUntil(lambda: _status(window).startswith("No new run"), timeout=WAIT)
    assert _status(window) == f"No new run in {tmp_path / 'logs'}; 2 runs imported before (1 note)"
    assert len([r for r in model.runs if r.host == IMPORTED_HOST]) == 2


def test_a_folder_without_event_files_is_refused_with_a_hint(window, qtbot, tmp_path):
    (tmp_path / "empty").mkdir()
    import_tensorboard_folder(window, str(tmp_path / "empty"))
    qtbot.waitUntil(lambda: _status(window).startswith("Import failed"), timeout=WAIT)
    box = window.findChild(QMessageBox, "tensorboard_import_box")
    assert box.icon() == QMessageBox.Icon.Warning
    assert box.text() == (f"Could not import {tmp_path / 'empty'}: no TensorBoard event files "
                          f"(events.out.tfevents.*) under {tmp_path / 'empty'}")
    assert box.informativeText().startswith("Hint: give the folder TensorBoard's --logdir names")


def test_an_imported_runs_series_are_named_on_the_dashboard(window, qtbot, tmp_path):
    _summary_writer_runs(tmp_path / "logs")
    import_tensorboard_folder(window, str(tmp_path / "logs"))
    qtbot.waitUntil(lambda: _status(window).startswith("Imported"), timeout=WAIT)
    board = window.dashboard
    qtbot.waitUntil(lambda: board.series.facts is not None and board.series.facts.run_id == board.run_id,
                    timeout=WAIT)
    assert board.series.facts.named and board.series.button.isVisibleTo(board)  # (the Runs tab is shown)
    assert "TensorBoard tag train/loss" in board.title.toolTip()
