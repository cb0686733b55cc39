"""The main window: hosts and launch on the left, runs table and live dashboard on the right."""
from __future__ import annotations

import json
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QSystemTrayIcon,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.errors import describe
from ddpgui.core.hosts import LOCAL, HostStore, host_display_name
from ddpgui.core.runs.manager import RunManager, RunUpdate
from ddpgui.core.runs.workers import launch_on_nodes, launch_run, probe_host
from ddpgui.core.ssh.known_hosts import HostKeyChanged, KnownHosts
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target
from remote_runner.status import FINAL_STATES

from .bridge import RunUpdates
from .dialogs.download_outputs import download_outputs
from .dialogs.host_key import ChangedHostKeyDialog
from .dialogs.parse_log import ParseLogDialog, try_reading
from .dialogs.sweep import SweepDialog
from .gpu_watch import GpuWiring
from .menus import build_menus
from .prompts import Prompts
from .stall_alerts import StallAlerts
from .texts import without_class_name
from .widgets.compare import CompareView
from .widgets.dashboard import Dashboard
from .widgets.gpus_tab import GpusTab
from .widgets.hosts_panel import HostsPanel
from .widgets.launch_panel import LaunchPanel
from .widgets.runs_table import RunsTable
from .widgets.side_panel import SidePanel, SidePanelToggle
from .widgets.sweeps_bar import SweepsBar
from .workers import WorkerPool

#: Minutes a priced host may sit idle before the app reminds that it still costs money.
IDLE_MINUTES_DEFAULT = 15


def _ids(value) -> list[str]:
    """Run ids saved as a JSON list (nothing when missing or unreadable)."""
    try:
        ids = json.loads(value) if value else []
    except (TypeError, ValueError):
        return []
    return [str(i) for i in ids] if isinstance(ids, list) else []


class MainWindow(QMainWindow):
    def __init__(self, store: RunStore | None = None, hosts: HostStore | None = None,
                 settings: QSettings | None = None, manager: RunManager | None = None,
                 known_hosts: KnownHosts | None = None):
        """Everything defaults to the user's own stores; tests pass private ones (``known_hosts`` too)."""
        super().__init__()
        self.setWindowTitle("ddpgui")
        self.setObjectName("main_window")
        self.settings = settings or QSettings("ddpgui", "ddpgui")
        self.store = store or RunStore()
        self.hosts = hosts or HostStore()
        self.prompts = Prompts(self)
        self.manager = manager or RunManager(self.store, self.hosts, lambda name: open_target(
            name, self.hosts, confirm_host_key=self.prompts.confirm_host_key, ask_secret=self.prompts.ask_secret,
            known_hosts=known_hosts))
        self.workers = WorkerPool()
        self.updates = RunUpdates(self.manager)
        self.tray: QSystemTrayIcon | None = None

        self.hosts_panel = HostsPanel(self.hosts, self.manager.targets, self.workers.start)  # release lines too
        self.hosts_panel.known_hosts = known_hosts  # the host dialog's Test trusts the keys the window trusts
        self.launch_panel = LaunchPanel()
        self.runs_table = RunsTable(self.store)
        self.dashboard = Dashboard(self.store, loader=self.workers.start)
        self.side_panel = SidePanel(self.hosts_panel, self.launch_panel)
        self.tabs = QTabWidget(objectName="main_tabs")
        self.tabs.addTab(self.dashboard, "Dashboard")
        runs_page = QWidget()
        QVBoxLayout(runs_page).addWidget(self.runs_table)
        self.tabs.addTab(runs_page, "Runs")
        self.compare = CompareView(self.store, self.hosts, self.settings, self.workers.start)
        self.tabs.addTab(self.compare, "Compare")
        self.gpus_tab = GpusTab()  # the selected host's GPUs, or every host's (fleet); sampled while shown
        self.tabs.addTab(self.gpus_tab, "GPUs")
        self.sweeps = SweepsBar(self.manager, self.workers.start)
        self.statusBar().addPermanentWidget(self.sweeps)
        self.store_banner = QLabel(objectName="store_banner", wordWrap=True, visible=False,
                                   styleSheet="color: #b3261e; font-weight: 600;")  # nothing is being kept: say so
        self.statusBar().addWidget(self.store_banner, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal, objectName="main_splitter")
        self.splitter.addWidget(self.side_panel)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([380, 1000])
        self.setCentralWidget(self.splitter)
        self.side_toggle = SidePanelToggle(self.side_panel, self.splitter, self.tabs, self.settings)  # Ctrl+B
        self.addAction(self.side_toggle)

        self.hosts_panel.host_selected.connect(self._host_selected)
        self.hosts_panel.nodes_selected.connect(lambda _: self._host_selected(self.hosts_panel.current()))
        self.hosts_panel.test_requested.connect(self.test_connection)
        self.hosts_panel.hosts_changed.connect(self._update_prices)
        self.hosts_panel.probed.connect(self.set_probe)  # saved after the host dialog's successful test
        self.launch_panel.launch_requested.connect(self.launch)
        self.runs_table.run_opened.connect(self.show_run)  # selecting alone never switches the tab
        self.runs_table.runs_selected.connect(self.dashboard.set_runs)
        self.runs_table.action_requested.connect(self.run_action)
        self.dashboard.stop_requested.connect(lambda run_id: self.stop_runs([run_id]))
        self.dashboard.series.message.connect(lambda text: self.statusBar().showMessage(text, 10000))
        self.dashboard.series.run_changed.connect(self.runs_table.model.update_run)  # a loss chosen: its summary
        self.launch_panel.reading.requested.connect(self.try_reading_log)
        self.updates.received.connect(self._on_update)
        self.sweeps.compare_requested.connect(self.compare_sweep)
        self.sweeps.first_run.connect(self.show_sweep_run)  # a sweep started here: its first run on the dashboard
        self.sweeps.progress_changed.connect(self.compare.on_sweep_progress)  # "(done)" in its chooser at once
        self.tabs.currentChanged.connect(lambda _: self.tabs.currentWidget() is self.compare and
                                         self.compare.refresh_sweeps())
        self.gpu = GpuWiring(self)  # hosts' GPUs sampled while somebody looks: badges, GPUs tab, launch form
        self.gpu_watch = self.gpu.watch
        self.gpu.attach_tab(self.gpus_tab)
        self._shortcuts()
        self._restore()
        self._update_prices()
        QTimer.singleShot(0, self._reattach)
        QTimer.singleShot(0, self.sweeps.check_resumable)
        self._last_contact: dict[str, float] = {}  # host → when the app last talked to it
        self._reminded: dict[str, float] = {}  # host → the last use it was reminded about
        self.idle_timer = QTimer(self, interval=60_000)
        self.idle_timer.timeout.connect(self.check_idle_hosts)
        self.idle_timer.start()
        self.stall_alerts = StallAlerts(self)  # "stalled?" in the table and header, notified once per stall
        build_menus(self)  # File, View, Sweeps, Settings, Help

    # ---- setup -----------------------------------------------------------------------------
    def _shortcuts(self) -> None:
        # their texts are what Help ▸ Keyboard shortcuts says of them (menus.shortcut_rows); Ctrl+Q: File ▸ Quit
        for keys, slot, text in (
                ("Ctrl+Return", self.launch_panel.request_launch, "Launch the run in the launch form"),
                ("Ctrl+.", lambda: self.stop_runs([self.dashboard.run_id] if self.dashboard.run_id else []),
                 "Stop the run on the dashboard"),
                ("F5", self.refresh, "Reload the runs and test the connection to the selected host"),
                ("Ctrl+F", self._focus_find, "Find in the log (Dashboard) or filter the runs (Runs)")):
            action = QAction(text, self, shortcut=QKeySequence(keys))
            action.triggered.connect(slot)
            self.addAction(action)

    def _restore(self) -> None:
        geometry = self.settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 860)
        state = self.settings.value("window/splitter")
        if state is not None:
            self.splitter.restoreState(state)
            self.side_toggle.restore()
        for name in self.hosts.names():
            cached = self.settings.value(f"probes/{name}")
            if cached:
                try:
                    self.hosts_panel.probes[name] = json.loads(cached)
                except ValueError:
                    pass
        last = self.settings.value("launch/settings")
        if last:
            try:
                self.launch_panel.apply_settings(json.loads(last))
            except (ValueError, TypeError, KeyError):
                pass
        self.dashboard.smoothing.setValue(int(self.settings.value("plots/smoothing", 60)))
        self.dashboard.log_y.setChecked(self.settings.value("plots/log_y", "false") in (True, "true"))
        self.dashboard.set_x_axis(str(self.settings.value("plots/x_axis", "step")))
        self.hosts_panel.reload(self.settings.value("hosts/last", "local"))
        self._host_selected(self.hosts_panel.current())
        self._restore_view()

    def _restore_view(self) -> None:
        """The selected runs (the current one first), the comparison's runs and the tab of the last session;
        runs deleted since are left out."""
        known = {r.id for r in self.runs_table.model.runs}
        selected = [r for r in _ids(self.settings.value("runs/selected")) if r in known]
        if selected:
            self.runs_table.select_runs(selected)
        compared = [r for r in _ids(self.settings.value("compare/runs")) if r in known]
        if compared:
            self.compare.set_runs(compared)
        self.tabs.setCurrentIndex(int(self.settings.value("window/tab", 0) or 0))

    def _save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/splitter", self.splitter.saveState())
        self.settings.setValue("hosts/last", self.hosts_panel.current())
        self.settings.setValue("launch/settings", json.dumps(self.launch_panel.settings()))
        self.settings.setValue("plots/smoothing", self.dashboard.smoothing.value())
        self.settings.setValue("plots/log_y", self.dashboard.log_y.isChecked())
        self.settings.setValue("plots/x_axis", self.dashboard.x_axis)
        self.settings.setValue("window/tab", self.tabs.currentIndex())
        self.settings.setValue("runs/selected", json.dumps(list(self.dashboard.run_ids)))
        self.settings.setValue("compare/runs", json.dumps(list(self.compare.run_ids)))
        self.settings.sync()

    def _update_prices(self) -> None:
        self.runs_table.model.prices = {p.name: p.price_per_hour for p in self.hosts.profiles() if p.price_per_hour}

    def _reattach(self) -> None:
        self.workers.start(self.manager.reattach, on_error=lambda exc: self.statusBar().showMessage(
            f"Could not reattach to running runs: {exc}", 10000))

    def _focus_find(self) -> None:
        if self.tabs.currentWidget() is self.dashboard:
            self.dashboard.log_find.setFocus()
        else:
            self.runs_table.find.setFocus()

    # ---- hosts -----------------------------------------------------------------------------
    def _host_selected(self, name: str) -> None:
        """The launch form follows the selected host (the current one when none is), or the selected hosts
        as the nodes of one run (``name``, the current host, is among them or the only one)."""
        nodes = self.hosts_panel.selected_nodes()
        profiles = [self.hosts.get(n) for n in nodes]
        left_out = []
        if len(profiles) > 1 and any(p.is_slurm for p in profiles):
            # a cluster's run is one job on its own nodes: it is never a node of an SSH multi-node run
            current = self.hosts.get(name) if name in nodes else profiles[0]
            kept = [current] if current.is_slurm else [p for p in profiles if not p.is_slurm]
            left_out = [p.display_name for p in profiles if p not in kept]
            profiles, nodes = kept, [p.name for p in kept]
        prices = [p.price_per_hour for p in profiles if p.price_per_hour]
        cluster = profiles[0].slurm if len(profiles) == 1 and profiles[0].is_slurm else None
        self.launch_panel.set_nodes(nodes, [self.hosts_panel.probes.get(n) for n in nodes],
                                    [p.display_name for p in profiles], sum(prices) if prices else None, cluster)
        if left_out:
            self.launch_panel.show_warnings([f"left out of this run: {', '.join(left_out)} (a Slurm cluster runs "
                                             "a job on its own nodes and is never a node of a run across hosts)"])

    def set_probe(self, name: str, probe: dict) -> None:
        """Remember a host's probe report (also used by tests with captured reports)."""
        self.hosts_panel.set_status(name, "reachable", probe=probe)
        self.settings.setValue(f"probes/{name}", json.dumps(probe))
        self.gpu.refresh()  # connected now: its GPUs are sampled for its badge
        if name in (self.hosts_panel.current(), *self.launch_panel.nodes):
            self._host_selected(self.hosts_panel.current())

    def probe_at_start(self) -> None:
        """Probe This computer on a worker (the app does at start, so the launch form offers what it can run
        from the first; tests build windows without it)."""
        self.test_connection(LOCAL, quiet=True)

    def start_gpu_watch(self, **options) -> None:
        """Sample the GPUs of the hosts looked at (the app does at start; tests build windows without it, so
        nothing samples); ``options``: ``interval_s``, ``grace_s`` of every host's monitor."""
        self.gpu.start(**options)

    def test_connection(self, name: str, quiet: bool = False) -> None:
        """Connect, check the host key and probe ``name`` on a worker; ``quiet``: no status-bar message."""
        self.hosts_panel.set_status(name, "checking", "connecting…")

        def done(probe: dict) -> None:
            self._last_contact[name] = time.time()
            self.set_probe(name, probe)
            problems = [p.get("message", "") for p in probe.get("problems") or [] if p.get("severity") == "error"]
            if not quiet:
                self.statusBar().showMessage(f"{host_display_name(name)}: reachable"
                                             + (f" — {problems[0]}" if problems else ""), 8000)

        def failed(exc: Exception) -> None:
            message, hint = describe(exc)  # in words: no exception class name
            self.hosts_panel.set_status(name, "error", without_class_name(message) + (f"\nHint: {hint}" if hint else ""))
            if isinstance(exc, HostKeyChanged):
                ChangedHostKeyDialog(name, str(exc), getattr(exc, "hint", ""), self).open()

        self.workers.start(probe_host, self.manager, name, on_yield=lambda text: self.hosts_panel.set_status(
            name, "checking", f"{text}…"), on_return=done, on_error=failed)

    # ---- runs ------------------------------------------------------------------------------
    def launch(self, settings: dict) -> None:
        nodes = list(self.launch_panel.nodes)
        host = nodes[0] if len(nodes) < 2 else " + ".join(nodes)
        cluster = self.launch_panel.cluster is not None
        self.settings.setValue("launch/settings", json.dumps(settings))
        self.launch_panel.set_busy(True, "connecting…")
        self.launch_panel.show_warnings([])

        def done(record) -> None:
            self.launch_panel.set_busy(False)
            self.runs_table.model.update_run(record)
            self.show_run(record.id)
            self.runs_table.select_run(record.id)
            job = ((record.environment or {}).get("slurm") or {}).get("job_id")
            shown = " + ".join(map(host_display_name, nodes))  # as the user reads it: This computer
            self.statusBar().showMessage(f"Submitted {record.name} to {shown} as Slurm job {job}" if cluster and job
                                         else f"Launched {record.name} on {shown}", 5000)

        def failed(exc: Exception) -> None:
            self.launch_panel.set_busy(False)
            self.launch_panel.show_error(exc)
            self.runs_table.model.reload()

        if len(nodes) > 1:
            self.workers.start(launch_on_nodes, self.manager, nodes, settings, self.launch_panel.post_progress,
                               on_yield=self.launch_panel.show_warnings, on_return=done, on_error=failed)
            return
        self.workers.start(launch_run, self.manager, host, settings, self.launch_panel.post_progress,
                           on_yield=self.launch_panel.show_warnings, on_return=done, on_error=failed)

    def try_reading_log(self, path: str) -> ParseLogDialog:
        """The launch form's Try reading a log…: ``path`` read on a worker with the form's regex and loss series;
        the series the user picks there becomes the form's Loss series."""
        reading = self.launch_panel.reading
        dialog = try_reading(self, self.workers.start, path, *reading.options())
        dialog.loss_chosen.connect(reading.loss_series.setText)
        return dialog

    def show_run(self, run_id: str) -> None:
        if run_id not in self.dashboard.run_ids:
            self.dashboard.set_run(run_id)
        self.tabs.setCurrentWidget(self.dashboard)

    def stop_runs(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            self.statusBar().showMessage(f"Stopping {run_id}…")
            self.workers.start(self.manager.stop, run_id, on_return=self.runs_table.model.update_run,
                               on_error=lambda exc: self.statusBar().showMessage(f"Stop failed: {exc}", 10000))

    def run_action(self, action: str, run_ids: list[str]) -> None:
        if action == "stop":
            self.stop_runs(run_ids)
        elif action == "rerun":
            run = self.store.get_run(run_ids[0])
            if len(run.hosts) > 1 and not self.manager.is_slurm(run.host):  # a cluster's run: one host, N nodes
                self.hosts_panel.select_nodes(run.hosts)
            else:
                self.hosts_panel.select(run.host)
            self.launch(dict(run.config, run_id=""))
        elif action == "duplicate":
            self.launch_panel.apply_settings(self.manager.duplicate(run_ids[0]))
            self.side_toggle.setChecked(True)  # the form it fills is in sight
            self.statusBar().showMessage("Settings copied into the launch form: edit them and press Launch", 8000)
        elif action == "compare":
            self.compare.add_runs(run_ids)
            self.tabs.setCurrentWidget(self.compare)
        elif action in ("logs", "pull"):  # pull: Download outputs…
            self.dashboard.open_logs(run_ids[0]) if action == "logs" else download_outputs(self, run_ids[0])
        elif action == "export":
            folder = QFileDialog.getExistingDirectory(self, "Export runs as CSV")
            if folder:
                from ddpgui.core.outputs.points import write_points_csv

                self.workers.start(write_points_csv, self.store, run_ids, Path(folder),
                                   on_return=lambda paths: self.statusBar().showMessage(
                                       f"Exported {', '.join(p.name for p in paths)} to {folder}", 8000))
        elif action == "delete":
            answer = QMessageBox.question(self, "Delete runs", f"Delete {len(run_ids)} run(s) from the store and "
                                          "their run folders on the hosts? This cannot be undone.")
            if answer == QMessageBox.StandardButton.Yes:
                for run_id in run_ids:
                    self.workers.start(self.manager.delete, run_id,
                                       on_return=lambda _, r=run_id: self._deleted(r),
                                       on_error=lambda exc: self.statusBar().showMessage(f"Delete failed: {exc}"))

    def new_sweep(self) -> SweepDialog:
        """The sweep dialog over the launch form's settings; Start hands the sweep to the sweeps bar."""
        dialog = SweepDialog(self.launch_panel.settings(), self.hosts, self.hosts_panel.current(), self,
                             probes=self.hosts_panel.probes)
        dialog.accepted.connect(lambda: self.sweeps.start(dialog.spec()))
        dialog.open()
        return dialog

    def show_sweep_run(self, run_id: str) -> None:
        """A sweep's first run once it has one: on the dashboard and selected in the runs table (its record read
        on a worker: the table may not have its row yet)."""
        def shown(record) -> None:
            self.runs_table.model.update_run(record)
            self.show_run(record.id)
            self.runs_table.select_run(record.id)

        self.workers.start(self.store.get_run, run_id, on_return=shown, on_error=lambda exc: None)

    def compare_sweep(self, sweep_id: str) -> None:
        """Compare the sweep's runs instead of what was compared (saved as compare/runs like any comparison)."""
        self.compare.compare_sweep(sweep_id)
        self.tabs.setCurrentWidget(self.compare)

    def _deleted(self, run_id: str) -> None:
        self.runs_table.model.remove_run(run_id)
        if run_id in self.dashboard.run_ids:
            self.dashboard.set_runs([r for r in self.dashboard.run_ids if r != run_id])

    def refresh(self) -> None:
        self.runs_table.model.reload()
        self.test_connection(self.hosts_panel.current())

    def _on_update(self, update: RunUpdate) -> None:
        if update.connection == "lost" and update.host:
            self.hosts_panel.set_status(update.host, "error", "connection lost; reconnecting…")
            return
        if update.store is not None:  # the run store cannot be written (said once), or works again ("")
            self.store_banner.setText(f"Runs are not being stored: {update.store}" if update.store else "")
            self.store_banner.setVisible(bool(update.store))
            return
        if update.run is not None:
            self.runs_table.model.update_run(update.run)
            if update.run.state in FINAL_STATES:
                self._notify(update.run)
            else:
                queued = update.run.state == "queued"
                for host in dict.fromkeys(update.run.hosts):
                    self.hosts_panel.set_status(host, "busy", "a job queued in Slurm" if queued else "running a run")
        self.dashboard.on_update(update)
        self.compare.on_update(update)

    def _notify(self, run) -> None:
        text = f"Run {run.name} {run.state}" + (f": {run.message}" if run.message else "")
        if not self.store.active_runs():
            for host in run.hosts:
                self.hosts_panel.set_status(host, "reachable", "idle")
        self.notify(text, warning=run.state == "failed")

    def notify(self, text: str, warning: bool = False, details: str = "") -> None:
        """A desktop notification (system tray when there is one) and the status bar; ``details`` (more lines)
        in the notification only."""
        self.statusBar().showMessage(text, 15000)
        if self.tray is None and QSystemTrayIcon.isSystemTrayAvailable():
            self.tray = QSystemTrayIcon(self.windowIcon(), self)
            self.tray.show()
        if self.tray is not None:
            icon = QSystemTrayIcon.MessageIcon.Warning if warning else QSystemTrayIcon.MessageIcon.Information
            self.tray.showMessage("ddpgui", text + (f"\n{details}" if details else ""), icon, 8000)

    # ---- idle priced hosts -----------------------------------------------------------------
    @property
    def idle_minutes(self) -> int:
        return int(self.settings.value("reminders/idle_minutes", IDLE_MINUTES_DEFAULT))

    def set_idle_minutes(self, minutes: int | None = None) -> None:
        if minutes is None:
            minutes, ok = QInputDialog.getInt(
                self, "Idle host reminder", "Remind me when a host with a price has run nothing for (minutes, "
                "0 = never):", self.idle_minutes, 0, 24 * 60)
            if not ok:
                return
        self.settings.setValue("reminders/idle_minutes", int(minutes))

    def check_idle_hosts(self) -> None:
        """Timer: on a worker, find priced hosts idle past the limit; remind once per idle period."""
        from ddpgui.core.runs.reminders import idle_priced_hosts

        def remind(idle: list) -> None:
            for host in idle:
                if self._reminded.get(host.host) == host.last_used:
                    continue
                self._reminded[host.host] = host.last_used
                self.hosts_panel.set_status(host.host, "reachable",
                                            f"idle {int(host.idle_s // 60)} min · still costing "
                                            f"{host.price_per_hour:g}/h")
                self.notify(host.message(), warning=True)

        self.workers.start(idle_priced_hosts, self.store, self.hosts.profiles(), self.idle_minutes,
                           dict(self._last_contact), on_return=remind)

    # ---- minimised, hidden, quitting -------------------------------------------------------
    def changeEvent(self, event) -> None:
        if event.type() == QEvent.Type.WindowStateChange:
            self.gpu.visibility_changed()  # minimised: no GPU sampling (after a grace); restored: again
        super().changeEvent(event)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.gpu.visibility_changed()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self.gpu.visibility_changed()

    def closeEvent(self, event) -> None:
        self.gpu.close()  # every sampler ends (its stdin closes): nothing is left on the hosts
        self._save_settings()
        self.prompts.close()
        self.dashboard.timer.stop()
        self.idle_timer.stop()
        self.stall_alerts.close()
        self.sweeps.close_runner()  # the sweep's runs go on; it stays resumable
        self.updates.close()
        self.workers.shutdown(3000)
        self.manager.close()
        super().closeEvent(event)
