"""Under the hosts list: a line per host whose release has something to say ("gpu-1: releases in 12 min" with
its Cancel, a release that failed in the error colour, what the last release did and the idle time it saved), the
host's own words (``release-status`` in lines) as its tooltip.  A line is elided at the panel's edge (the hosts list
keeps its height): what matters comes first, why a release failed on a second line, the rest in the tooltip.  :func:`release_view`
puts a host's answer in that line; the rows only show what :class:`~ddpgui.ui.release_watch.ReleaseWatch` gives
them."""
from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QToolButton, QVBoxLayout, QWidget

from ddpgui.core.hosts.release import countdown_text, minutes_text, status_text

from .slurm_view import ElidedLabel

TONES = {"": "", "muted": "color: #5f6368;", "ok": "color: #188038;", "warn": "color: #b06000; font-weight: 600;",
         "error": "color: #d93025; font-weight: 600;"}
CANCEL_TIP = "Hold this host's release until it is used again (a run or a queued cell): nothing is released"


@dataclass(frozen=True)
class ReleaseView:
    """A host's release line: its ``text`` (the host's name first), a ``detail`` line under it (why a release
    failed), ``tip`` (the host's words), ``tone`` (a key of :data:`TONES`) and whether Cancel is offered."""

    text: str
    tip: str = ""
    tone: str = ""
    cancel: bool = False
    detail: str = ""


def clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t)) if abs(time.time() - t) < 20 * 3600 else \
        time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def failure_words(code: int | None, output: list[str]) -> str:
    """Why a release failed, shortly: "exit 3: no such pod", "no end in its time limit: ..."."""
    return ("no end in its time limit" if code is None else f"exit {code}") + f": {' / '.join(output) or 'no output'}"


def release_view(display: str, status: dict, price: float | None, now: float, connected: bool = True
                 ) -> ReleaseView:
    """The line of a host's ``release-status`` answer (``now`` on the host's clock)."""
    phase = status.get("phase")
    tip = "\n".join(status_text(status, price, now))
    last = status.get("last") or {}
    cancel = phase in ("idle", "failed", "collecting", "due")
    tone, detail = "", ""
    if not status.get("policy") or phase == "off":
        text, tone = "the release action is not set on the host yet (it is sent at each connection)", "muted"
    elif phase in ("failed", "gave_up"):
        why = failure_words(last.get("exit_code"), last.get("output") or [])
        if phase == "failed":
            text = f"release FAILED at {clock(float(last['at']))}; " + countdown_text(status, now).replace(
                "releases in", "retry in")
            detail = f"{why}: {last.get('command')!r}"
        else:
            text = f"release FAILED {status.get('attempts') or 'every'} times, last at {clock(float(last['at']))}"
            detail = f"{why}: release it by hand (none until the host is used again)"
        tone = "error"
    elif phase == "released":
        text, tone = f"released at {clock(float(status['released_at']))}", "ok"
        if price and last.get("ok"):
            saved = max(0.0, now - float(last["at"]))
            minutes = round(saved / 60) if saved >= 60 else saved / 60
            text += f"; {minutes_text(minutes)} idle saved, {price * saved / 3600:.2f} at {price:g}/h"
        detail = f"by {last.get('command')!r}"
    else:
        text = countdown_text(status, now)
        tone = {"busy": "muted", "cancelled": "muted", "collecting": "muted", "due": "warn"}.get(phase, "")
    if not connected:
        text += f" (as of {clock(float(status.get('now') or now))}; not connected)"
        tone, cancel = ("muted" if tone == "" else tone), False
    return ReleaseView(f"{display}: {text}", tip, tone, cancel, detail)


class ReleaseRows(QWidget):
    """The lines, one per host, in the order they first spoke; hidden while none has anything to say."""

    cancel_requested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="release_rows")
        self.rows: dict[str, tuple[QWidget, _Line, _Line, QToolButton]] = {}
        self.views: dict[str, ReleaseView] = {}
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 2, 0, 2)
        self.layout_.setSpacing(0)
        self.setVisible(False)

    def set_view(self, name: str, view: ReleaseView | None) -> None:
        """Show ``view`` as ``name``'s line (None removes it)."""
        if view is None:
            row = self.rows.pop(name, None)
            self.views.pop(name, None)
            if row is not None:
                row[0].deleteLater()
            self.setVisible(bool(self.rows))
            return
        if name not in self.rows:
            self.rows[name] = self._row(name)
        _, label, detail, button = self.rows[name]
        self.views[name] = view
        whole = "\n".join(t for t in (view.text, view.detail) if t)
        for line, text in ((label, view.text), (detail, view.detail)):
            line.setText(text)
            line.setToolTip(whole if view.tip in ("", view.text) else f"{whole}\n{view.tip}")  # the lines whole
            line.setStyleSheet(TONES.get(view.tone, "") if line is label else TONES["muted"])
        detail.setVisible(bool(view.detail))
        button.setVisible(view.cancel)
        self.setVisible(True)

    def _row(self, name: str) -> tuple[QWidget, _Line, _Line, QToolButton]:
        row = QWidget(objectName=f"release_row_{name}")
        grid = QGridLayout(row)
        grid.setContentsMargins(2, 0, 0, 0)
        grid.setVerticalSpacing(0)
        label = _Line(objectName="release_text", textFormat=Qt.TextFormat.PlainText)
        detail = _Line(objectName="release_detail", textFormat=Qt.TextFormat.PlainText)
        button = QToolButton(objectName="release_cancel", text="Cancel", toolTip=CANCEL_TIP, autoRaise=True,
                             styleSheet="color: #1a73e8; text-decoration: underline;")
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.clicked.connect(lambda: self.cancel_requested.emit(name))
        grid.addWidget(label, 0, 0)
        grid.addWidget(button, 0, 1)
        grid.addWidget(detail, 1, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        self.layout_.addWidget(row)
        return row, label, detail, button

    def label(self, name: str) -> ElidedLabel | None:
        return self.rows[name][1] if name in self.rows else None

    def detail(self, name: str) -> ElidedLabel | None:
        return self.rows[name][2] if name in self.rows else None

    def button(self, name: str) -> QToolButton | None:
        return self.rows[name][3] if name in self.rows else None


class _Line(ElidedLabel):
    """One line elided at its end; its tooltip is the host's words (set with the line), never the line itself."""

    def _update_tip(self) -> None:
        pass
