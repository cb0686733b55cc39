"""Issue 24's walk-through, sweeps: the New sweep dialog offers what the launch form offers (one rule, in core),
a sweep started here puts its first run on the dashboard, and the status bar's sweep line reads."""
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from walkthrough_runs import SWEEP_NAME, store_sweep

from ddpgui.core.hosts import HostStore
from ddpgui.core.hosts.precisions import CPU_FP16, host_precision_problems
from ddpgui.core.sweeps import SweepError, SweepSpec, plan_sweep
from ddpgui.core.sweeps.progress import sweep_progress
from remote_runner.config import PRECISIONS

CPU_PROBE = {"schema": 1, "hostname": "laptop", "cpu_count": 8, "best_device": "cpu", "gpus": [],
             "torch": {"version": "2.5.1+cpu", "cpu_fp16_autocast": True}, "problems": []}
A100_PROBE = {"schema": 1, "hostname": "gpu", "cpu_count": 64, "best_device": "cuda",
              "torch": {"version": "2.5.1+cu124", "cuda_available": True, "cpu_fp16_autocast": True},
              "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "bf16": True}],
              "problems": []}


def _items(widget):
    return {widget.item(i).text(): widget.item(i) for i in range(widget.count())}


def _enabled(item) -> bool:
    return bool(item.flags() & Qt.ItemFlag.ItemIsEnabled)


def test_the_rule_offers_a_cpu_fp32_and_bf16_and_a_gpu_everything():
    cpu = host_precision_problems(CPU_PROBE)
    assert cpu["fp32"] is None and cpu["bf16"] is None
    assert "tf32" in cpu["tf32"] and "CPU" in cpu["tf32"] and cpu["fp16"] == CPU_FP16
    assert "use bf16 or fp32" in cpu["fp16"]  # what the tf32 reason also advises: fp32 or bf16 on a CPU
    assert host_precision_problems(A100_PROBE) == {p: None for p in PRECISIONS}
    assert host_precision_problems(None) == {p: None for p in PRECISIONS}  # not probed yet: everything


def test_plan_sweep_refuses_what_the_host_is_not_offered(tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    spec = SweepSpec(hosts=["local"], base={"workload": "linear", "steps": 5}, matrix={"precision": ["fp32", "tf32"]})
    with pytest.raises(SweepError) as refused:
        plan_sweep(spec, hosts, {"local": CPU_PROBE})
    assert refused.value.axis == "precision" and "tf32 on This computer" in str(refused.value)
    assert host_precision_problems(CPU_PROBE)["tf32"] in str(refused.value) and "untick tf32" in refused.value.hint
    _, cells = plan_sweep(spec, hosts, {"local": A100_PROBE})  # a GPU host runs both
    assert [c.settings["precision"] for c in cells] == ["fp32", "tf32"]
    assert len(plan_sweep(spec, hosts)[1]) == 2  # without probes (the CLI): nothing is judged here


def test_the_sweep_dialog_greys_what_the_launch_form_greys_with_the_same_reason(window, qtbot):
    window.set_probe("local", CPU_PROBE)
    launch = window.launch_panel
    form_items = {launch.precision.itemText(i): launch.precision.model().item(i) for i in range(launch.precision.count())}
    assert not form_items["tf32"].isEnabled() and not form_items["fp16"].isEnabled()
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    items = _items(dialog.checks["precision"])
    for precision in PRECISIONS:  # one rule: the form's reasons are the dialog's
        assert _enabled(items[precision]) == (launch.problems[precision] is None), precision
        assert items[precision].toolTip() == (launch.problems[precision] or "")
    assert dialog.precision_note.isVisible() and dialog.precision_note.text().startswith("tf32, fp16: not offered")
    items["tf32"].setCheckState(Qt.CheckState.Checked)  # forced: unticked again, never planned
    assert items["tf32"].checkState() == Qt.CheckState.Unchecked
    assert "tf32" not in str(dialog.spec()) and dialog.start_button.isEnabled()
    items["bf16"].setCheckState(Qt.CheckState.Checked)
    assert dialog.spec().matrix == {"precision": ["fp32", "bf16"]} and dialog.cells == 2
    dialog.reject()


def test_a_gpu_host_in_the_sweep_is_offered_everything_a_cpu_host_beside_it_is_not(window, qtbot):
    from ddpgui.core.hosts import HostProfile

    window.hosts.add(HostProfile(name="gpu", hostname="10.0.0.5", user="me"))
    window.hosts_panel.reload("local")
    window.set_probe("gpu", A100_PROBE)
    window.set_probe("local", CPU_PROBE)
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    hosts = {item.data(Qt.ItemDataRole.UserRole) or item.text(): item for item in _items(dialog.host_list).values()}
    hosts["local"].setCheckState(Qt.CheckState.Unchecked)
    hosts["gpu"].setCheckState(Qt.CheckState.Checked)
    assert all(_enabled(item) for item in _items(dialog.checks["precision"]).values())
    assert not dialog.precision_note.isVisible()
    hosts["local"].setCheckState(Qt.CheckState.Checked)  # both: only what both are offered
    items = _items(dialog.checks["precision"])
    assert not _enabled(items["tf32"]) and items["tf32"].toolTip().startswith("This computer: tf32")
    dialog.reject()


def test_a_sweep_started_here_shows_its_first_run_once_it_has_one(window, qtbot):
    sweep, ids = store_sweep(window.store)
    window.runs_table.model.reload()
    window.runs_table.select_runs([ids[3]])  # the run the user was looking at
    window.tabs.setCurrentIndex(1)
    bar = window.sweeps
    with qtbot.waitSignal(bar.first_run, timeout=10_000) as first:
        bar._started((sweep, [], True))  # as SweepsBar._start returns it for a sweep started from the dialog
    assert first.args == [ids[0]]
    qtbot.waitUntil(lambda: window.dashboard.run_ids == [ids[0]], timeout=10_000)
    assert window.tabs.currentWidget() is window.dashboard and window.runs_table.selected_ids() == [ids[0]]
    bar._deliver(sweep_progress(window.store, sweep.id))  # later progress: announced once only
    window.runs_table.select_runs([ids[3]])
    QApplication.processEvents()
    assert window.dashboard.run_ids == [ids[3]]


def test_a_resumed_sweep_leaves_the_dashboard_alone(window, qtbot):
    sweep, ids = store_sweep(window.store)
    bar = window.sweeps
    announced = []
    bar.first_run.connect(announced.append)
    bar._started(sweep)  # a resume returns the sweep alone
    qtbot.waitUntil(lambda: bar.last is not None, timeout=10_000)
    assert announced == [] and bar.following is None


@pytest.mark.parametrize("size", [(1024, 700), (1920, 1080)])
def test_the_status_bars_sweep_line_reads_and_its_bar_never_wraps(window, qtbot, size):
    window.resize(*size)
    sweep, _ = store_sweep(window.store)
    bar = window.sweeps
    bar._started(sweep)
    qtbot.waitUntil(lambda: bar.last is not None, timeout=10_000)
    progress = sweep_progress(window.store, sweep.id)
    progress.fraction, progress.eta_s, progress.state = 0.12, 91.0, "running"
    bar._deliver(progress)
    QApplication.processEvents()
    assert bar.bar.text() == "12% · 01:31 left"
    assert bar.bar.width() >= bar.bar.fontMetrics().horizontalAdvance(bar.bar.text()) + 16  # one line, whole
    assert bar.label.text() == f"Sweep “{SWEEP_NAME}”: 7 of 8 cells done, 1 failed (running)"
    assert bar.label.elided().endswith(": 7 of 8 cells done, 1 failed (running)")  # the name is cut, not the counts
    widgets = [w for w in (bar.label, bar.bar, bar.stop_button, bar.compare_button) if w.isVisible()]
    assert len(widgets) == 4
    for left, right in zip(widgets, widgets[1:]):  # apart, in order, none over another
        assert left.geometry().right() + 6 <= right.geometry().left(), (left.objectName(), right.objectName())
    assert not bar.stop_button.isFlat() and not bar.compare_button.isFlat()  # buttons, not more words
    assert bar.geometry().right() <= window.statusBar().width()
