"""Paper figures from constructed runs: PDF parses with TrueType fonts, SVG is XML with every label, PNG at its dpi."""
import xml.etree.ElementTree as ET

import numpy as np
import pypdf
import pytest
from helpers.stored_runs import store_run
from PIL import Image

from ddpgui.core import analysis
from ddpgui.core.outputs import figures
from ddpgui.core.outputs.figures import envelope
from ddpgui.core.store import RunStore

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "driver": "550.54.15", "cuda": "12.4", "torch": "2.5.1"}
CAPTION = "GPU 2× NVIDIA H100 80GB HBM3 · driver 550.54.15 · CUDA 12.4 · torch 2.5.1"
POINTS = 3000


def _metrics(rate: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    loss = 2.0 * np.exp(-np.arange(POINTS) / 800) + 0.3 + 0.02 * rng.standard_normal(POINTS)
    rates = rate * (1 + 0.01 * rng.standard_normal(POINTS))
    return [{"t": 1000.0 + 0.05 * i, "phase": "train", "step": i + 1, "loss": float(loss[i]),
             "samples_per_s": float(rates[i]), "mem_peak_gib": 2.0 + 0.5 * (rate > 150), "warmup": i < 5}
            for i in range(POINTS)]


def _telemetry() -> list[dict]:
    return [{"t": 1000.0 + i, "kind": "gpu", "gpu": g, "util_pct": 90, "power_w": 300.0} for i in range(5)
            for g in (0, 1)]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Four runs: 1 process and 2 processes, two repeats each, on an H100 host."""
    store = RunStore(tmp_path_factory.mktemp("store") / "runs.sqlite3")
    base = {"workload": "transformer", "compile": "default", "precision": "bf16", "steps": POINTS}
    for i, (nproc, rate) in enumerate([(1, 100.0), (1, 102.0), (2, 190.0), (2, 186.0)]):
        store_run(store, f"run{i}", dict(base, nproc_per_node=nproc, seed=i), _metrics(rate, i), _telemetry(),
                  environment=ENV)
    comparison = analysis.compare([analysis.run_stats(store, f"run{i}") for i in range(4)], baseline="run0")
    yield store, comparison
    store.close()


def test_groups_and_caption(compared):
    _, comparison = compared
    assert [g.label for g in comparison.groups] == ["1×", "2×"]
    assert figures.caption_text(comparison) == CAPTION
    assert figures.run_labels(comparison) == {"run0": "1× #1", "run1": "1× #2", "run2": "2× #1", "run3": "2× #2"}


def test_pdf_parses_with_embedded_truetype_fonts_and_metadata(compared, tmp_path):
    store, comparison = compared
    written = figures.write_figures(comparison, store, tmp_path, formats=["pdf"])
    assert sorted(p.name for p in written.paths) == sorted(f"{name}.pdf" for name in figures.FIGURES)
    assert written.skipped == {}
    for path in written.paths:
        raw = path.read_bytes()
        assert raw.startswith(b"%PDF-") and b"startxref" in raw[-200:] and raw.rstrip().endswith(b"%%EOF")
        reader = pypdf.PdfReader(path, strict=True)
        assert len(reader.pages) == 1
        box = reader.pages[0].mediabox
        # the width is the column's; the height grows only for the text block under the axes
        assert float(box.width) == pytest.approx(3.5 * 72) and 3.5 * 72 * 0.68 - 1e-6 <= float(box.height) < 3.5 * 72
        assert reader.metadata["/Subject"] == CAPTION and "CUDA 12.4" in reader.metadata["/Keywords"]
        fonts = reader.pages[0]["/Resources"]["/Font"]
        assert fonts, path
        for font in fonts.values():
            font = font.get_object()
            assert font["/Subtype"] in ("/TrueType", "/Type0"), (path, font["/Subtype"])  # never /Type3
            descriptor = font.get("/FontDescriptor") or font["/DescendantFonts"][0].get_object()["/FontDescriptor"]
            assert "/FontFile2" in descriptor.get_object(), "the TrueType font program is embedded"


def test_svg_is_xml_with_every_label_and_the_caption(compared, tmp_path):
    store, comparison = compared
    written = figures.write_figures(comparison, store, tmp_path, formats=["svg"], width="double", x="time")
    texts = {}
    for path in written.paths:
        root = ET.parse(path).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("width") == "504pt"
        texts[path.stem] = " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))
        description = root.find(".//{http://purl.org/dc/elements/1.1/}description")
        assert description is not None and CAPTION in "".join(description.itertext())
    for label in ("1× (n=2)", "2× (n=2)"):  # a group's repeats are one mean curve with its interval
        assert label in texts["loss"]
    for name in ("throughput", "memory", "speedup"):
        assert "1×" in texts[name] and "2×" in texts[name], name
    assert "time since the first logged step (s)" in texts["loss"]
    assert "peak memory (GiB)" in texts["memory"] and "samples/s" in texts["throughput"]
    assert "ideal" in texts["scaling"] and CAPTION in texts["loss"]


def test_png_resolution_and_text_chunk(compared, tmp_path):
    store, comparison = compared
    written = figures.write_figures(comparison, store, tmp_path, formats=["png"], figures=["throughput"], dpi=600,
                             caption=False)
    (path,) = written.paths
    with Image.open(path) as image:
        assert image.size[0] == round(3.5 * 600)
        assert image.info["dpi"] == pytest.approx((600, 600), abs=0.1)
        assert image.info["Description"] == CAPTION  # in the metadata even without the caption line
        assert image.info["Software"] == "ddpgui"


def test_no_caption_line_when_asked(compared, tmp_path):
    store, comparison = compared
    (path,) = figures.write_figures(comparison, store, tmp_path, formats=["svg"], figures=["memory"], caption=False).paths
    texts = " ".join("".join(t.itertext()) for t in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}text"))
    assert CAPTION not in texts and "peak memory" in texts


def test_figures_that_cannot_be_drawn_say_why(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as store:
        store_run(store, "solo", {"workload": "mlp", "nproc_per_node": 2}, _metrics(100.0, 0)[:50])
        comparison = analysis.compare([analysis.run_stats(store, "solo")])
        written = figures.write_figures(comparison, store, tmp_path / "out", formats=["png"])
    assert {p.stem for p in written.paths} == {"loss", "throughput", "memory"}
    assert "one setting only" in written.skipped["speedup"]
    assert "1-process" in written.skipped["scaling"]


def test_bad_arguments_are_refused(compared, tmp_path):
    store, comparison = compared
    for kwargs, message in (({"width": "triple"}, "width must be one of single, double"),
                            ({"x": "epoch"}, "x must be one of step, time"), ({"dpi": 10}, "dpi must be at least 72"),
                            ({"formats": ["pdf", "eps"]}, "unknown format eps"),
                            ({"figures": ["pie"]}, "unknown figure pie: choose from loss")):
        with pytest.raises(ValueError, match=message):
            figures.write_figures(comparison, store, tmp_path, **kwargs)


def test_styles_differ_in_colour_line_marker_and_hatch():
    styles = [figures._Style(i) for i in range(4)]
    for attr in ("color", "linestyle", "marker", "hatch"):
        assert len({getattr(s, attr) for s in styles}) == 4, attr
    assert set(figures.OKABE_ITO) == {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
                                      "#000000"}


def test_envelope_by_hand():
    x = np.arange(10.0)
    y = np.array([5.0, 1, 7, 3, 6, 2, 8, 0, 4, 9])
    # 2 columns over [0, 9]: x 0..4 → column 0, x 5..9 → column 1 (x / 9 · 2, floored, the last clipped)
    # column 0: first (0, 5), min (1, 1), max (2, 7), last (4, 6); column 1: first (5, 2), min (7, 0),
    # max (9, 9) which is also its last
    ex, ey = envelope(x, y, 2)
    assert ex.tolist() == [0, 1, 2, 4, 5, 7, 9] and ey.tolist() == [5, 1, 7, 6, 2, 0, 9]


def test_envelope_keeps_every_column_extent_and_joins():
    rng = np.random.default_rng(1)
    x = np.cumsum(rng.uniform(0.1, 1.0, 100_000))
    y = rng.standard_normal(100_000).cumsum()
    columns = 1050
    ex, ey = envelope(x, y, columns)
    assert len(ex) <= 4 * columns < len(x)
    col = np.clip(((x - x[0]) / (x[-1] - x[0]) * columns).astype(int), 0, columns - 1)
    ecol = np.clip(((ex - x[0]) / (x[-1] - x[0]) * columns).astype(int), 0, columns - 1)
    for c in rng.choice(np.unique(col), 50, replace=False):
        full, kept = y[col == c], ey[ecol == c]
        assert (kept.min(), kept.max(), kept[0], kept[-1]) == (full.min(), full.max(), full[0], full[-1])
    short_x, short_y = envelope(x[:100], y[:100], columns)  # few points: returned whole
    assert len(short_x) == 100
    nan_y = y[:10].copy()
    nan_y[3] = np.nan
    assert len(envelope(x[:10], nan_y, columns)[0]) == 9  # a null loss is not drawn
