"""The Compare tab's five plots, arranged so that each one can be read.

The densest arrangement in which every plot is at least :data:`MIN_PLOT_HEIGHT` px tall, its title fits in its
two lines (nothing elided) and each bar has room for its label wins: three columns (the loss curves two rows
high, the four others two by two), else two columns (the loss curves across the top), else one plot per tab.
It is chosen again when the area's size, a title or the number of bars changes.
"""
from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QStackedWidget, QTabWidget, QVBoxLayout, QWidget

from ..plots.bars import BarPlot

#: No plot is shorter than this (pixels): below it the axes, title and tick labels leave no data to read.
MIN_PLOT_HEIGHT = 150
#: Pixels under each bar for its label ("A" over "n=12") beside its neighbours', and for the y axis.
BAR_ROOM, AXIS_ROOM = 48, 70
#: The tab of each plot when they are shown one at a time (in the order they are given).
TAB_NAMES = ("Loss", "Throughput", "Memory", "Speedup", "Scaling")
SPACING = 6


@dataclass(frozen=True)
class Arrangement:
    """A grid of ``columns`` × ``rows``; ``cells[i]`` is plot i's (row, column, row span, column span)."""

    name: str
    columns: int
    rows: int
    cells: tuple[tuple[int, int, int, int], ...]

    def sizes(self, width: int, height: int) -> list[tuple[float, float]]:
        """Each plot's (width, height) in a grid of ``width`` × ``height`` px."""
        column = (width - SPACING * (self.columns - 1)) / self.columns
        row = (height - SPACING * (self.rows - 1)) / self.rows
        return [(column * cs + SPACING * (cs - 1), row * rs + SPACING * (rs - 1)) for _, _, rs, cs in self.cells]


THREE_COLUMNS = Arrangement("three columns", 3, 2, ((0, 0, 2, 1), (0, 1, 1, 1), (0, 2, 1, 1), (1, 1, 1, 1),
                                                     (1, 2, 1, 1)))
TWO_COLUMNS = Arrangement("two columns", 2, 3, ((0, 0, 1, 2), (1, 0, 1, 1), (1, 1, 1, 1), (2, 0, 1, 1),
                                                 (2, 1, 1, 1)))
GRIDS = (THREE_COLUMNS, TWO_COLUMNS)
TABS = "tabs"


def readable(plot: QWidget, width: float, height: float) -> bool:
    """Whether ``plot`` can be read at ``width`` × ``height`` px: tall enough, its title whole, its bars' labels
    side by side."""
    if height < MIN_PLOT_HEIGHT or not plot.fitted.fits(width):
        return False
    return not isinstance(plot, BarPlot) or width >= AXIS_ROOM + BAR_ROOM * len(plot.labels)


class ComparePlots(QWidget):
    """The plots in the densest readable arrangement, the colour key (``legend``) under them."""

    def __init__(self, plots: list[QWidget], legend: QLabel, parent=None):
        super().__init__(parent)
        self.plots = plots
        self.arrangement: Arrangement | str | None = None
        self.grid_page = QWidget(objectName="compare_plot_grid")
        self.grid = QGridLayout(self.grid_page)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(SPACING)
        self.tabs = QTabWidget(objectName="compare_plot_tabs", documentMode=True)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.grid_page)
        self.stack.addWidget(self.tabs)
        # one plot and its tab always fit: the splitter above the table never squeezes the plots below readable
        self.stack.setMinimumHeight(MIN_PLOT_HEIGHT + self.tabs.tabBar().sizeHint().height() + SPACING)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack, 1)
        layout.addWidget(legend)
        self.stack.installEventFilter(self)
        self.arrange()

    def choose(self, width: int, height: int) -> Arrangement | str:
        """The densest readable arrangement in an area of ``width`` × ``height`` px (:data:`TABS` when none)."""
        for grid in GRIDS:
            if all(readable(p, w, h) for p, (w, h) in zip(self.plots, grid.sizes(width, height))):
                return grid
        return TABS

    def arrange(self) -> None:
        """Lay the plots out as :meth:`choose` says for the area they have now (nothing moves when it is the same)."""
        chosen = self.choose(self.stack.width(), self.stack.height())
        if chosen == self.arrangement:
            return
        self.arrangement = chosen
        for plot in self.plots:  # out of the grid or the tabs, into the other
            self.grid.removeWidget(plot)
        while self.tabs.count():
            self.tabs.removeTab(0)
        if chosen == TABS:
            for plot, name in zip(self.plots, TAB_NAMES):
                self.tabs.addTab(plot, name)
            self.stack.setCurrentWidget(self.tabs)
        else:
            for c in range(3):
                self.grid.setColumnStretch(c, 1 if c < chosen.columns else 0)
                self.grid.setRowStretch(c, 1 if c < chosen.rows else 0)
            for plot, (row, column, rows, columns) in zip(self.plots, chosen.cells):
                self.grid.addWidget(plot, row, column, rows, columns)
                plot.show()
            self.stack.setCurrentWidget(self.grid_page)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.stack and event.type() == QEvent.Type.Resize:
            self.arrange()  # the tab, the splitter above the table or the colour key's lines changed its room
        return super().eventFilter(watched, event)

    def visible_plots(self) -> list[QWidget]:
        """The plots on screen now (all in a grid, the current tab's in tabs)."""
        return [self.tabs.currentWidget()] if self.arrangement == TABS else list(self.plots)
