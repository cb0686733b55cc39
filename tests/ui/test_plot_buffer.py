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


def _spiky(n: int, spikes: np.ndarray) -> np.ndarray:
    y = np.sin(np.arange(n) / 5000.0)
    y[spikes] = 100.0
    y[spikes[::2] + 1] = -100.0
    return y


def test_envelope_keeps_every_spike_within_one_pixel_and_is_small():
    n, pixels = 1_000_003, 800
    spikes = np.sort(np.random.default_rng(1).choice(n - 2, 40, replace=False))
    buffer = SeriesBuffer(64)
    y = _spiky(n, spikes)
    for chunk in np.array_split(np.arange(n), 37):  # arrives in pieces, like a live run
        buffer.extend(chunk, y[chunk])
    for x0, x1 in ((0, n), (123_456, 123_456 + n / 8), (900_000, 900_400), (n - 5000, n + 10)):
        xs, ys = buffer.envelope(x0, x1, pixels)
        assert len(xs) <= 12 * pixels + 64, (x0, x1, len(xs))
        assert np.all(np.diff(xs) >= 0)
        # the curve's bounds are the data's, whatever the view (auto-range stays right)
        assert ys.max() == 100.0 and ys.min() == -100.0
        assert xs[0] == 0 and xs[-1] >= n - 1 - 8 ** 6
        width = (x1 - x0) / pixels
        for p in spikes[(spikes >= x0) & (spikes < x1)]:
            near = (xs <= p) & (xs >= p - width)
            assert (ys[near] == 100.0).any(), f"spike at {p} lost in view {x0}..{x1}"


def test_envelope_is_the_raw_series_when_small_or_not_monotonic():
    buffer = SeriesBuffer()
    buffer.extend(np.arange(100), np.arange(100) * 2.0)
    xs, ys = buffer.envelope(0, 100, 800)
    np.testing.assert_array_equal(xs, buffer.x)
    big = SeriesBuffer()
    x = np.arange(100_000, dtype=np.float64)
    x[500] = 3.0  # a step went backwards (a restarted script)
    big.extend(x, np.ones(100_000))
    assert not big.monotonic
    xs, _ = big.envelope(0, 100_000, 800)
    assert len(xs) == 100_000


def test_envelope_keeps_nan_gaps_and_survives_clear():
    buffer = SeriesBuffer()
    y = np.ones(50_000)
    y[10_000:20_000] = np.nan
    buffer.extend(np.arange(50_000), y)
    xs, ys = buffer.envelope(0, 50_000, 500)
    gap = (xs > 10_100) & (xs < 19_900)
    assert gap.any() and np.isnan(ys[gap]).all()
    buffer.clear()
    buffer.extend(np.arange(10_000), np.full(10_000, 7.0))
    _, ys = buffer.envelope(0, 10_000, 100)
    assert set(ys.tolist()) == {7.0}


def test_vectorised_ema_matches_the_definition():
    rng = np.random.default_rng(3)
    values = rng.normal(size=20_000)
    values[rng.choice(20_000, 300, replace=False)] = np.nan
    values[:3] = np.nan
    for alpha in (0.005, 0.1, 0.5, 0.99, 1.0):
        for start in (None, 2.5):
            acc, expected = start, []
            for v in values.tolist():  # the recurrence, written out
                if v == v:
                    acc = v if acc is None else alpha * v + (1 - alpha) * acc
                expected.append(np.nan if acc is None else acc)
            np.testing.assert_allclose(ema(values, alpha, start), expected, rtol=1e-9, atol=1e-12)
