"""The hosts walk-through (issue 24 item 5): the host dialog's successful Test connection is kept on Save (the
hosts list shows the probe, the launch form is bounded by it), a Python without torch is said in the error colour
with what to change, an untested host's process count is shown as a guess, and This computer is never "local"
where a user reads it.  Tested on This computer (its real runner and probe, a Python with and one without torch)."""
import dataclasses
import shutil
import sys

import pytest
from PySide6.QtCore import Qt

from ddpgui.core.hosts import LOCAL, HostProfile
from ddpgui.core.runs.multinode import max_processes
from ddpgui.ui.dialogs.host_edit import HostEditDialog
from ddpgui.ui.widgets.process_guess import GUESS_STYLE

WAIT_MS = 180_000  # a probe imports torch: slow on a shared 2-core machine
ERROR_COLOUR = "#d93025"
#: A probe report as a 4-GPU host answers (what the launch form reads of it).
GPU_PROBE = {"hostname": "far", "cpu_count": 32, "best_device": "cuda", "driver_version": "550.54.15",
             "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_total_gib": 80.0} for i in range(4)],
             "torch": {"version": "2.5.1", "cuda_build": "12.4", "cuda_available": True}, "problems": []}


def _system_python_without_torch() -> str:
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("SKIPPED LOUDLY: no system python3 in /usr/bin or /bin to stand for a Python without torch")
    return python


@pytest.fixture
def local_root(window, tmp_path):
    """This computer's run root (where its runner is deployed) under this test's tmp_path."""
    window.hosts.update(dataclasses.replace(window.hosts.get(LOCAL), run_root=str(tmp_path / "local root")))
    window.hosts_panel.reload(LOCAL)
    return tmp_path / "local root"


def _test(dialog: HostEditDialog, qtbot) -> str:
    assert dialog.test_connection() is not None
    qtbot.waitUntil(lambda: dialog.test_state != "busy", timeout=WAIT_MS)
    return dialog.test_result.text()


def test_a_python_without_torch_is_said_in_the_error_colour_with_what_to_change(window, qtbot, local_root):
    python = _system_python_without_torch()
    dialog = window.hosts_panel.edit_host()  # This computer's dialog, opened (window-modal, not blocking)
    assert isinstance(dialog, HostEditDialog) and dialog.isVisible()
    dialog.python.setText(python)
    text = _test(dialog, qtbot)
    assert dialog.test_state == "ok", text  # connected: the host answered
    assert text.startswith("Connected to This computer: ") and "no torch" in text, text
    assert f"\nBut: PyTorch is not installed for {python}" in text, text
    assert "\nHint: set Python (above) to the interpreter that has torch, e.g. ~/venv/bin/python" in text, text
    assert ERROR_COLOUR in dialog.test_result.styleSheet()  # not green: the host cannot run anything
    assert dialog.invalid_field == "python"  # the field to change is marked
    assert ERROR_COLOUR in dialog.form.labelForField(dialog.python).styleSheet()
    dialog._save()  # saved anyway: the list shows the probe, with its dot in the error colour and the hint
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5_000)
    item = window.hosts_panel.item(LOCAL)
    assert "no torch" in item.text() and "not probed yet" not in item.text()
    assert "Hint: set Python" in item.toolTip() and "PyTorch is not installed" in item.toolTip()
    colour = item.icon().pixmap(14, 14).toImage().pixelColor(7, 7).name()
    assert colour == ERROR_COLOUR


def test_a_successful_test_is_kept_on_save_and_bounds_the_launch_form(window, qtbot, local_root):
    panel, launch = window.hosts_panel, window.launch_panel
    assert "not probed yet" in panel.item(LOCAL).text() and launch.nproc.suffix() == "?"
    dialog = panel.edit_host()
    assert dialog.name.text() == "This computer" and not dialog.name.isEnabled()  # its id "local" is not shown
    dialog.python.setText(sys.executable)  # the interpreter that has torch
    text = _test(dialog, qtbot)
    assert dialog.test_state == "ok" and "\nBut: " not in text and f"torch {_torch_version()}" in text, text
    assert ERROR_COLOUR not in dialog.test_result.styleSheet() and dialog.invalid_field is None
    dialog.notes.setText("the laptop")  # a note changes nothing the test found
    dialog._save()
    assert dialog.result_profile.name == LOCAL and dialog.result_profile.notes == "the laptop"
    assert dialog.result_probe is not None and dialog.result_probe.get("cpu_count")
    item = panel.item(LOCAL)
    assert "not probed yet" not in item.text() and f"torch {_torch_version()}" in item.text(), item.text()
    assert panel.status[LOCAL] == "reachable" and LOCAL in panel.probes
    assert window.settings.value(f"probes/{LOCAL}")  # remembered for the next start, as a probe is
    assert launch.nproc.suffix() == "" and "a guess" not in launch.nproc_label.text()  # a fact now
    assert launch.nproc.maximum() == max_processes(panel.probes[LOCAL])[0]


def test_a_connection_changed_after_the_test_is_not_saved_as_probed(window, qtbot, local_root, tmp_path):
    panel = window.hosts_panel
    dialog = panel.edit_host()
    dialog.python.setText(sys.executable)
    _test(dialog, qtbot)
    assert dialog.test_state == "ok"
    dialog.run_root.setText(str(tmp_path / "another root"))  # what the test tried is not what is saved
    dialog._save()
    assert dialog.result_probe is None
    assert "not probed yet" in panel.item(LOCAL).text() and LOCAL not in panel.probes


def test_an_untested_host_s_process_count_is_a_guess_until_it_is_probed(window, qtbot):
    window.hosts.add(HostProfile(name="far", hostname="10.0.0.5", user="ana"))
    panel, launch = window.hosts_panel, window.launch_panel
    panel.reload("far")
    panel.select("far")
    assert launch.host == "far" and launch.nproc.suffix() == "?"  # "2?" in the box
    assert launch.nproc.text().endswith("?")
    label = launch.nproc_label.text()
    assert label == f"of {launch.nproc.maximum()}? (a guess: not probed)"
    assert launch.nproc_label.styleSheet() == GUESS_STYLE
    assert launch.nproc.toolTip().startswith("A guess: far is not probed yet")
    panel.select_nodes([LOCAL, "far"])  # a run across both: still a guess while a node is not probed
    assert launch.nproc.suffix() == "?" and "per node (2 not probed)" in launch.nproc_label.text()
    window.set_probe("far", GPU_PROBE)
    panel.select("far")
    assert launch.nproc.suffix() == "" and launch.nproc.maximum() == 4
    assert launch.nproc_label.text() == "of 4 GPUs" and launch.nproc_label.styleSheet() == ""
    assert not launch.nproc.toolTip().startswith("A guess")
    panel.select_nodes(["far", LOCAL])
    assert "per node (1 not probed)" in launch.nproc_label.text() and "This computer" in launch.nproc.toolTip()


def test_this_computer_is_named_so_in_the_sweep_dialog_and_the_status_bar(window, qtbot, local_root):
    window.launch_panel.apply_settings({"workload": "linear", "nproc_per_node": 1, "steps": 5})
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    shown = [dialog.host_list.item(i).text() for i in range(dialog.host_list.count())]
    assert shown == ["This computer"] and "local" not in " ".join(shown)
    assert dialog.host_list.item(0).checkState() == Qt.CheckState.Checked
    assert dialog.spec().hosts == [LOCAL]  # the id the store and the CLI know stays "local"
    dialog.reject()
    window.test_connection(LOCAL)  # says so in the status bar when it answers
    qtbot.waitUntil(lambda: window.hosts_panel.status.get(LOCAL) in ("reachable", "error"), timeout=WAIT_MS)
    message = window.statusBar().currentMessage()
    assert message.startswith("This computer: reachable") and "local" not in message.split(" — ")[0], message


def _torch_version() -> str:
    import torch

    return torch.__version__
