"""A host whose port accepts but never answers must not freeze the window."""
import socket
import threading
import time

from PySide6.QtCore import QTimer

from ddpgui.core.hosts import HostProfile


def test_hung_host_does_not_block_the_event_loop(window, qtbot):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    accepted = []
    stop = threading.Event()

    def accept_forever():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])  # accept, then say nothing
            except OSError:
                pass

    threading.Thread(target=accept_forever, daemon=True).start()
    try:
        window.hosts.add(HostProfile(name="hung", hostname="127.0.0.1", port=listener.getsockname()[1], user="nobody"))
        window.hosts_panel.reload("hung")
        ticks = []
        timer = QTimer(interval=10)
        timer.timeout.connect(lambda: ticks.append(time.monotonic()))
        timer.start()
        window.hosts_panel.buttons["test"].click()
        qtbot.waitUntil(lambda: window.hosts_panel.status.get("hung") == "error", timeout=30_000)
        timer.stop()
        assert accepted, "the client never connected to the hung host"
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        assert len(ticks) > 50
        assert max(gaps) < 0.5, f"the event loop stalled for {max(gaps):.3f} s"
        assert "within" in window.hosts_panel.details["hung"] or "Unreachable" in window.hosts_panel.details["hung"]
    finally:
        stop.set()
        for conn in accepted:
            conn.close()
        listener.close()
