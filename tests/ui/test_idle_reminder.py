"""A priced host that has run nothing for longer than the setting gets one reminder, on the host and as a notice."""
import time

from ddpgui.core.hosts import HostProfile


def test_an_idle_priced_host_is_reminded_once(window, qtbot):
    window.hosts.add(HostProfile("rented", hostname="gpu.cloud", price_per_hour=4.0))
    window.hosts_panel.reload()
    window.store.create_run("r1", hosts=["rented"], state="finished")
    window.store.update_run("r1", ended_at=time.time() - 30 * 60)
    window.set_idle_minutes(60)
    window.check_idle_hosts()
    qtbot.wait(300)
    assert "still costs" not in window.statusBar().currentMessage()  # 30 min < 60 min
    window.set_idle_minutes(20)
    window.check_idle_hosts()
    qtbot.waitUntil(lambda: "still costs 4/h" in window.statusBar().currentMessage(), timeout=10_000)
    assert "still costing 4/h" in window.hosts_panel.item("rented").text()
    window.statusBar().clearMessage()
    window.check_idle_hosts()  # the same idle period: no second reminder
    qtbot.wait(300)
    assert window.statusBar().currentMessage() == ""
    assert window.settings.value("reminders/idle_minutes") in (20, "20")
