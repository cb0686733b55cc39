"""The hosts' GPUs sampled while somebody looks: :class:`GpuWatch` over the core's host monitors, and the main
window's wiring of it (:class:`GpuWiring`: the hosts panel's "3 of 8 GPUs free", the GPUs tab, the launch form).

Each owner says which hosts it looks at (:meth:`GpuWatch.watch`): the hosts panel's ``badges`` This computer
(always, it costs no host anything), the ``launch`` form its nodes (the hosts selected), the ``gpus_tab`` what it
shows (nothing while hidden), the ``dashboard`` the hosts of its live runs while it is shown.  An SSH host nobody
selected, shows or watches a live run of is not sampled, connected or not.  The union is sampled, one long-lived sampler per host
(:class:`~ddpgui.core.gpus.monitor.HostMonitor`), and a host nobody looks at any more is released: its sampler
ends ``grace_s`` later.  Only hosts the window's pool is already connected to are sampled (This computer always
is): looking never opens a connection, so never asks for a password or a host key — the user connects with
Test connection (the GPUs tab's Connect does the same).  A Slurm cluster is never sampled: its login node's GPUs
are not its jobs'.  Paused (the window minimised or hidden), every host is released, so after the grace the
samplers stop and cost the hosts nothing.  The monitors call back on their workers; everything reaches the GUI
thread through a :class:`~ddpgui.ui.bridge.GuiRelay`, and nothing here waits on a host.
"""
from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, QTimer, Signal

from ddpgui.core.errors import describe
from ddpgui.core.gpus.monitor import HostMonitors
from ddpgui.core.gpus.snapshot import HostSnapshot
from ddpgui.core.hosts import LOCAL

from .bridge import GuiRelay

#: What a host that is not sampled because it is a Slurm cluster says (its badge, the GPUs tab).
SLURM_TEXT = "Slurm: see the partition"
SLURM_TIP = ("A Slurm cluster's login node is not where its jobs run: its GPUs are not the job's. "
             "See the partition's nodes in the cluster's view.")
#: What a host that is not connected says instead of sampling (looking never connects).
NOT_CONNECTED_TEXT = "not connected: Test connection (or Connect) to see its GPUs"
STARTING_TEXT = "starting the host monitor…"
RETRY_TEXT = "starting the host monitor again…"
#: The badge of a host whose monitor reported a problem (the problem is its tooltip).
UNKNOWN_BADGE = "GPUs unknown"
#: A host whose sampler went away is tried again this long after (ms), while somebody still looks.
RETRY_MS = 30_000
#: How often the window checks which hosts have become connected (ms): a run launched or reattached connects.
REFRESH_MS = 5_000
#: Seconds :meth:`GpuWatch.close` waits, in all, for the samplers to end (they end at once: their stdin closes).
#: A host gone silent is not waited for longer: the window's closing connections end its sampler's channel, and
#: a sampler whose channel or stdin is gone exits by itself (docs/PROTOCOL.md, "Host monitor").
CLOSE_WAIT_S = 3.0
#: Busy GPUs listed in a badge's tooltip at most.
TIP_LINES = 12


def gpu_badge(snapshot: HostSnapshot) -> str:
    """The hosts panel's compact summary: "3 of 8 GPUs free"; nothing on a CPU host (its probe says "CPU only")."""
    return snapshot.summary() if snapshot.gpus else ""


def gpu_holders(snapshot: HostSnapshot) -> str:
    """The badge's tooltip: who holds each busy GPU (GpuState.busy_reason), or that the host has none."""
    if not snapshot.gpus:
        return "GPUs: none on this host"
    busy = [f"GPU {gpu.index if gpu.index is not None else '?'}: {reason}" for gpu in snapshot.gpus
            for reason in [gpu.busy_reason()] if reason]
    if not busy:
        return f"{snapshot.summary()}: none busy"
    more = [f"… and {len(busy) - TIP_LINES} more busy"] if len(busy) > TIP_LINES else []
    return "\n".join([f"{snapshot.summary()}; busy:"] + busy[:TIP_LINES] + more)


class GpuWatch(QObject):
    """The hosts sampled for the window's owners, over the connections of ``pool`` (a TargetPool).

    Nothing samples before :meth:`start` (the app starts it; tests build windows without it).  ``connected(host)``
    says whether a host may be sampled without connecting (default: ``pool.connected``), ``is_slurm(host)`` which
    hosts are clusters.  Signals, on the GUI thread: ``snapshot(host, HostSnapshot)``, ``problem(host, message,
    hint)``, ``waiting(host, text)`` (starting, not connected, a Slurm cluster), ``released(host)`` (nobody looks
    at it any more: its sampler ends after the grace, what it said is no longer current).
    """

    snapshot = Signal(str, object)
    problem = Signal(str, str, str)
    waiting = Signal(str, str)
    released = Signal(str)

    def __init__(self, pool, *, connected=None, is_slurm=None, retry_ms: int = RETRY_MS, parent=None):
        super().__init__(parent)
        self.pool = pool
        self._connected = connected or pool.connected
        self._is_slurm = is_slurm or (lambda host: False)
        self.retry_ms = retry_ms
        self.monitors: HostMonitors | None = None
        self._owners: dict[str, list[str]] = {}
        self._acquired: set[str] = set()
        self._said: dict[str, str] = {}  # host → the waiting text last said for it (said once)
        self._latest: dict[str, HostSnapshot] = {}
        self._failed: set[str] = set()  # acquired hosts whose sampler reported a problem (a retry is due)
        self._used: set[str] = set()  # every host ever acquired: close() stops their monitors
        self.paused = False
        self.closed = False
        self._relay = GuiRelay(self)
        self._relay.received.connect(self._deliver)

    # ---- what is looked at -------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self.monitors is not None

    def start(self, **options) -> None:
        """Begin sampling what the owners look at; ``options`` go to every HostMonitor (``interval_s``,
        ``grace_s``)."""
        if self.monitors is None and not self.closed:
            self.monitors = HostMonitors(self.pool, **options)
            self.refresh()

    def watch(self, owner: str, hosts: list[str]) -> None:
        """``owner`` looks at ``hosts`` now (instead of what it looked at before; [] for none)."""
        self._owners[owner] = list(dict.fromkeys(hosts))
        self.refresh()

    def watched(self) -> list[str]:
        """Every host some owner looks at (sampled or not)."""
        return list(dict.fromkeys(h for hosts in self._owners.values() for h in hosts))

    def waiting_text(self, host: str) -> str | None:
        """What ``waiting`` last said for ``host``, while it holds (None once a snapshot or problem came)."""
        return self._said.get(host)

    def looking(self, owner: str) -> list[str]:
        """The hosts ``owner`` looks at."""
        return list(self._owners.get(owner, ()))

    def sampled(self) -> set[str]:
        """The hosts acquired now."""
        return set(self._acquired)

    def latest(self, host: str) -> HostSnapshot | None:
        """The last snapshot delivered for ``host`` (None before the first)."""
        return self._latest.get(host)

    def pause(self) -> None:
        """Nobody can see the window: every host is released (their samplers end after the grace)."""
        self.paused = True
        self.refresh()

    def resume(self) -> None:
        self.paused = False
        self.refresh()

    def refresh(self) -> None:
        """Acquire what is looked at, may be sampled and is not yet; release the rest (a host dropped from the
        pool too: sampling it again would connect)."""
        if self.monitors is None or self.closed:
            return
        sample = []
        for host in ([] if self.paused else self.watched()):
            if self._is_slurm(host):
                self._say(host, SLURM_TEXT)
            elif not self._connected(host):
                self._say(host, NOT_CONNECTED_TEXT)
            else:
                sample.append(host)
        for host in sample:
            if host not in self._acquired:
                self._acquire(host)
            elif host not in self._failed and not self.monitors.get(host).running:
                self._restart(host)  # its idle stop ended it just as it was looked at again
        for host in sorted(self._acquired - set(sample)):
            self._release(host)

    def _say(self, host: str, text: str) -> None:
        if self._said.get(host) != text:
            self._said[host] = text
            self.waiting.emit(host, text)

    def _acquire(self, host: str) -> None:
        monitor = self.monitors.get(host)
        monitor.on_snapshot = lambda snapshot, h=host: self._relay.post(("snapshot", h, snapshot))
        monitor.on_problem = lambda problem, h=host: self._relay.post(("problem", h, problem))
        self._acquired.add(host)
        self._failed.discard(host)
        self._used.add(host)
        if not monitor.running:
            self._say(host, STARTING_TEXT)
        monitor.acquire()

    def _restart(self, host: str) -> None:
        """A new sampler for an acquired host whose sampler ended (not running: nothing to stop, no wait)."""
        monitor = self.monitors.get(host)
        self._say(host, RETRY_TEXT)
        monitor.release()
        monitor.acquire()

    def _release(self, host: str) -> None:
        self._failed.discard(host)
        self._acquired.discard(host)
        self._said.pop(host, None)
        monitor = self.monitors.get(host)
        if monitor.grace_s > 0:
            monitor.release()  # a timer ends it later: nothing waits here
        else:  # it stops at once, and stopping waits for the sampler to end: not on the GUI thread
            threading.Thread(target=monitor.release, name=f"gpu-release-{host}", daemon=True).start()
        self.released.emit(host)

    # ---- from the monitors' workers ----------------------------------------------------------
    def _deliver(self, value) -> None:
        kind, host, payload = value
        if self.closed:
            return
        self._said.pop(host, None)
        if host not in self._acquired:  # from a sampler in its grace after the last look: nobody shows it
            return
        if kind == "snapshot":
            self._failed.discard(host)
            self._latest[host] = payload
            self.snapshot.emit(host, payload)
        else:
            if host in self._acquired:
                self._failed.add(host)  # tried again after retry_ms, not at every refresh
            self.problem.emit(host, *describe(payload))
            QTimer.singleShot(self.retry_ms, self, lambda: self._retry(host))

    def _retry(self, host: str) -> None:
        """Sample a host again whose sampler went away, if it is still looked at."""
        if self.closed or host not in self._failed or host not in self._acquired:
            return
        self._failed.discard(host)
        if not self.monitors.get(host).running:
            self._restart(host)

    def close(self) -> None:
        """Stop every sampler (the window closes); waits at most CLOSE_WAIT_S in all."""
        if self.closed:
            return
        self.closed = True
        self._acquired.clear()
        if self.monitors is None:
            return
        stops = [threading.Thread(target=self.monitors.get(host).stop, name=f"gpu-stop-{host}", daemon=True)
                 for host in sorted(self._used)]
        for thread in stops:
            thread.start()
        deadline = time.monotonic() + CLOSE_WAIT_S
        for thread in stops:
            thread.join(max(0.0, deadline - time.monotonic()))


class GpuWiring(QObject):
    """The main window's GPU sampling: a :class:`GpuWatch` over ``window.manager.targets`` for the hosts
    panel's badges (every connected host), the GPUs tab (what it shows) and the launch form (its nodes, when it
    takes snapshots); paused while the window is minimised or hidden, closed with it."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.watch = GpuWatch(window.manager.targets, is_slurm=window.manager.is_slurm, parent=self)
        self.tab = None
        self._tab_hosts: list[str] = []
        self._told_connected: dict[str, bool] = {}  # host → what the tab was last told
        self._fed: dict[str, tuple] = {}  # host → the GPUs the launch form was last given
        self.timer = QTimer(self, interval=REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        panel = window.hosts_panel
        panel.hosts_changed.connect(self._hosts_changed)
        self.watch.snapshot.connect(self._snapshot)
        self.watch.problem.connect(self._problem)
        self.watch.waiting.connect(self._waiting)
        self.watch.released.connect(self._released)
        if hasattr(window.launch_panel, "set_gpu_snapshot"):  # the launch form's GPU picker
            panel.host_selected.connect(lambda _name: self._launch_nodes())
            panel.nodes_selected.connect(lambda _names: self._launch_nodes())
            self._launch_nodes()
        # the dashboard's runs change with the runs selected and its visibility with the tab; the timer catches
        # a run that ended
        window.runs_table.runs_selected.connect(lambda _ids: self._dashboard_hosts())
        window.tabs.currentChanged.connect(lambda _index: self._dashboard_hosts())

    # ---- the GPUs tab ------------------------------------------------------------------------
    def attach_tab(self, tab) -> None:
        """Wire a GPUs tab: what it shows is sampled, Connect is Test connection, a host chosen there is selected
        in the hosts panel, the hosts panel's current host is shown there, its mode kept in settings."""
        self.tab = tab
        mode = self.window.settings.value("gpus/mode")
        if mode in ("host", "fleet"):  # anything else in a hand-edited settings file: the tab's default
            tab.set_mode(str(mode))
        tab.watch_changed.connect(self._tab_watch)
        tab.connect_requested.connect(self.window.test_connection)
        tab.host_chosen.connect(self.window.hosts_panel.select)
        self.window.hosts_panel.host_selected.connect(self._tab_host)
        self._tab_list()
        self._tab_host(self.window.hosts_panel.current())

    def _tab_list(self) -> None:
        if self.tab is not None:
            self.tab.set_hosts([(p.name, p.display_name) for p in self.window.hosts.profiles()])

    def _tab_host(self, name: str) -> None:
        if self.tab is not None and name in self.window.hosts:
            self.tab.set_host(name, self.window.hosts.get(name).display_name)

    def _tab_watch(self, hosts: list) -> None:
        before = set(self._tab_hosts)
        self._tab_hosts = [str(h) for h in hosts]
        self.watch.watch("gpus_tab", self._tab_hosts)
        self._tell_connected()
        for host in self._tab_hosts:  # what is known already (the badges sample it, a cluster) is shown at once
            if host in before:
                continue
            latest, said = self.watch.latest(host), self.watch.waiting_text(host)
            if latest is not None and host in self.watch.sampled():  # not one from a sampler stopped since
                self.tab.show_snapshot(host, latest)
            if said is not None:
                self.tab.show_waiting(host, said)

    def _tell_connected(self) -> None:
        for host in self._tab_hosts:
            if self.window.manager.is_slurm(host):
                continue  # never sampled, connected or not: its Connect would promise GPUs it never shows
            connected = self.watch.pool.connected(host)
            if self._told_connected.get(host) != connected:
                self._told_connected[host] = connected
                self.tab.set_connected(host, connected)

    # ---- the launch form ---------------------------------------------------------------------
    def _launch_nodes(self) -> None:
        nodes = list(self.window.launch_panel.nodes)
        self.watch.watch("launch", nodes)
        for host in nodes:
            latest = self.watch.latest(host)
            if latest is not None and host in self.watch.sampled():  # not one of a sampler stopped long ago
                self._feed_launch(host, latest)

    def _feed_launch(self, host: str, snapshot: HostSnapshot) -> None:
        """The launch form's picker gets a snapshot whose GPUs differ from the last it got (its list is
        rebuilt at each one)."""
        shown = (snapshot.gpus, snapshot.unplaced_processes)
        if self._fed.get(host) != shown:
            self._fed[host] = shown
            self.window.launch_panel.set_gpu_snapshot(host, snapshot)

    # ---- the dashboard -----------------------------------------------------------------------
    def _dashboard_hosts(self) -> None:
        """The dashboard looks at the hosts of its runs that are live, while it is shown."""
        dashboard, hosts = self.window.dashboard, []
        if dashboard.isVisible():
            runs = {run.id: run for run in self.window.runs_table.model.runs}
            hosts = [h for run_id in dashboard.run_ids if run_id in runs and runs[run_id].active
                     for h in runs[run_id].hosts or [runs[run_id].host]]
        if hosts != self.watch.looking("dashboard"):
            self.watch.watch("dashboard", hosts)

    # ---- life --------------------------------------------------------------------------------
    def start(self, **options) -> None:
        """Begin sampling (``options``: ``interval_s``, ``grace_s`` for every host's monitor)."""
        self.watch.start(**options)
        self.timer.start()
        self.refresh()

    def refresh(self) -> None:
        """The badges look at This computer (an SSH host's badge comes while something else looks at it: it is
        selected, shown in the GPUs tab or running a live run on the dashboard); a cluster's badge says why it is
        not sampled; the GPUs tab learns which of its hosts are connected."""
        if not self.watch.started or self.watch.closed:
            return
        for profile in self.window.hosts.profiles():
            if profile.is_slurm:
                self.window.hosts_panel.set_gpu_summary(profile.name, SLURM_TEXT, SLURM_TIP)
        self.watch.watch("badges", [LOCAL])
        self._dashboard_hosts()
        if self.tab is not None:
            self._tell_connected()

    def _hosts_changed(self) -> None:
        self._tab_list()
        self.refresh()

    def visibility_changed(self) -> None:
        """Minimised or hidden: pause (nothing sampled after the grace); shown again: resume."""
        if self.window.isMinimized() or not self.window.isVisible():
            self.watch.pause()
        else:
            self.watch.resume()

    def close(self) -> None:
        self.timer.stop()
        if self.tab is not None:
            self.window.settings.setValue("gpus/mode", self.tab.mode())
        self.watch.close()

    # ---- what the monitors say ---------------------------------------------------------------
    def _snapshot(self, host: str, snapshot: HostSnapshot) -> None:
        self.window.hosts_panel.set_gpu_summary(host, gpu_badge(snapshot), gpu_holders(snapshot))
        if self.tab is not None and host in self._tab_hosts:
            self.tab.show_snapshot(host, snapshot)
        if host in self.watch.looking("launch"):
            self._feed_launch(host, snapshot)

    def _problem(self, host: str, message: str, hint: str) -> None:
        self.window.hosts_panel.set_gpu_summary(host, UNKNOWN_BADGE, f"GPU monitor: {message}"
                                                + (f"\nHint: {hint}" if hint else ""))
        if self.tab is not None and host in self._tab_hosts:
            self.tab.show_problem(host, message, hint)

    def _released(self, host: str) -> None:
        """Not sampled any more: its badge, no longer current, goes (its probe summary stays)."""
        if not self.window.manager.is_slurm(host):
            self.window.hosts_panel.set_gpu_summary(host, "")

    def _waiting(self, host: str, text: str) -> None:
        if text == NOT_CONNECTED_TEXT:  # dropped from the pool (a failed Test connection): no badge
            self.window.hosts_panel.set_gpu_summary(host, "")
        if self.tab is not None and host in self._tab_hosts:
            self.tab.show_waiting(host, text)
