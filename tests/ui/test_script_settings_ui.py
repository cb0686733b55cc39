"""The launch form, the mapping dialog, the sweep dialog and the run header for a user's own script's settings
(issue 22), on the real window: nothing is passed until the user picks a value; a picked value shows what the
script will get; what the script cannot take is greyed with the reason; mapping a setting in the form writes the
folder's ddpgui.toml; the sweep dialog takes arguments and environment variables as axes; a script that reports
other settings than it was given is a warning in the run header."""
import html
import re
import tomllib

import pytest
from helpers.script_folders import FRAMEWORKS, GPTLIKE, script_folder
from helpers.stored_runs import store_run
from PySide6.QtCore import Qt
from script_runs import host_run

from ddpgui.core.runs.config import make_config
from ddpgui.core.store import RunStore
from ddpgui.ui.dialogs.script_mapping import MappingDialog
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.launch_panel import SCRIPT
from ddpgui.ui.widgets.script_settings import SCRIPT_OWN
from ddpgui.ui.workers import WorkerPool

PLAIN = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--dtype')\nprint('step 1: loss 0.5')\n"


def _script_form(window, folder):
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(folder))
    panel.nproc.setValue(1)
    return panel


def _items(box):
    return {box.itemText(i): box.model().item(i) for i in range(box.count())}


def test_a_script_is_given_nothing_until_a_value_is_picked_and_the_form_shows_what_it_gets(window, tmp_path):
    panel = _script_form(window, script_folder(tmp_path, FRAMEWORKS / "hf_args"))
    words = panel.script_settings.words
    assert panel.compile.currentText() == SCRIPT_OWN and panel.precision.currentText() == SCRIPT_OWN
    assert panel.batch.text() == SCRIPT_OWN and panel.global_batch.text() == ""
    settings = panel.settings()
    assert (settings["compile"], settings["precision"], settings["batch_size"]) == (None, None, None)
    assert words.isVisible() and words.text() == ("Transformers, HfArgumentParser: every compile, precision and "
                                                  "batch value can be passed to it")
    assert make_config(settings).script.passed_args == []  # the script runs as written
    panel.precision.setCurrentText("bf16")
    panel.batch.setValue(4)
    assert panel.launch_button.isEnabled(), panel.error.text()
    assert words.text() == ("Passed to the script (Transformers, HfArgumentParser):\n  precision bf16 → --bf16 True\n"
                            "  batch 4 → --per_device_train_batch_size 4")
    assert _items(panel.precision)["bf16"].toolTip() == "passed as --bf16 True"
    cfg = make_config(panel.settings())
    assert cfg.script.applied == ["precision", "batch_size"]
    assert cfg.script.passed_args == ["--bf16", "True", "--per_device_train_batch_size", "4"]

    panel.apply_settings(cfg.to_dict())  # a duplicate: what it gave, and nothing for the rest
    assert (panel.precision.currentText(), panel.batch.value(), panel.compile.currentText()) == ("bf16", 4, SCRIPT_OWN)
    old = cfg.to_dict()
    del old["script"]["applied"]  # a run stored before settings reached scripts gave it none
    panel.apply_settings(dict(old, run_id=""))
    assert (panel.precision.currentText(), panel.batch.text()) == (SCRIPT_OWN, SCRIPT_OWN)

    panel.workload.setCurrentText("mlp")  # a built-in workload: the script's choice goes
    assert SCRIPT_OWN not in _items(panel.compile) and SCRIPT_OWN not in _items(panel.precision)
    assert panel.precision.currentText() == "fp32" and panel.batch.value() == 32 and not words.isVisible()
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(script_folder(tmp_path, FRAMEWORKS / "accelerate_state", "acc")))
    assert words.text() == ("Accelerate: it can be given compile off, default, reduce-overhead, max-autotune; "
                            "precision fp32, fp16, bf16 (a greyed value says why not)")
    assert all(item.isEnabled() for item in _items(panel.compile).values())


def test_a_plain_scripts_values_are_greyed_with_the_reason_until_mapped_in_the_form(window, qtbot, tmp_path):
    plain = script_folder(tmp_path, PLAIN)
    panel = _script_form(window, plain)
    precision = _items(panel.precision)
    assert precision[SCRIPT_OWN].isEnabled() and not precision["bf16"].isEnabled()
    assert "ddpgui does not recognise the script's framework" in precision["bf16"].toolTip()
    assert "map it once in the launch form or in ddpgui.toml" in precision["bf16"].toolTip()
    assert panel.batch.maximum() == 0 and "does not recognise" in panel.batch.toolTip()
    assert panel.script_settings.words.text().startswith("ddpgui does not recognise the script's framework")
    assert panel.launch_button.isEnabled(), panel.error.text()

    qtbot.mouseClick(panel.script_settings.map_button, Qt.MouseButton.LeftButton)
    dialog = panel.mapping_dialog
    assert isinstance(dialog, MappingDialog) and dialog.isVisible()
    assert (dialog.setting.currentText(), dialog.value.currentText()) == ("compile", "off")  # the first unmapped
    dialog.setting.setCurrentText("precision")
    dialog.value.setCurrentText("bf16")
    dialog.env.setText("1BAD=x")
    assert not dialog.save_button.isEnabled() and "1BAD" in dialog.error.text() and dialog.error.isVisible()
    dialog.env.setText("")
    dialog.args.setText("--dtype=bfloat16 --note='a b; rm -rf ~' $HOME")  # data for the script, never a shell's
    assert dialog.save_button.isEnabled()
    dialog.save_button.click()
    assert not dialog.isVisible()
    written = tomllib.loads((plain / "ddpgui.toml").read_text())
    assert written == {"settings": {"precision": {"bf16": "--dtype=bfloat16 '--note=a b; rm -rf ~' $HOME"}}}
    assert _items(panel.precision)["bf16"].isEnabled() and not _items(panel.precision)["fp16"].isEnabled()
    panel.precision.setCurrentText("bf16")
    assert panel.launch_button.isEnabled(), panel.error.text()
    assert panel.script_settings.words.text() == ("Passed to the script (a script ddpgui does not recognise, with the "
                                                  "folder's ddpgui.toml):\n  precision bf16 → --dtype=bfloat16 "
                                                  "'--note=a b; rm -rf ~' $HOME")
    assert make_config(panel.settings()).script.passed_args == ["--dtype=bfloat16", "--note=a b; rm -rf ~", "$HOME"]

    again = panel._map_setting("precision", "bf16")  # the mapping's words come back to edit
    assert again.args.text() == "--dtype=bfloat16 '--note=a b; rm -rf ~' $HOME"
    again.setting.setCurrentText("batch_size")
    assert again.value.currentText() == "any" and again.args.placeholderText() == "e.g. --batch_size={}"
    again.args.setText("--batch_size={}")
    again.save_button.click()
    panel.batch.setValue(8)
    assert "  batch 8 → --batch_size=8" in panel.script_settings.words.text()
    assert read_back(plain)["settings"]["batch_size"] == {"any": "--batch_size={}"}
    assert read_back(plain)["settings"]["precision"]["bf16"].startswith("--dtype=bfloat16")  # kept


def read_back(folder):
    return tomllib.loads((folder / "ddpgui.toml").read_text())


def test_a_mapping_file_that_does_not_parse_is_named_and_stops_only_a_launch_that_needs_it(window, tmp_path):
    hf = script_folder(tmp_path, FRAMEWORKS / "hf_args")
    (hf / "ddpgui.toml").write_text("[settings.precision]\nbf16 = \n")
    panel = _script_form(window, hf)
    words = panel.script_settings.words.text()
    assert str(hf / "ddpgui.toml") in words and "line 2" in words, words
    assert panel.launch_button.isEnabled(), panel.error.text()  # nothing is given: nothing needs the file
    assert not panel.script_settings.map_button.isEnabled()
    panel.precision.setCurrentText("bf16")  # an item greyed for the same reason; a duplicate may still ask it
    assert not panel.launch_button.isEnabled() and "line 2" in panel.error.text()
    dialog = MappingDialog(hf, "precision", "bf16", panel)  # the file the user is writing is never overwritten
    assert not dialog.save_button.isEnabled() and "fix it by hand first" in dialog.error.text()
    dialog.deleteLater()


def _check_only(widget, values):
    for i in range(widget.count()):
        item = widget.item(i)
        item.setCheckState(Qt.CheckState.Checked if item.text() in values else Qt.CheckState.Unchecked)


def test_the_sweep_dialog_takes_a_scripts_arguments_and_environment_as_axes(window, qtbot, tmp_path):
    panel = _script_form(window, script_folder(tmp_path, FRAMEWORKS / "hf_args"))
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    assert dialog.args.isVisible() and dialog.env.isVisible()
    dialog.args.setText("--learning_rate=1e-4,3e-4 --seed=3")
    dialog.env.setText("OMP_NUM_THREADS=1,4")
    _check_only(dialog.checks["precision"], ("fp32", "bf16"))
    assert dialog.start_button.isEnabled(), dialog.error.text()
    assert dialog.cells == 8
    spec = dialog.spec()
    assert spec.matrix == {"precision": ["fp32", "bf16"], "arg:--learning_rate": ["1e-4", "3e-4"],
                           "env:OMP_NUM_THREADS": ["1", "4"]}
    assert spec.base["script"]["options"] == {"--seed": "3"}
    dialog.args.setText("--learning_rate")
    assert not dialog.start_button.isEnabled() and "expected --NAME=VALUE" in dialog.error.text()
    dialog.args.setText("--lr='1e-4")
    assert not dialog.start_button.isEnabled() and "cannot be split" in dialog.error.text()
    dialog.args.setText("")
    dialog.env.setText("OMP NUM")
    assert not dialog.start_button.isEnabled() and "NAME=VALUES" in dialog.error.text()
    dialog.reject()

    plain = script_folder(tmp_path, PLAIN, "plain")  # a cell the script cannot be given refuses the sweep, naming it
    panel.script_dir.setText(str(plain))
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    _check_only(dialog.checks["precision"], ("fp32", "bf16"))
    assert not dialog.start_button.isEnabled()
    assert "precision = fp32 is refused: precision fp32 cannot be given to this script" in dialog.error.text()
    dialog.reject()

    panel.workload.setCurrentText("mlp")  # a built-in workload has no script arguments
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    assert not dialog.args.isVisible() and dialog.env.isVisible()
    dialog.reject()


@pytest.fixture
def board(qtbot, tmp_path):
    pool = WorkerPool(2)
    with RunStore(tmp_path / "runs.db") as store:
        widget = Dashboard(store, loader=pool.start)
        qtbot.addWidget(widget)
        widget.resize(1000, 700)
        widget.show()
        yield widget
    assert pool.shutdown(5000)


def test_the_run_header_warns_when_the_script_reports_other_settings_than_it_was_given(qtbot, board, tmp_path):
    gpt = script_folder(tmp_path, GPTLIKE)
    (gpt / "ddpgui.toml").write_text('[settings.precision]\nbf16 = "--dtype=bfloat16"\n')
    config = make_config({"mode": "script", "nproc_per_node": 2, "precision": "bf16",
                          "script": {"dir": str(gpt), "entry": "train.py"}}).to_dict()
    # nanoGPT's configurator says what it took; this script's --dtype was overridden back by a later config
    printed = {"stdout": b"Overriding: dtype = bfloat16\nOverriding: dtype = float32\nstep 1: loss 2.0\n",
               "stderr": b""}
    metrics, events = host_run("", streams=("stdout", "stderr"), data=printed)
    assert [e["value"] for e in events if e["event"] == "script_reports"] == ["bf16", "fp32"]
    store_run(board.store, "r1", config, metrics, events=events + [{"event": "finished", "t": 2e9}], state="finished")
    board.set_run("r1")
    warning = board.series.warning
    qtbot.waitUntil(warning.isVisible, timeout=10_000)
    assert warning.text() == ("Warning: asked precision bf16, the script reports fp32 (\u201cOverriding: dtype = "
                              "float32\u201d)")
    tip = board.title.toolTip()
    rows = [html.unescape(re.sub(r"<[^>]+>", " ", r)).split(None, 1) for r in re.findall(r"<tr>(.*?)</tr>", tip)]
    assert [(label, " ".join(text.split())) for label, text in rows][1:] == [
        ("passed", "precision bf16 → --dtype=bfloat16 (your mapping)"), ("reported", "precision fp32"),
        ("warning", "asked precision bf16, the script reports fp32 (\u201cOverriding: dtype = float32\u201d)")]

    config_ok = dict(config, run_id="r2")
    store_run(board.store, "r2", config_ok, metrics, events=[e for e in events if e.get("value") != "fp32"],
              state="finished")
    board.set_run("r2")
    qtbot.waitUntil(lambda: board.series.facts is not None and board.series.facts.run_id == "r2", timeout=10_000)
    assert not warning.isVisible()
