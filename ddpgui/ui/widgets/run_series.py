"""A script run's series on the dashboard: where each came from, a run that gave no metric, the choice of its loss.

The run header's tooltip names each series' source as ``ddpgui show`` does
(:func:`~ddpgui.core.runs.series.run_series_lines`: the loss and where it came from, the other series by source,
the script's closing summary).  A script that ended with a ``no_metrics`` report says so in the header (a warning,
with its hint; the last lines it saw in the tooltip) and the loss plot says "no metric was read" instead of
waiting for points.  "Loss series" above the plots lists the run's series and makes another one its loss
(:func:`~ddpgui.core.runs.series.set_loss_series`, kept in the run store), or the one the script gave again.

Everything is read off the GUI thread (:func:`read_series_facts`, through the dashboard's loader) when the run is
shown, when the host names a new series or reports the run's end, and after a choice; the choice is set there too.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup, QColor, QPalette
from PySide6.QtWidgets import QLabel, QMenu, QToolButton

from ddpgui.core.runs.reported import script_reports, script_settings_lines, settings_warnings
from ddpgui.core.runs.series import (
    SeriesInfo,
    no_metrics,
    run_series_lines,
    series_info,
    set_loss_series,
    source_text,
)
from ddpgui.core.store import RunStore
from remote_runner.spools import EVENTS
from remote_runner.status import FINAL_STATES

from ..texts import as_rich
from .dashboard_header import STALL_COLOR, never_widening

#: Host events that change what the series facts say.
SERIES_EVENTS = frozenset({"series", "no_metrics", "script_summary", "script_reports"})
#: Runs whose series the host named (a script's, an imported TensorBoard folder's): they get the loss chooser.
NAMED_MODES = frozenset({"script", "imported"})
#: Series offered as the loss: any but the step the script printed (a counter, never a loss).
NEVER_LOSS = frozenset({"printed_step"})
#: The series the throughput plot draws.
RATE_SERIES = frozenset({"samples_per_s", "tokens_per_s"})
#: Characters per line of the tooltip's text (as ``ddpgui show`` wraps its lines).
TIP_WIDTH = 90
RESET_TEXT = "The one the script gave"


@dataclass
class SeriesFacts:
    """What the dashboard says of a run's series (read on a worker by :func:`read_series_facts`)."""

    run_id: str
    named: bool = False  # a script's or an imported run's: its series have sources, its loss can be chosen
    infos: list[SeriesInfo] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (label, text), as ``ddpgui show`` prints them
    no_metrics: dict | None = None
    chosen: str | None = None  # the stored series the user made the loss (None: the one the host gave)
    ended: bool = False
    #: "asked precision bf16, the script reports fp32 (…)": a setting given to the script that it reports otherwise
    mismatches: list[str] = field(default_factory=list)

    @property
    def loss(self) -> SeriesInfo | None:
        return next((i for i in self.infos if i.is_loss), None)

    @property
    def choices(self) -> list[SeriesInfo]:
        """The series that can be the loss: those with values, but the printed step."""
        return [i for i in self.infos if i.points and i.name not in NEVER_LOSS]


def read_series_facts(store: RunStore, run_id: str) -> SeriesFacts:
    """A run's series facts (Qt-free: runs on a worker).  A built-in workload's run has none unless its loss
    was chosen."""
    run = store.get_run(run_id)
    named = (run.config or {}).get("mode") in NAMED_MODES
    if not named and run.loss_series is None:
        return SeriesFacts(run_id)
    lines = run_series_lines(store, run_id, TIP_WIDTH)
    mismatches: list[str] = []
    if (run.config or {}).get("mode") == "script":  # what its settings became for it, what it reported
        reports = script_reports(store, run_id)
        lines += script_settings_lines(run.config, reports)
        mismatches = settings_warnings(run.config, reports)
    return SeriesFacts(run_id, named, series_info(store, run_id), lines, no_metrics(store, run_id),
                       run.loss_series, run.state in FINAL_STATES, mismatches)


def facts_html(facts: SeriesFacts | None) -> str:
    """The tooltip's part on the series: a table of ``ddpgui show``'s lines (label in bold), or ""."""
    if facts is None or not facts.lines:
        return ""
    rows = ""
    for label, text in facts.lines:  # wrapped here: a tooltip's table would not wrap a long line
        for i, part in enumerate(textwrap.wrap(text, TIP_WIDTH, break_long_words=True, subsequent_indent="  ")):
            rows += (f"<tr><td style='white-space:pre'><b>{as_rich(label if i == 0 else '')}</b>&nbsp;&nbsp;</td>"
                     f"<td style='white-space:pre'>{as_rich(part)}</td></tr>")
    return f"<table cellspacing='0' cellpadding='1'>{rows}</table>"


#: What an empty plot says of a run that ended before its first point, by the run's state.
NO_POINTS = {"failed": "no points: the run failed before its first step — see the log below",
             "stopped": "no points: the run was stopped before its first step"}
NO_POINTS_ENDED = "no points: the run ended before its first step — see the log below"


def ended_text(state: str) -> str | None:
    """What an empty plot says of a run in ``state`` (None while it may still log its first point)."""
    return NO_POINTS.get(state, NO_POINTS_ENDED) if state in FINAL_STATES else None


def placeholder_text(facts: SeriesFacts | None, state: str = "") -> str | None:
    """What the empty loss plot says of a run that gave no metric or ended before its first point (None: the
    plot's usual text)."""
    if facts is None or facts.no_metrics is None:
        return ended_text(state)
    hint = facts.no_metrics.get("hint") or ""
    return "no metric was read" + (f": {hint}" if hint else "")


def rate_placeholder(facts: SeriesFacts | None, state: str = "") -> str | None:
    """What the empty throughput plot says of an ended script or imported run that gave no throughput, or of a
    run that ended before its first point (None: the plot's usual text)."""
    if facts is None or not facts.named or not facts.ended:
        return ended_text(state)
    if facts.no_metrics is not None:  # the loss plot says why, in full
        return "no metric was read"
    if any(info.name in RATE_SERIES and info.points for info in facts.infos):
        return None
    return "no throughput: the script gave no samples_per_s or tokens_per_s"


def choice_label(info: SeriesInfo) -> str:
    """A series as the menu lists it: its name (the loss: the name it was read under), tab, where it came from
    (other sources counted: their names are in the item's tooltip, :func:`source_text`)."""
    name = info.from_ if info.is_loss and info.from_ else info.name
    more = len(info.also)
    return f"{name}\t{info.source or '-'}" + (f" (+{more} other source{'s' if more > 1 else ''})" if more else "")


class RunSeries(QObject):
    """The dashboard's part on a run's series: it owns the header's no-metric warning and the "Loss series"
    button, reads the facts of the primary run and sets a loss choice, each off the GUI thread."""

    #: A line for the status bar (a choice made or refused).
    message = Signal(str)
    #: The run's record after a choice (its summary's final and best loss follow the new loss).
    run_changed = Signal(object)

    def __init__(self, dashboard, read):
        """``dashboard``: the one it belongs to (its primary run, loss plot and header); ``read(func, *args,
        on_return=..., on_error=...)`` runs store work off the GUI thread."""
        super().__init__(dashboard)
        self.dashboard = dashboard
        self.read = read
        self.facts: SeriesFacts | None = None  # the primary run's, once read
        self.asked = 0  # reads asked for: only the newest one is kept
        self.warning = never_widening(QLabel(objectName="run_no_metrics", wordWrap=True, visible=False))
        palette = QPalette(self.warning.palette())
        palette.setColor(QPalette.ColorRole.WindowText, QColor(STALL_COLOR))  # a warning, not a failure's red
        self.warning.setPalette(palette)
        self.menu = QMenu(dashboard, objectName="loss_series_menu", toolTipsVisible=True)
        self.button = QToolButton(objectName="loss_series", text="Loss series", visible=False,
                                  popupMode=QToolButton.ToolButtonPopupMode.InstantPopup)
        self.button.setMenu(self.menu)
        self.menu.aboutToShow.connect(self.fill_menu)

    # ---- reading ---------------------------------------------------------------------------
    def show_run(self, run_id: str | None) -> None:
        """The primary run changed: forget the last one's facts and read this one's."""
        if self.facts is not None and self.facts.run_id == run_id:
            return
        self.facts = None
        trace = self.dashboard.traces.get(run_id) if run_id is not None else None
        if trace is None or trace.loaded:
            self.refresh(run_id)
        else:  # read once its trace is (the dashboard's load calls refresh)
            self._show()

    def refresh(self, run_id: str | None) -> None:
        """Read ``run_id``'s facts again (on a worker) if it is the primary run."""
        self.asked += 1
        asked = self.asked
        if run_id is None or run_id != self.dashboard.run_id:
            self._show()
            return

        def done(facts: SeriesFacts) -> None:
            if asked == self.asked and facts.run_id == self.dashboard.run_id:
                self.facts = facts
                self._show()

        self.read(read_series_facts, self.dashboard.store, run_id, on_return=done,
                             on_error=lambda exc: None)

    def on_update(self, run_id: str, update) -> None:
        """A live update of a shown run: read again when the host named a series, reported no metric or
        closed the script's summary, or when the run ended (its no-metric report comes just before)."""
        if run_id != self.dashboard.run_id:
            return
        events = update.records.get(EVENTS, ()) if update.node == 0 else ()
        ended = update.run is not None and update.run.state in FINAL_STATES
        if ended or any(e.get("event") in SERIES_EVENTS for e in events):
            self.refresh(run_id)

    # ---- showing ---------------------------------------------------------------------------
    def _show(self) -> None:
        facts = self.facts
        report = facts.no_metrics if facts is not None else None
        mismatches = facts.mismatches if facts is not None else []
        self.warning.setVisible(report is not None or bool(mismatches))
        texts = [f"Warning: {as_rich(text)}" for text in mismatches]
        if report is not None:
            hint = report.get("hint") or ""
            texts.insert(0, f"<b>{as_rich(report['message'])}</b>" + (f"<br>Hint: {as_rich(hint)}" if hint else ""))
            lines = report.get("last_lines") or []
            self.warning.setToolTip("<qt>The last lines it printed:<pre>" + as_rich("\n".join(lines)) + "</pre></qt>"
                                    if lines else "It printed nothing.")
        elif mismatches:
            self.warning.setToolTip("The setting reached the script, and the script's own start-up lines say "
                                    "otherwise: check how it reads that argument (the run header's tooltip shows "
                                    "what was passed and what it reported).")
        self.warning.setText("<br>".join(texts))
        choices = facts.choices if facts is not None and facts.named else []
        self.button.setVisible(bool(choices) or bool(facts and facts.chosen))
        loss = facts.loss if facts is not None else None
        self.button.setToolTip("Which of the run's series is its loss" + (
            f" (now {loss.from_ or loss.name}: {source_text(loss)})" if loss is not None else ""))
        self.show_placeholders()
        self.dashboard.loss_plot.getPlotItem().setTitle(
            f"Loss ({loss.from_})" if loss is not None and loss.from_ not in (None, "loss") else "Loss")
        self.dashboard.header_details(facts_html(facts))

    def show_placeholders(self) -> None:
        """What the empty loss and throughput plots say, by the primary run's facts and state (the dashboard calls
        this as it redraws its header: a run that fails before its first step says so)."""
        trace = self.dashboard.traces.get(self.dashboard.run_id) if self.dashboard.run_id else None
        ended = trace.live.state if trace is not None and trace.loaded else ""

        def state(buffer) -> str:  # the run's end is told where its plot has no point
            return ended if ended and not len(buffer) else ""

        self.dashboard.loss_plot.set_placeholder(placeholder_text(self.facts, state(trace.loss) if trace else ""))
        self.dashboard.rate_plot.set_placeholder(rate_placeholder(self.facts,
                                                                  state(trace.throughput) if trace else ""))

    def fill_menu(self) -> None:
        """The run's series, the loss checked; and the one the script gave (when another was chosen)."""
        self.menu.clear()
        facts = self.facts
        if facts is None:
            return
        group = QActionGroup(self.menu)
        for info in facts.choices:
            action = QAction(choice_label(info), self.menu, checkable=True, checked=info.is_loss)
            action.setObjectName(f"loss_choice:{info.name}")
            action.setToolTip(source_text(info))
            group.addAction(action)
            if not info.is_loss:
                action.triggered.connect(lambda _=False, name=info.name: self.choose(name))
            self.menu.addAction(action)
        self.menu.addSeparator()
        reset = self.menu.addAction(RESET_TEXT, lambda: self.choose(None))
        reset.setObjectName("loss_choice_reset")
        reset.setEnabled(facts.chosen is not None)
        reset.setToolTip("The series the host took as the loss when the run was read")

    # ---- choosing --------------------------------------------------------------------------
    def choose(self, name: str | None) -> None:
        """Make ``name`` the primary run's loss (None: the one the script gave), on a worker; then every curve
        and number of the run is read again."""
        facts = self.facts
        if facts is None:
            return
        run_id = facts.run_id

        def done(record) -> None:
            self.run_changed.emit(record)
            self.message.emit(f"{record.name}: the loss is now " + (
                f"{name} (your choice)" if name is not None else "the series the script gave"))
            self.dashboard.reload_run(run_id)

        def failed(exc: Exception) -> None:
            hint = getattr(exc, "hint", "")
            self.message.emit(f"Could not choose the loss: {exc}" + (f" ({hint})" if hint else ""))

        self.read(set_loss_series, self.dashboard.store, run_id, name, on_return=done, on_error=failed)
