"""The GPU views (real Qt, offscreen) fed with snapshots of real captures (tests/fixtures/gpu, built as the
monitor builds them: tests/ui/gpu_snapshots.py) and a real snapshot of this machine's own monitor (a CPU host):
what a user reads in the device and process tables, the fleet's cards, which hosts the GPUs tab wants sampled,
tables updated in place, and nothing clipped or widening the window."""
import dataclasses
import os
import pwd
import time

import numpy as np
import pytest
from gpu_snapshots import (
    GPU_FIXTURES,
    TITANS,
    _record,
    a40_snapshot,
    cpu_snapshot,
    cpu_snapshot_line,
    lost_snapshot,
    mig_snapshot,
    query_gpus,
)
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QLabel

from ddpgui.ui.widgets.fleet_view import FleetView
from ddpgui.ui.widgets.gpu_parts import LOST_COLOR, History
from ddpgui.ui.widgets.gpu_view import GpuView
from ddpgui.ui.widgets.gpus_tab import GpusTab

ME = pwd.getpwuid(os.getuid()).pw_name
LONG_HOSTNAME = "node-" + "a" * 183 + ".example.org"  # 200 characters


@pytest.fixture(scope="module")
def cpu_line():
    return cpu_snapshot_line()


@pytest.fixture
def view(qtbot):
    widget = GpuView()
    qtbot.addWidget(widget)
    widget.resize(1100, 700)
    widget.show()
    return widget


def _settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(20)


def column(table, c):
    return [table.item(r, c).text() for r in range(table.rowCount())]


def test_the_shared_eight_a40_machine_its_users_and_pids(view, qtbot):
    snapshot = a40_snapshot(extra=[(2, os.getpid(), 1200)], unplaced=[(os.getppid(), 300)])
    view.set_host("gpu1", "gpu1")
    view.show_snapshot("gpu1", snapshot)
    assert view.header_text() == "gpu1 · 3 of 8 GPUs free · from nvidia-smi · just now"
    devices = view.devices
    assert column(devices, 0) == [str(i) for i in range(8)] and set(column(devices, 1)) == {"NVIDIA A40"}
    assert column(devices, 2)[:2] == ["82%", "0%"] and column(devices, 4)[0] == "295 W"
    assert column(devices, 5)[0] == "69 °C" and column(devices, 3)[0] == "28.5 / 45.0 GiB"
    assert column(devices, 3)[1] == "26 MiB / 45.0 GiB" and "29143 of 46068 MiB used (63%)" in devices.item(0, 3).toolTip()
    states = column(devices, 7)
    assert states[0] == "busy · python3.8 (owner unknown)" and states[2] == f"busy · {ME}"
    assert states[1] == states[3] == states[4] == "free" and states[5:] == ["busy · julia (owner unknown)"] * 3
    processes = view.processes
    assert column(processes, 1) == ["1807667", str(os.getpid()), "2970647", "1778799", "1783425", str(os.getppid())]
    assert column(processes, 0) == ["0", "2", "5", "6", "7", "–"]  # the last on no GPU the host lists
    assert column(processes, 2) == ["?", ME, "?", "?", "?", ME]
    assert column(processes, 3)[0] == "python3.8" and column(processes, 3)[2:5] == ["julia"] * 3
    assert "python" in column(processes, 3)[1]  # this test's own command line, read from /proc
    assert column(processes, 4)[:3] == ["28.4 GiB", "1.2 GiB", "41.6 GiB"]
    tip = processes.item(0, 2).toolTip()
    assert tip.startswith("The owner could not be read: no process 1807667 on this host") and "PID namespace" in tip
    assert "no GPU this host lists" in processes.item(5, 0).toolTip()
    assert not view.process_note.isVisible()


def test_a_second_snapshot_updates_the_same_cells(view, qtbot):
    first = a40_snapshot()
    view.show_snapshot("gpu1", first)
    cells = [[view.devices.item(r, c) for c in range(8)] for r in range(8)]
    process_cells = [view.processes.item(r, 1) for r in range(view.processes.rowCount())]
    gpus = list(first.gpus)
    gpus[1] = dataclasses.replace(gpus[1], util_pct=57.0, mem_used_mib=20000)
    view.show_snapshot("gpu1", dataclasses.replace(first, gpus=tuple(gpus), seq=2))
    assert [[view.devices.item(r, c) for c in range(8)] for r in range(8)] == cells  # the same objects
    assert all(view.devices.item(r, c) is cells[r][c] for r in range(8) for c in range(8))
    assert all(view.processes.item(r, 1) is item for r, item in enumerate(process_cells))
    assert view.devices.item(1, 2).text() == "57%" and view.devices.item(1, 3).text() == "19.5 / 45.0 GiB"
    assert view.devices.item(1, 7).text() == "busy · 19.5 GiB used, by no listed process"
    assert view.header_text().startswith("gpu1 · 3 of 8 GPUs free")
    t, values = view._histories["gpu1"].window()
    assert len(t) == 2 and list(values[1]) == [0.0, 57.0]
    assert [len(curve.getData()[0]) for curve in view._curves] == [2] * 8


def test_a_gpu_fallen_off_the_bus_is_shown_lost_in_red(view):
    view.show_snapshot("titan-box", lost_snapshot(lost=3))
    row = column(view.devices, 7)
    assert row[3] == "lost: Unknown Error" and view.devices.item(3, 7).foreground().color() == LOST_COLOR
    assert column(view.devices, 0)[3] == "?" and column(view.devices, 1)[3] == "bus 0000:0B:00.0"
    assert view.devices.item(3, 1).foreground().color() == LOST_COLOR
    assert "needs a reboot" in view.devices.item(3, 7).toolTip()
    assert column(view.devices, 3)[3] == "–" and column(view.devices, 2)[3] == "–"
    assert "1 of 8 GPUs free" in view.header_text()
    # seven GPUs whose processes nvidia-smi did not list (the capture has none): said under the table
    assert view.process_note.isVisibleTo(view) and "GPUs 0-2, 4-7 are not visible" in view.process_note.text()


def test_no_listed_process_but_memory_used_is_said_under_the_empty_table(view):
    """The monitor's compute-apps stream listed nobody (nvidia-smi prints no row then) while 7 of the 8 TITAN X
    hold memory: an empty process table says so instead of looking like nothing runs."""
    gpus = query_gpus(TITANS)
    for gpu in gpus:
        gpu["processes"] = []
    view.show_snapshot("titan-box", _record(gpus, "titan-box"))
    assert view.processes.rowCount() == 0
    note = view.process_note.text()
    assert view.process_note.isVisibleTo(view) and note.startswith("No compute process is listed on any GPU")
    assert "GPUs 1-7 belongs to processes the driver does not list" in note, note
    view.show_snapshot("gpu1", a40_snapshot())  # processes listed: no note
    assert view.processes.rowCount() == 4 and not view.process_note.isVisibleTo(view)


def test_mig_devices_are_rows_under_their_gpu(view, qtbot):
    view.show_snapshot("mig-box", mig_snapshot())
    devices = view.devices
    assert devices.rowCount() == 8 + 3
    assert column(devices, 6)[:2] == ["off", "on · 3 devices"]
    assert column(devices, 1)[2:5] == ["  MIG device 0", "  MIG device 1", "  MIG device 2"]
    assert column(devices, 3)[2:5] == ["14.0 / 19.5 GiB", "9.6 / 19.5 GiB", "13 MiB / 19.5 GiB"]
    assert column(devices, 6)[2:5] == ["GI 3 · CI 0", "GI 5 · CI 0", "GI 6 · CI 0"]
    assert column(devices, 0)[5] == "2"  # the GPUs after it follow
    _settle(qtbot)
    assert devices.verticalScrollBar().maximum() == 0  # all 11 rows in sight (the processes get less room)


def test_a_cpu_host_shows_load_memory_and_its_busiest_processes(view, cpu_line):
    snapshot = cpu_snapshot(cpu_line)
    view.show_snapshot("local", snapshot)
    assert view.pages.currentIndex() == 1 and view.header_text().startswith("local · CPU host (no GPUs) · ")
    cpu = snapshot.cpu
    assert view.load_meter.text.endswith(f"(1, 5, 15 min) of {os.cpu_count()} CPUs")
    assert view.load_meter.text.startswith(f"{cpu.load_1m:.2f} · ")
    assert view.memory_meter.text == (f"{cpu.mem_used_mib / 1024:.1f} / {cpu.mem_total_mib / 1024:.1f} GiB"
                                      if cpu.mem_used_mib >= 1024 else f"{cpu.mem_used_mib} MiB / "
                                      f"{cpu.mem_total_mib / 1024:.1f} GiB")
    assert column(view.top, 1) == [str(p.pid) for p in cpu.top] and column(view.top, 0) == [p.user for p in cpu.top]
    # each command on one line (a `python -c` script's newlines as spaces), the whole of it as the tooltip
    assert column(view.top, 2) == [" ".join(p.command.split()) for p in cpu.top]
    assert [view.top.item(r, 2).toolTip() for r in range(view.top.rowCount())] == [p.command for p in cpu.top]
    assert column(view.top, 3) == [f"{p.cpu_pct:.1f}" for p in cpu.top]  # the second line: CPU % known


def test_a_problem_keeps_the_last_data_marked_stale_then_waiting_and_clear(view):
    view.show_snapshot("gpu1", a40_snapshot())
    view.show_problem("gpu1", "the connection to gpu1 dropped", "ddpgui connects again when you look at it")
    assert view.stale and view.devices.rowCount() == 8 and column(view.devices, 2)[0] == "82%"
    assert view.header_text().startswith("gpu1 · 4 of 8 GPUs free") and view.header_text().endswith("not updating")
    assert view.problem.isVisibleTo(view)
    assert "the connection to gpu1 dropped" in view.problem.text() and "connects again" in view.problem.text()
    view.show_snapshot("gpu1", a40_snapshot())
    assert not view.stale and not view.problem.isVisibleTo(view) and "not updating" not in view.header_text()
    view.show_waiting("other", "connecting…")
    assert view.header_text() == "other · connecting…" and view.devices.rowCount() == 0
    view.clear()
    assert view.header_text() == "No host selected: choose one in the hosts panel"


def _labels_fit(widget) -> None:
    """Every visible label lies inside its parent and shows its whole text (elided ones are their own kind)."""
    for label in widget.findChildren(QLabel):
        if not label.isVisibleTo(widget) or not label.text():
            continue
        parent = label.parentWidget()
        assert parent.rect().contains(label.geometry()), (label.text(), label.geometry(), parent.rect())
        if hasattr(label, "elided"):
            assert label.fontMetrics().horizontalAdvance(label.elided()) <= label.contentsRect().width()
        elif not label.wordWrap():
            assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width(), label.text()


def _cells_fit(table, columns) -> None:
    """The numbers' cells show their whole text (the command and state columns elide, with tooltips)."""
    metrics = table.fontMetrics()
    for c in columns:
        for r in range(table.rowCount()):
            text = table.item(r, c).text()
            assert metrics.horizontalAdvance(text) + 8 <= table.columnWidth(c), (c, text, table.columnWidth(c))


def test_nothing_is_clipped(view, qtbot, cpu_line):
    view.show_snapshot("gpu1", a40_snapshot(extra=[(2, os.getpid(), 1200)]))
    view.show_problem("gpu1", "the monitor on gpu1 ended: exit status 1 " * 4, "deploy the runner again")
    _settle(qtbot)
    _labels_fit(view)
    _cells_fit(view.devices, (0, 2, 3, 4, 5, 6))
    _cells_fit(view.processes, (0, 1, 2, 4))
    view.show_snapshot("mig-box", mig_snapshot())
    _settle(qtbot)
    _cells_fit(view.devices, (0, 2, 3, 4, 5, 6))
    view.show_snapshot("local", cpu_snapshot(cpu_line))
    _settle(qtbot)
    _labels_fit(view)
    _cells_fit(view.top, (1, 3, 4))
    assert not view.grab().isNull()


def test_the_history_is_a_fixed_ring(qtbot):
    history = History(gpus=2, samples=150)
    arrays = (history.t, history.y)
    for k in range(400):
        history.add(float(k), [k % 100, None])
    t, values = history.window()
    assert (history.t, history.y) == arrays  # never allocated again
    assert np.shares_memory(t, history.t) and np.shares_memory(values, history.y)
    assert list(t) == [float(k) for k in range(250, 400)] and list(values[0]) == [k % 100 for k in range(250, 400)]
    assert np.isnan(values[1]).all()


@pytest.fixture
def fleet(qtbot):
    widget = FleetView()
    qtbot.addWidget(widget)
    widget.resize(1300, 760)
    widget.show()
    return widget


FLEET = [("gpu1", "gpu1 (A40s)"), ("local", "This computer"), ("titan", "titan-box"), ("off", "lab-old")]


def test_the_fleet_cards_say_what_each_host_has(fleet, qtbot, cpu_line):
    fleet.set_hosts(FLEET)
    cpu = cpu_snapshot(cpu_line)
    fleet.show_snapshot("gpu1", a40_snapshot())
    fleet.show_snapshot("local", cpu)
    fleet.show_problem("titan", "nvidia-smi on titan-box stopped: exit status 9", "reboot the host")
    fleet.set_connected("off", False)
    _settle(qtbot)
    gpu1, local, titan, off = (fleet.card(name) for name, _ in FLEET)
    assert gpu1.title.text() == "gpu1 (A40s)" and gpu1.summary.text() == "4 of 8 GPUs free"
    assert [line.text() for line in gpu1.lines] == ["python3.8 (owner unknown)", "free", "free", "free", "free"] + \
        ["julia (owner unknown)"] * 3
    assert "29143 of 46068 MiB used" in gpu1.lines[0].toolTip() and "82%" in gpu1.lines[0].toolTip()
    assert local.summary.text() == f"CPU host · load {cpu.cpu.load_1m:.2f} of {os.cpu_count()} CPUs"
    assert not local.lines and local.cpu_meters[0].isVisibleTo(local)
    assert titan.summary.text() == "no data"
    assert titan.status_text() == "nvidia-smi on titan-box stopped: exit status 9\nreboot the host"
    assert "reboot the host" in titan.status.toolTip() and titan.connect_button.isVisibleTo(titan)
    assert off.status_text() == "not connected" and off.connect_button.isVisibleTo(off)
    assert not gpu1.connect_button.isVisibleTo(gpu1)
    asked, opened = [], []
    fleet.connect_requested.connect(asked.append)
    fleet.host_opened.connect(opened.append)
    qtbot.mouseClick(off.connect_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(gpu1.details, Qt.MouseButton.LeftButton)
    qtbot.mouseDClick(local, Qt.MouseButton.LeftButton)
    assert asked == ["off"] and opened == ["gpu1", "local"]
    assert fleet.columns() == 4  # 1300 px hold four cards side by side
    fleet.resize(700, 760)
    _settle(qtbot)
    assert fleet.columns() == 2
    # the hosts change: the ones still there keep their card and data, in the new order
    fleet.set_hosts([("local", "This computer"), ("gpu1", "gpu1")])
    assert fleet.card("gpu1") is gpu1 and gpu1.summary.text() == "4 of 8 GPUs free" and fleet.card("titan") is None
    assert fleet.order == ["local", "gpu1"] and gpu1.title.text() == "gpu1"
    _labels_fit(fleet)


def test_a_fleet_card_updates_in_place(fleet):
    fleet.set_hosts(FLEET[:1])
    fleet.show_snapshot("gpu1", a40_snapshot())
    lines = list(fleet.card("gpu1").lines)
    fleet.show_snapshot("gpu1", a40_snapshot(extra=[(1, os.getpid(), 2000)]))
    assert fleet.card("gpu1").lines == lines and lines[1].text() == ME
    assert fleet.card("gpu1").summary.text() == "3 of 8 GPUs free"


def test_a_200_character_host_name_never_widens_the_fleet(fleet, qtbot):
    fleet.set_hosts(FLEET)
    _settle(qtbot)
    least, width = fleet.minimumSizeHint().width(), fleet.width()
    fleet.set_hosts(FLEET + [("long", LONG_HOSTNAME)])
    fleet.show_snapshot("long", a40_snapshot(host=LONG_HOSTNAME))
    fleet.show_waiting("long", "connecting to " + LONG_HOSTNAME + "…")
    _settle(qtbot)
    card = fleet.card("long")
    assert fleet.minimumSizeHint().width() <= least and fleet.width() == width
    assert card.width() <= fleet.width() and fleet.scroll.horizontalScrollBar().maximum() == 0
    assert card.title.toolTip().startswith(LONG_HOSTNAME) and card.title.elided().endswith("…")
    assert card.title.geometry().right() <= card.rect().right()
    _labels_fit(fleet)


@pytest.fixture
def tab(qtbot):
    widget = GpusTab()
    qtbot.addWidget(widget)
    widget.resize(1200, 800)
    return widget


def test_the_tab_asks_for_the_hosts_it_shows(tab, qtbot):
    sets = []
    tab.watch_changed.connect(sets.append)
    tab.set_hosts(FLEET)
    tab.set_host("gpu1", "gpu1 (A40s)")
    assert tab.watched() == [] and sets == []  # not shown yet
    tab.show()
    qtbot.waitUntil(lambda: sets == [["gpu1"]])
    tab.set_mode("fleet")
    assert tab.mode() == "fleet" and sets[-1] == ["gpu1", "local", "titan", "off"]
    assert tab.stack.currentWidget() is tab.fleet
    tab.hide()
    assert sets[-1] == [] and tab.watched() == []
    tab.show()
    assert sets[-1] == ["gpu1", "local", "titan", "off"]
    tab.set_hosts(FLEET[:2] + [("new", "new-box")])  # a host deleted, one added: the fleet asks for them
    assert sets[-1] == ["gpu1", "local", "new"]
    tab.set_hosts(FLEET)
    count = len(sets)
    tab.set_host("local", "This computer")  # in fleet mode the set stays what it was
    assert len(sets) == count
    tab.set_mode("host")
    assert sets[-1] == ["local"] and tab.mode_buttons["host"].isChecked()
    with pytest.raises(ValueError, match="host or fleet"):
        tab.set_mode("all")


def test_a_host_opened_from_the_fleet_is_shown_alone(tab, qtbot):
    chosen, sets, asked = [], [], []
    tab.host_chosen.connect(chosen.append)
    tab.watch_changed.connect(sets.append)
    tab.connect_requested.connect(asked.append)
    tab.set_hosts(FLEET)
    tab.set_host("local", "This computer")
    tab.show()
    tab.set_mode("fleet")
    tab.show_snapshot("gpu1", a40_snapshot())  # sampled for the fleet: the GPU view gets it when opened
    tab.show_problem("titan", "titan-box refused the connection", "check that sshd runs there")
    qtbot.mouseClick(tab.fleet.card("off").connect_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(tab.fleet.card("gpu1").details, Qt.MouseButton.LeftButton)
    assert chosen == ["gpu1"] and asked == ["off"] and tab.mode() == "host" and sets[-1] == ["gpu1"]
    assert tab.gpu_view.header_text().startswith("gpu1 (A40s) · 4 of 8 GPUs free · from nvidia-smi")
    assert tab.gpu_view.devices.rowCount() == 8
    tab.set_host("titan", "titan-box")
    assert tab.gpu_view.problem.isVisibleTo(tab.gpu_view) and "refused" in tab.gpu_view.problem.text()
    tab.show_waiting("titan", "starting the monitor…")
    assert tab.gpu_view.header_text() == "titan-box · starting the monitor…"
    assert tab.fleet.card("titan").status_text() == "starting the monitor…"


def test_the_header_says_how_old_the_data_is_and_a_host_not_connected_has_connect(view, qtbot):
    view.show_snapshot("gpu1", a40_snapshot(), received=time.monotonic() - 3)
    assert view.header_text().endswith(" · 3 s ago")
    qtbot.waitUntil(lambda: view.header_text().endswith((" · 4 s ago", " · 5 s ago", " · 6 s ago")), timeout=10_000)
    asked = []
    view.connect_requested.connect(asked.append)
    view.set_connected("other", False)  # not the host shown: nothing changes
    assert not view.connect_button.isVisibleTo(view)
    view.set_connected("gpu1", False)
    assert view.connect_button.isVisibleTo(view) and view.devices.rowCount() == 8  # the data stays
    qtbot.mouseClick(view.connect_button, Qt.MouseButton.LeftButton)
    assert asked == ["gpu1"]
    view.set_host("lab-old", "lab-old")
    view.set_connected("lab-old", False)
    assert view.header_text() == "lab-old · not connected" and view.connect_button.isVisibleTo(view)
    view.set_connected("lab-old", True)
    assert view.header_text() == "lab-old · no data yet" and not view.connect_button.isVisibleTo(view)


def test_the_tab_remembers_what_it_heard_of_each_host(tab, qtbot):
    asked = []
    tab.connect_requested.connect(asked.append)
    tab.set_hosts(FLEET)
    tab.set_host("gpu1", "gpu1 (A40s)")
    tab.show()
    tab.set_connected("off", False)
    tab.show_snapshot("titan", lost_snapshot())
    assert tab.fleet.card("off").status_text() == "not connected" and tab.gpu_view.devices.rowCount() == 0
    tab.set_host("off", "lab-old")
    assert tab.gpu_view.header_text() == "lab-old · not connected"
    qtbot.mouseClick(tab.gpu_view.connect_button, Qt.MouseButton.LeftButton)
    assert asked == ["off"]
    tab.set_host("titan", "titan-box")
    assert tab.gpu_view.header_text().startswith("titan-box · 1 of 8 GPUs free")
    assert column(tab.gpu_view.devices, 7)[3] == "lost: Unknown Error"
    tab.set_hosts(FLEET[:2])  # titan and lab-old removed: what was heard of them is forgotten
    assert tab.fleet.card("titan") is None and "titan" not in tab._latest and "off" not in tab._connected
    assert tab.watched() == [] and tab.gpu_view.header_text() == "No host selected: choose one in the hosts panel"


def test_what_the_monitor_could_not_read_is_said(view, fleet, qtbot):
    refusal = (GPU_FIXTURES / "smi_error_not_a_valid_field.txt").read_text().strip()
    error = f"nvidia-smi --query-compute-apps exited with code 2: {refusal}"  # the monitor's words for it
    snapshot = dataclasses.replace(a40_snapshot(), errors=(error,))
    view.show_snapshot("gpu1", snapshot)
    assert view.notes.isVisibleTo(view) and view.notes.text() == f"The monitor says: {error}"
    assert refusal in view.notes.toolTip()
    fleet.set_hosts(FLEET[:1])
    fleet.show_snapshot("gpu1", snapshot)
    card = fleet.card("gpu1")
    assert card.notes.isVisibleTo(card) and card.notes.text() == error
    view.show_snapshot("gpu1", a40_snapshot())
    fleet.show_snapshot("gpu1", a40_snapshot())
    assert not view.notes.isVisibleTo(view) and not card.notes.isVisibleTo(card)
    # one host is one card's width, not the whole row
    _settle(qtbot)
    assert card.isVisible() and card.width() <= fleet.width() // 3


def test_a_problem_after_data_greys_the_card_and_keeps_its_lines(fleet):
    fleet.set_hosts(FLEET[:1])
    fleet.show_snapshot("gpu1", a40_snapshot())
    card = fleet.card("gpu1")
    fleet.show_problem("gpu1", "the connection to gpu1 dropped", "ddpgui connects again when you look at it")
    assert card.stale and all(line.stale for line in card.lines) and card.summary.text() == "4 of 8 GPUs free"
    assert card.status_text().startswith("the connection to gpu1 dropped") and card.connect_button.isVisibleTo(card)
    fleet.show_snapshot("gpu1", a40_snapshot())
    assert not card.stale and not any(line.stale for line in card.lines) and not card.connect_button.isVisibleTo(card)


def test_a_card_whose_host_went_away_or_waits_greys_its_last_data(fleet):
    fleet.set_hosts(FLEET[:1])
    card = fleet.card("gpu1")
    fleet.show_snapshot("gpu1", a40_snapshot())
    fleet.set_connected("gpu1", False)  # the link is gone: nothing updates these numbers any more
    assert card.stale and all(line.stale for line in card.lines) and card.status_text() == "not connected"
    fleet.set_connected("gpu1", True)
    fleet.show_waiting("gpu1", "starting the monitor…")  # a new sampler: the old one's data until it reports
    assert card.stale and card.summary.text() == "4 of 8 GPUs free"
    fleet.show_snapshot("gpu1", a40_snapshot())
    assert not card.stale and not any(line.stale for line in card.lines)


def test_a_200_character_host_name_never_widens_the_host_view(view, qtbot):
    view.show_snapshot("gpu1", a40_snapshot())
    _settle(qtbot)
    least, width = view.minimumSizeHint().width(), view.width()
    view.set_host("long", LONG_HOSTNAME)
    view.show_snapshot("long", a40_snapshot(host=LONG_HOSTNAME))
    view.show_problem("long", f"cannot connect to {LONG_HOSTNAME} port 22: connection refused", "check the address")
    _settle(qtbot)
    assert view.minimumSizeHint().width() <= least and view.width() == width
    assert view.header_text().startswith(LONG_HOSTNAME) and view.header.elided().endswith("…")
    _labels_fit(view)


def test_a_reused_row_takes_the_new_process_s_look(view):
    view.show_snapshot("gpu1", a40_snapshot())
    unknown = view.processes.item(0, 2)
    assert unknown.text() == "?" and unknown.data(Qt.ItemDataRole.ForegroundRole) is not None
    view.show_snapshot("gpu1", a40_snapshot(extra=[(0, os.getpid(), 40000)]))  # this test's process first on GPU 0
    mine = view.processes.item(0, 2)
    assert mine is unknown and mine.text() == ME and mine.toolTip() == ME
    assert mine.data(Qt.ItemDataRole.ForegroundRole) is None  # the table's colour again (grey when stale)


def test_selected_processes_are_copied_as_text(view, qtbot):
    view.show_snapshot("gpu1", a40_snapshot())
    view.processes.setFocus()
    view.processes.selectRow(1)
    (copy,) = view.processes.actions()
    assert copy.text() == "Copy" and copy.shortcut() == QKeySequence(QKeySequence.StandardKey.Copy)
    QApplication.clipboard().clear()
    copy.trigger()
    assert QApplication.clipboard().text() == "5\t2970647\t?\tjulia\t41.6 GiB"
