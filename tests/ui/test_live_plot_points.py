"""A curve of one point draws no line: the live plot shows that point as a dot until a second one comes."""
from ddpgui.ui.plots.buffer import SeriesBuffer
from ddpgui.ui.plots.live_plot import LivePlot


def test_a_lone_point_is_a_dot_and_a_line_of_two_has_none(qtbot):
    plot = LivePlot()
    qtbot.addWidget(plot)
    plot.resize(400, 300)
    plot.show()
    buffer = SeriesBuffer()
    curve = plot.add_curve("loss", buffer, name="loss", color="#1f77b4")
    buffer.append(10.0, 0.00343)  # a script that logged its loss once
    plot.redraw()
    assert curve.opts["symbol"] == "o" and curve.opts["symbolBrush"].color().name() == "#1f77b4"
    assert list(plot.curve_data("loss")[1]) == [0.00343]
    buffer.append(11.0, 0.003)
    plot.mark_dirty("loss")
    plot.redraw()
    assert curve.opts["symbol"] is None and len(plot.curve_data("loss")[0]) == 2
