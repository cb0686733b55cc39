"""The main window's stall detection: a StallWatch over the window's RunManager, checked on a timer.

After each check the runs table and the dashboard header get every run's decision (``set_stalls``); a run that
becomes "stalled?" is notified once per stall, with the reason and its last output lines; when it clears the
status bar says so, nothing louder.  The thresholds are the settings ``stalls/<name>`` (Settings ▸ Stall
detection…); with automatic stop on, a run due is stopped on a worker, a warning event kept with it first.
"""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer

from ddpgui.core.runs.stall_watch import StallWatch
from ddpgui.core.runs.stalls import StallDecision, StallPolicy, StallPolicyError, auto_stop_message

#: How often the runs are judged (ms).
CHECK_MS = 2000
#: Output lines of the run shown in its notification.
NOTIFY_LINES = 5


def policy_from_settings(settings) -> StallPolicy:
    """The policy saved under ``stalls/<name>`` (defaults for the rest); raises StallPolicyError on a bad one."""
    return StallPolicy.from_dict({k: settings.value(f"stalls/{k}") for k in StallPolicy().to_dict()
                                  if settings.contains(f"stalls/{k}")})


def save_policy(settings, policy: StallPolicy) -> None:
    for key, value in policy.to_dict().items():
        settings.setValue(f"stalls/{key}", "" if value is None else value)  # "": no automatic stop
    settings.sync()


class StallAlerts(QObject):
    """Stall detection for ``window`` (a MainWindow: its manager, store, settings, workers, tables, notify)."""

    def __init__(self, window, interval_ms: int = CHECK_MS):
        super().__init__(window)
        self.window = window
        try:
            policy = policy_from_settings(window.settings)
        except StallPolicyError as exc:
            policy = StallPolicy()
            window.statusBar().showMessage(f"Stall detection: the saved {exc}; using the defaults (Settings ▸ Stall "
                                           "detection… to set them again)", 15000)
        self.watch = StallWatch(window.manager, policy, on_change=self._changed)
        self.notified: set[tuple[str, float | None]] = set()  # (run id, since) of each stall notified: once each
        self.flagged: set[str] = set()  # runs "stalled?" now
        self.timer = QTimer(self, interval=interval_ms)
        self.timer.timeout.connect(self.check)
        self.timer.start()

    @property
    def policy(self) -> StallPolicy:
        return self.watch.policy

    def set_policy(self, policy: StallPolicy) -> None:
        """Save ``policy`` under ``stalls/<name>`` and judge every run by it at once."""
        save_policy(self.window.settings, policy)
        self.watch.set_policy(policy)
        self.check()

    def open_settings(self):
        """Settings ▸ Stall detection…: the dialog (returned, open); OK applies its policy."""
        from .dialogs.stall_settings import StallSettingsDialog

        dialog = StallSettingsDialog(self.policy, self.window)
        dialog.accepted.connect(lambda: self.set_policy(dialog.policy))
        dialog.open()
        return dialog

    def check(self) -> dict[str, StallDecision]:
        """Judge every watched run; the table and header show the decisions; due automatic stops start."""
        decisions = self.watch.check()
        self.window.runs_table.set_stalls(decisions)
        self.window.dashboard.set_stalls(decisions)
        for run_id in self.watch.stops_due():
            decision = decisions.get(run_id) or self.watch.decision(run_id)
            if decision is not None:
                self._stop(run_id, decision)
        return decisions

    def close(self) -> None:
        self.timer.stop()
        self.watch.close()

    def _name(self, run_id: str) -> str:
        model = self.window.runs_table.model
        row = model.row_of(run_id)
        return (model.runs[row].name or run_id) if row >= 0 else run_id

    def _changed(self, run_id: str, decision: StallDecision) -> None:
        if decision.stalled:
            self.flagged.add(run_id)
            if (run_id, decision.since) in self.notified:
                return
            self.notified.add((run_id, decision.since))
            lines = "\n".join(decision.last_lines[-NOTIFY_LINES:])
            self.window.notify(f"Run {self._name(run_id)} stalled? {decision.reason}", warning=True,
                               details=f"Last lines:\n{lines}" if lines else "")
        elif run_id in self.flagged and decision.state in ("ok", "phase"):
            self.flagged.discard(run_id)
            self.window.statusBar().showMessage(f"Run {self._name(run_id)} is progressing again", 8000)

    def _stop(self, run_id: str, decision: StallDecision) -> None:
        message = auto_stop_message(decision, self.policy)
        store, manager = self.window.store, self.window.manager

        def stop():
            store.add_client_event(run_id, 0, {"event": "warning", "t": time.time(), "message": message})
            return manager.stop(run_id)

        self.window.notify(f"Run {self._name(run_id)} {message}", warning=True)
        self.window.workers.start(stop, on_return=self.window.runs_table.model.update_run,
                                  on_error=lambda exc: self.window.statusBar().showMessage(
                                      f"Automatic stop of {self._name(run_id)} failed: {exc}", 10000))
