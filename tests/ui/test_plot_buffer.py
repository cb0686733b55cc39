import numpy as np

from ddpgui.ui.plots.buffer import SeriesBuffer, SmoothedBuffer, ema


def test_appending_1e5_points_keeps_every_point_as_float64():
    buffer = SeriesBuffer(capacity=16)
    for i in range(100_000):
        buffer.append(i, i * 0.5)
    assert len(buffer) == 100_000
    assert buffer.x.dtype == np.float64 and buffer.y.dtype == np.float64
    np.testing.assert_array_equal(buffer.x, np.arange(100_000, dtype=np.float64))
    np.testing.assert_array_equal(buffer.y, np.arange(100_000) * 0.5)
    assert buffer.capacity == 131072  # doubled from 16, not grown per point


def test_extend_and_append_agree():
    a, b = SeriesBuffer(4), SeriesBuffer(4)
    xs = np.arange(1000, dtype=np.int64)
    a.extend(xs, xs ** 2)
    for x in xs:
        b.append(x, x ** 2)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    assert a.x.dtype == np.float64


def test_smoothed_buffer_matches_a_full_recompute():
    values = np.random.default_rng(0).normal(size=500)
    values[10] = np.nan
    incremental = SmoothedBuffer(capacity=8, alpha=0.2)
    for i, v in enumerate(values[:300]):
        incremental.append(i, v)
    incremental.extend(np.arange(300, 500), values[300:])
    np.testing.assert_allclose(incremental.smooth.y, ema(values, 0.2))
    incremental.set_alpha(1.0)
    np.testing.assert_allclose(incremental.smooth.y[11:], values[11:])
