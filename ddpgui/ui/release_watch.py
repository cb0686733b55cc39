"""The app's side of release when idle (core/hosts/release.py; the host decides, remote_runner/release.py).

For each SSH host whose profile has a release action and that is connected (in the run manager's
:class:`~ddpgui.core.targets.pool.TargetPool`), the host's ``release-status`` is asked on a worker every
:attr:`ReleaseWatch.poll_s` seconds, and what the host said at each new connection (the pool sends the action then)
is taken at once: a release that failed while the app was away is said at the next connection.  The countdown is
kept running between two answers from the host's ``release_at`` (its clock's offset allowed for).  Cancel calls
``release-cancel`` on a worker.  Saving a changed action in the host dialog sends it (:meth:`ReleaseWatch.sent`)
when the host is connected, else says it goes at the next connection.

An action that runs on this computer (``sky down -y CLUSTER``) is run here when the host says it is due: after a
notice of :attr:`ReleaseWatch.notice_s` seconds with Cancel, on a worker (the host asked once more that it is still
due), its outcome in words.  It runs once per due period: a failure is said, not tried again by itself.
"""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from ddpgui.core.errors import describe
from ddpgui.core.hosts import HostStore
from ddpgui.core.hosts.release import ReleasePolicy

from .texts import without_class_name
from .widgets.release_rows import ReleaseView, clock, failure_words, release_view

#: Seconds a local release action may run.
LOCAL_TIMEOUT_S = 600


def run_here(command: str) -> tuple[int | None, str]:
    """Run a release action on this computer with the user's shell: (exit code or None past its time, output)."""
    try:
        proc = subprocess.run(command, shell=True, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=LOCAL_TIMEOUT_S, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        return None, f"{exc.output or ''}(no end after {LOCAL_TIMEOUT_S} s)"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


class ReleaseWatch(QObject):
    """``targets``: the run manager's TargetPool; ``start``: a WorkerPool's ``start``.  ``changed(host)``: the
    host's line (:meth:`view`) changed."""

    changed = Signal(str)
    #: Seconds between two ``release-status`` asked of a connected host.
    poll_s = 30.0
    #: Seconds of notice before an action on this computer runs.
    notice_s = 60.0

    def __init__(self, hosts: HostStore, targets, start: Callable, parent=None):
        super().__init__(parent)
        self.hosts, self.targets, self._start = hosts, targets, start
        self.status: dict[str, dict] = {}  # host → its last answer
        self._skew: dict[str, float] = {}  # host → this computer's clock minus the host's
        self._asked: dict[str, float] = {}  # host → when it was last asked (monotonic)
        self._taken: dict[str, object] = {}  # host → the pool's answer at connection already taken
        self._in_flight: set[str] = set()  # hosts with a status call under way
        #: host → (what the app said, kept across the host's answers while due, until when: monotonic or None)
        self._notes: dict[str, tuple[ReleaseView, bool, float | None]] = {}
        self._notice: dict[str, float] = {}  # host → when its local action runs (monotonic)
        self._handled: dict[str, float | None] = {}  # host → release_at of the due period run or held here
        self._clear: set[str] = set()  # action removed while not connected: cleared at the next connection
        self._views: dict[str, ReleaseView | None] = {}
        self.timer = QTimer(self, interval=1000)
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    # ---- what a host's line says ------------------------------------------------------------
    def view(self, name: str) -> ReleaseView | None:
        return self._views.get(name)

    def _compute(self, name: str, connected: bool) -> ReleaseView | None:
        display = self.hosts.get(name).display_name if name in self.hosts else name
        if name in self._notice:
            left = max(0, round(self._notice[name] - time.monotonic()))
            policy = self.hosts.get(name).release
            return ReleaseView(f"{display}: release due: runs on this computer in {left} s",
                               "The host has been idle long enough: its release action runs here unless you "
                               "cancel it.\n" + "\n".join(self._tip(name)), "warn", True, repr(policy.command))
        note = self._notes.get(name)
        if note is not None:
            return note[0]
        status = self.status.get(name)
        if status is None:
            return None
        price = self.hosts.get(name).price_per_hour if name in self.hosts else None
        return release_view(display, status, price, time.time() - self._skew.get(name, 0.0), connected)

    def _tip(self, name: str) -> list[str]:
        status = self.status.get(name)
        return [] if status is None else release_view("", status, None, time.time()).tip.splitlines()

    def _show(self, name: str, connected: bool | None = None) -> None:
        connected = self.targets.connected(name) if connected is None else connected
        view = self._compute(name, connected)
        if view != self._views.get(name):
            self._views[name] = view
            self.changed.emit(name)

    def _say(self, name: str, text: str, tone: str = "muted", tip: str = "", cancel: bool = False,
             keep: bool = False, for_s: float | None = None, detail: str = "") -> None:
        """A line of the app's own about ``name``, shown until the host's next answer (``keep``: kept across
        answers while the host says it is due; ``for_s``: gone after so many seconds)."""
        display = self.hosts.get(name).display_name if name in self.hosts else name
        until = None if for_s is None else time.monotonic() + for_s
        self._notes[name] = (ReleaseView(f"{display}: {text}", tip or text, tone, cancel, detail), keep, until)
        self._show(name)

    # ---- the timer --------------------------------------------------------------------------
    def tick(self) -> None:
        """Every second: take what hosts said at a new connection, ask connected hosts that are due a poll, run or
        drop local actions whose notice ended, keep the countdowns' lines current."""
        for profile in self.hosts.profiles():
            name = profile.name
            if profile.is_local or profile.is_slurm:
                continue
            connected = self.targets.connected(name)
            if connected and name in self._clear:
                self._clear.discard(name)
                self._call(name, "set", None)
            elif connected and profile.release is not None:
                pushed = self.targets.release_state(name)
                if pushed is not None and pushed is not self._taken.get(name):
                    self._taken[name] = pushed  # what the host said at this connection
                    self._answer(name, "connect", pushed)
                elif name not in self._in_flight and time.monotonic() - self._asked.get(name, -1e9) >= self.poll_s:
                    self._call(name, "status")
            note = self._notes.get(name)
            if note is not None and note[2] is not None and time.monotonic() >= note[2]:
                del self._notes[name]
            if profile.release is None and name in self.status and name not in self._notes:
                del self.status[name]  # the action was removed: nothing more to say
            self._local_step(name, profile.release, connected)
            self._show(name, connected)
        for name in [n for n in self._views if n not in self.hosts]:  # a host deleted
            self._views.pop(name)
            self.changed.emit(name)

    def close(self) -> None:
        self.timer.stop()
        self._notice.clear()

    # ---- calls to the host ------------------------------------------------------------------
    def _call(self, name: str, what: str, policy: dict | None = None) -> None:
        """``release-status`` / ``-cancel`` / ``-set`` on a worker; an answer older than the one shown (by the host's
        clock) is dropped."""
        if what == "status":
            self._in_flight.add(name)
        self._asked[name] = time.monotonic()

        def work() -> dict:
            target = self.targets.target(name)
            return target.release_set(policy) if what == "set" else getattr(target, f"release_{what}")()

        self._start(work, on_return=lambda status: self._answer(name, what, status),
                    on_error=lambda exc: self._failed(name, what, exc),
                    on_finish=lambda: self._in_flight.discard(name) if what == "status" else None)

    def _answer(self, name: str, what: str, status: dict) -> None:
        if float(status.get("now") or 0) < float((self.status.get(name) or {}).get("now") or 0):
            return  # an older look of the host's (what it said at the connection, taken after a Cancel's answer)
        self._asked[name] = time.monotonic()
        self._skew[name] = time.time() - float(status.get("now") or time.time())
        self.status[name] = status
        note = self._notes.get(name)
        if note is not None and not (note[1] and status.get("phase") == "due"):
            del self._notes[name]  # the host's answer is newer than what the app said
        if what == "set" and status.get("policy") is None:
            self._say(name, "the release action was removed from the host: it is never released", for_s=60)
        elif what == "set":  # the host's answer, said as such until the next one
            view = release_view("", status, None, time.time() - self._skew[name])
            self._say(name, "release action set on the host: " + view.text.removeprefix(": "),
                      "ok" if view.tone in ("", "muted") else view.tone, view.tip, view.cancel, detail=view.detail)
        self._show(name)

    def _failed(self, name: str, what: str, exc: BaseException) -> None:
        message, hint = describe(exc)
        words = without_class_name(message) + (f" ({hint})" if hint else "")
        if what == "cancel":
            self._say(name, f"the release was NOT cancelled: {words}", "error", cancel=True)
        elif what == "set":
            self._say(name, f"the release action was not sent ({words}); it goes to the host at its next "
                            "connection", "error")
        elif name in self.status and not (self._notes.get(name) or (None, False))[1]:  # a poll: said with its age
            last = self.status[name]
            due = last.get("phase") == "due" or float(last.get("release_at") or 1e18) <= time.time() - self._skew.get(
                name, 0.0)
            since = clock(float(last.get("now") or time.time()) + self._skew.get(name, 0.0))
            self._say(name, f"no answer since {since}: its release was due, it may be released" if due
                      else f"could not ask the host at {clock(time.time())}: {words}", "muted",
                      tip="\n".join([words, *self._tip(name)]))

    def cancel(self, name: str) -> None:
        """Hold the host's release until it is used again (and drop a local action's notice)."""
        if self._notice.pop(name, None) is not None:
            self._handled[name] = (self.status.get(name) or {}).get("release_at")
        self._notes.pop(name, None)
        self._call(name, "cancel")
        self._show(name)

    def sent(self, name: str, policy: ReleasePolicy | None) -> None:
        """The host dialog saved a changed action for ``name``: sent now when connected, else at the next
        connection."""
        self._notice.pop(name, None)
        self._handled.pop(name, None)
        if self.targets.connected(name):
            self._clear.discard(name)
            self._call(name, "set", policy.for_host(name) if policy is not None else None)
            self._say(name, "sending the release action to the host…")
        elif policy is None:
            self._clear.add(name)
            self._say(name, "release action removed; the host keeps its old one until the app reaches it "
                            "(Test connection sends the change)")
        else:
            self.status.pop(name, None)
            self._say(name, "release action saved: it is sent to the host at its next connection (Test "
                            "connection, a launch)")

    # ---- an action on this computer ------------------------------------------------------------
    def _local_step(self, name: str, policy: ReleasePolicy | None, connected: bool) -> None:
        status = self.status.get(name) or {}
        due = connected and status.get("phase") == "due" and policy is not None and policy.on == "local" \
            and (status.get("policy") or {}).get("command") == policy.command
        if name in self._notice:
            if not due:  # used again, cancelled elsewhere, not connected any more: not run
                del self._notice[name]
            elif time.monotonic() >= self._notice[name]:
                del self._notice[name]
                self._run_local(name, policy, status.get("release_at"))
        elif due and self._handled.get(name, -1.0) != status.get("release_at"):
            self._notice[name] = time.monotonic() + self.notice_s

    def _run_local(self, name: str, policy: ReleasePolicy, release_at: float | None) -> None:
        self._handled[name] = release_at
        self._say(name, f"releasing: {policy.command!r} runs on this computer…", "warn", keep=True)

        def work() -> tuple[str, dict, int | None, str]:
            status = self.targets.target(name).release_status()  # still due? (a run may have started since)
            if status.get("phase") != "due":
                return "not due", status, None, ""
            return ("ran", status, *run_here(policy.command))

        def done(result: tuple[str, dict, int | None, str]) -> None:
            outcome, status, code, output = result
            self.status[name] = status
            if outcome == "not due":
                self._notes.pop(name, None)
                self._say(name, f"not released: the host is no longer idle ({status.get('phase')})")
                return
            if code == 0:
                self._say(name, f"released at {clock(time.time())} from this computer", "ok",
                          tip=output or "no output", keep=True, detail=f"{policy.command!r} ran here")
            else:
                why = failure_words(code, output.splitlines()[-3:])
                self._say(name, "release FAILED on this computer: run it by hand, or Cancel to hold it", "error",
                          tip=f"{policy.command!r} ran on this computer and failed:\n{output or 'no output'}",
                          cancel=True, keep=True, detail=f"{why}: {policy.command!r}")

        self._start(work, on_return=done, on_error=lambda exc: self._say(
            name, "not released: the host could not be asked again before the release ("
                  + without_class_name(describe(exc)[0]) + ")", "error", keep=True))
