"""A window that fits a laptop (issue 24, item 4): minimum width, the side panel that hides, the Compare tab's plots
readable at 1024 × 700 and 1920 × 1080, its table in words with the empty metrics hidden, the export dialog's
options in the written files."""
import csv
import struct

import numpy as np
import pytest
from helpers.recorded_runs import put_recorded
from helpers.stored_runs import store_run
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QDialogButtonBox

from ddpgui.core.analysis.metric_names import metric_words
from ddpgui.core.analysis.run_stats import RUN_METRICS
from ddpgui.core.hosts import HostStore
from ddpgui.core.outputs.figures import X_LABELS
from ddpgui.core.store import RunStore
from ddpgui.ui.plots.bars import BarPlot
from ddpgui.ui.widgets.compare_plots import MIN_PLOT_HEIGHT, TABS, THREE_COLUMNS
from ddpgui.ui.widgets.compare_rows import RATIOS

POINTS = 60
ENVIRONMENT = {"cpu": "Test CPU", "cpu_count": 2, "torch": "9.9.9+layout"}
#: A probe report as remote_runner.probe writes it: a host with 4 GPUs (the launch form shows its GPU rows).
GPU_PROBE = {"schema": 1, "hostname": "gpu-box", "cpu_count": 48, "best_device": "cuda",
             "driver_version": "535.104.05", "driver_cuda_version": "12.2",
             "torch": {"version": "2.4.0+cu121", "cuda_build": "12.1", "cuda_available": True},
             "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_total_gib": 79.2,
                       "compute_capability": "8.0", "bf16": True} for i in range(4)], "problems": []}


def _metrics(rate: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    loss = 2.0 * np.exp(-np.arange(POINTS) / 20) + 0.3 + 0.01 * rng.standard_normal(POINTS)
    return [{"t": 1000.0 + 0.5 * i, "phase": "train", "step": i + 1, "loss": float(loss[i]),
             "samples_per_s": rate * (1 + 0.01 * float(rng.standard_normal())), "mem_peak_gib": 1.0 + 0.01 * seed,
             "warmup": i < 3} for i in range(POINTS)]


def _put_runs(store) -> list[str]:
    """Three repeats of fp32 and of bf16 on a CPU host: no GPU, energy, compile or price."""
    ids = []
    for seed, (precision, rate) in enumerate([("fp32", 100.0)] * 3 + [("bf16", 150.0)] * 3):
        run_id = f"{precision}-{seed}"
        config = {"workload": "mlp", "compile": "off", "precision": precision, "nproc_per_node": 1,
                  "steps": POINTS, "seed": seed}
        events = [{"event": "started", "t": 999.0}, {"event": "train_start", "t": 1000.0},
                  {"event": "finished", "t": 1000.0 + 0.5 * POINTS}]
        store_run(store, run_id, config, _metrics(rate, seed), events=events, environment=ENVIRONMENT)
        ids.append(run_id)
    return ids


def _computed(view, qtbot):
    qtbot.waitUntil(lambda: view.comparison is not None and not view.busy, timeout=60_000)


# ---- the window --------------------------------------------------------------------------------------------


def test_the_window_fits_a_laptop_screen_and_the_launch_form_is_never_cut(window, qtbot):
    assert window.minimumSizeHint().width() <= 1000
    window.set_probe("local", GPU_PROBE)  # a GPU host's form, Advanced open, a script's rows: still narrow
    panel = window.launch_panel
    panel.advanced.setChecked(True)
    panel.workload.setCurrentText("my own script")
    qtbot.wait(50)
    assert window.minimumSizeHint().width() <= 1000
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.width() == 1024)
    assert panel.width() >= panel.minimumSizeHint().width()  # the form in its scroll area: nothing cut at the right
    for button in window.hosts_panel.buttons.values():
        assert button.width() >= button.minimumSizeHint().width(), button.text()


def test_the_side_panel_hides_gives_its_width_and_is_remembered(window, qtbot, tmp_path):
    from ddpgui.ui.main_window import MainWindow

    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.width() == 1024)
    toggle, narrow = window.side_toggle, window.tabs.width()
    assert toggle.isChecked() and toggle.shortcut().toString() == "Ctrl+B"
    assert toggle in window.menuBar().actions()[1].menu().actions()  # View ▸ Hosts and launch panel
    with_panel = window.minimumSizeHint().width()
    window.tabs.cornerWidget(Qt.Corner.TopLeftCorner).click()  # the arrow at the tabs' corner
    assert not window.side_panel.isVisible() and not toggle.isChecked()
    qtbot.waitUntil(lambda: window.tabs.width() > narrow + 300)
    assert window.minimumSizeHint().width() < with_panel - 300  # its minimum width is given up too
    assert window.settings.value("window/side_panel") == "false"
    toggle.trigger()
    assert window.side_panel.isVisible()
    qtbot.waitUntil(lambda: window.tabs.width() < narrow + 100)
    assert window.side_panel.width() >= window.side_panel.minimumSizeHint().width()
    window.splitter.moveSplitter(0, 1)  # the handle dragged to the window's edge hides it the same way
    assert not window.side_panel.isVisible() and not toggle.isChecked()
    window.close()
    again = MainWindow(store=RunStore(tmp_path / "again.db"), hosts=HostStore(tmp_path / "hosts.json"),
                       settings=window.settings)
    qtbot.addWidget(again)
    again.show()
    try:
        assert not again.side_panel.isVisible() and not again.side_toggle.isChecked()
        again.side_toggle.trigger()  # shown again at a usable width, not the 0 px it was dragged to
        qtbot.waitUntil(lambda: again.side_panel.width() >= again.side_panel.minimumSizeHint().width())
    finally:
        again.close()


def _readable(plot) -> None:
    """At least MIN_PLOT_HEIGHT tall, the whole title in at most two lines, bar labels that do not touch."""
    assert plot.height() >= MIN_PLOT_HEIGHT, (plot.objectName(), plot.height())
    assert plot.fitted.lines and len(plot.fitted.lines) <= 2 and not plot.fitted.lines[-1].endswith("…"), (
        plot.fitted.lines)
    assert " ".join(plot.fitted.lines) == " ".join(plot.fitted.text.split())
    if isinstance(plot, BarPlot):
        axis = plot.getPlotItem().getAxis("bottom")
        metrics = QFontMetrics(axis.style["tickFont"] or axis.font())
        widest = max(metrics.horizontalAdvance(line) for text in plot.tick_texts() for line in text.split("\n"))
        (x0, x1), _ = plot.getPlotItem().getViewBox().viewRange()
        per_bar = plot.getPlotItem().getViewBox().width() / (x1 - x0)  # pixels between two bars' centres
        assert widest < per_bar, (plot.objectName(), plot.tick_texts(), per_bar)  # no "n=3n=3n=3"


@pytest.mark.parametrize("size", [(1024, 700), (1920, 1080)])
def test_every_compare_plot_is_readable_at_laptop_and_full_hd_sizes(window, qtbot, size):
    ids = put_recorded(window.store, "sweep")  # 4 settings × 3 repeats, recorded on a CPU
    window.resize(*size)
    window.tabs.setCurrentWidget(window.compare)
    view = window.compare
    view.set_runs(ids)
    _computed(view, qtbot)
    qtbot.waitUntil(lambda: window.width() == size[0] and window.height() == size[1])
    area = view.plot_area
    qtbot.wait(50)
    assert area.arrangement == (TABS if size[0] == 1024 else THREE_COLUMNS)
    for plot in area.plots:
        if area.arrangement == TABS:
            area.tabs.setCurrentWidget(plot)
        qtbot.waitUntil(lambda p=plot: p.isVisible())
        qtbot.wait(20)
        _readable(plot)
    assert not view.table.horizontalHeader().isHidden() and view.table.height() > 60  # the numbers are in sight
    if size[0] == 1024:  # hidden side panel: wider plots, still readable
        window.side_toggle.trigger()
        qtbot.wait(50)
        for plot in area.visible_plots():
            _readable(plot)


def test_the_plots_go_to_tabs_when_the_grid_would_squeeze_them_and_back(view, store, qtbot):
    view.set_runs(_put_runs(store))
    _computed(view, qtbot)
    assert view.plot_area.arrangement == THREE_COLUMNS  # 1300 × 900: room for all five
    view.resize(700, 560)
    qtbot.waitUntil(lambda: view.plot_area.arrangement == TABS)
    assert [view.plot_area.tabs.tabText(i) for i in range(5)] == ["Loss", "Throughput", "Memory", "Speedup",
                                                                    "Scaling"]
    view.resize(1300, 900)
    qtbot.waitUntil(lambda: view.plot_area.arrangement == THREE_COLUMNS)
    assert all(plot.isVisible() and plot.parent() is view.plot_area.grid_page for plot in view.plot_area.plots)


# ---- the table ---------------------------------------------------------------------------------------------


def test_the_table_says_metrics_in_words_and_hides_those_without_data(view, store, settings, qtbot):
    view.set_runs(_put_runs(store))
    _computed(view, qtbot)
    model, numbers = view.table_model, view.numbers
    words = {model.item(r, 1).data(256): model.item(r, 1).text() for r in range(model.rowCount())}
    assert words["mem_peak_gib"] == "peak memory (GiB)"
    assert words["time_to_n_s"] == f"time to {POINTS} steps (s)"
    assert words["energy_per_1000_steps_j"] == "energy per 1000 steps (J)"
    assert words["throughput"] == "steady throughput (samples/s)" and words["final_loss"] == "final loss"
    assert all(text == metric_words(key, view.comparison) and "_" not in text for key, text in words.items())
    # a CPU host: no GPU utilisation, energy, compile time or price on any setting: those rows are hidden
    empty = {"compile_s", "gpu_util_pct", "energy_j", "energy_per_1000_steps_j", "cost", "cost_per_1000_steps"}
    assert set(numbers.empty) == empty
    assert numbers.shown_metrics() == [m for m in (*RUN_METRICS, *RATIOS) if m not in empty]
    hidden = [r for r in range(model.rowCount()) if view.table.isRowHidden(r)]
    assert len(hidden) == 2 * len(empty) and all(model.item(r, 1).data(256) in empty for r in hidden)
    assert "6 without data on any setting hidden" in numbers.hidden_note.text()
    assert view.table_value(view.comparison.groups[0].key, "gpu_util_pct") is None  # still in the model
    numbers.show_empty.setChecked(True)  # the toggle shows them, and is remembered
    assert numbers.shown_metrics() == [*RUN_METRICS, *RATIOS]
    assert not any(view.table.isRowHidden(r) for r in range(model.rowCount()))
    assert settings.value("compare/show_empty") == "true"
    numbers.show_empty.setChecked(False)
    assert len([r for r in range(model.rowCount()) if view.table.isRowHidden(r)]) == 2 * len(empty)


# ---- the export dialog -------------------------------------------------------------------------------------


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _drawn_text(svg_path) -> str:
    """An SVG's drawing, without its metadata (which names the environment whatever the caption)."""
    text = svg_path.read_text()
    head, _, rest = text.partition("<metadata>")
    return head + rest.partition("</metadata>")[2]


def _export(view, qtbot, folder, **choices):
    dialog = view.ask_export()
    qtbot.addWidget(dialog)
    dialog.folder.setText(str(folder))
    for fmt, box in dialog.formats.items():
        box.setChecked(fmt in choices["formats"])
    dialog.x_axis.setCurrentIndex(dialog.x_axis.findData(choices["x"]))
    dialog.dpi.setValue(choices["dpi"])
    dialog.caption.setChecked(choices["caption"])
    dialog.steps.setValue(choices.get("steps", 0))
    view.exported = None
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: view.exported is not None, timeout=120_000)
    return dialog


def test_the_export_dialog_passes_x_dpi_caption_and_steps_to_the_files(view, store, settings, qtbot, tmp_path):
    view.set_runs(_put_runs(store))
    _computed(view, qtbot)
    view.align_combo.setCurrentText("time")  # each choice differs from its default: it reached the files
    first = tmp_path / "first"
    dialog = _export(view, qtbot, first, formats=["png", "svg", "csv"], x="step", dpi=100, caption=False,
                     steps=30)
    assert dialog.steps.specialValueText() == f"as compared ({POINTS})"
    assert _png_size(first / "loss.png")[0] == 350  # single column: 3.5 in × 100 dpi
    drawn = _drawn_text(first / "loss.svg")
    assert X_LABELS["step"] in drawn and X_LABELS["time"] not in drawn  # the dialog's x, not the tab's
    assert "9.9.9+layout" not in drawn  # no caption
    with open(first / "summary.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["level"] == "group" and r["metric"] == "time_to_n_s"]
    shown = view.table_value(view.comparison.groups[0].key, "time_to_n_s")
    assert float(rows[0]["value"]) < 0.6 * shown  # time to 30 steps, where the tab shows time to 60

    assert settings.value("compare/export_dpi") in (100, "100")
    reopened = view.ask_export()  # remembered: DPI and caption; x follows the tab, N the comparison
    qtbot.addWidget(reopened)
    assert reopened.dpi.value() == 100 and not reopened.caption.isChecked()
    assert reopened.x_axis.currentData() == "time" and reopened.n_steps() is None
    reopened.reject()


def test_table_numbers_keep_four_digits_without_exponents_in_the_thousands():
    """A high bound of 11,230 samples/s beside a value of 8830 reads 11230, not 1.123e+04 (seen in a screenshot)."""
    from ddpgui.ui.widgets.compare_rows import _number

    assert [_number(v) for v in (8830.4, 11230.2, 0.31144, 2.5e9, 1.5e-5, None)] == \
        ["8830", "11230", "0.3114", "2.5e+09", "1.5e-05", ""]
