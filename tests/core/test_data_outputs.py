"""Data exports: tidy CSV equal to the store, summary CSV, booktabs LaTeX, and the JSON bundle round trip."""
import csv
import dataclasses
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from helpers.stored_runs import constant_run, store_run

from ddpgui.core import analysis
from ddpgui.core.outputs import export, tables
from ddpgui.core.outputs.bundle import BundleError, import_bundle, write_bundle
from ddpgui.core.outputs.points import ID_KEYS
from ddpgui.core.outputs.tables import format_interval, tex_escape
from ddpgui.core.store import RunStore

BASE = {"workload": "mlp", "nproc_per_node": 1, "compile": "off", "precision": "fp32", "steps": 10}


def _run_with_everything(store, run_id, rate, config, state="finished"):
    """A run with metrics (a null loss among them), GPU telemetry, events and both log tails."""
    metrics = [{"t": 50.0 + s, "phase": "train", "step": s, "loss": None if s == 4 else 2.0 / s,
                "samples_per_s": rate + (s % 3), "mem_peak_gib": 1.0 + 0.1 * s, "warmup": s <= 2}
               for s in range(1, 21)]
    telemetry = [{"t": 50.0 + i, "kind": "gpu", "gpu": 0, "name": "H100", "util_pct": 80 + i, "power_w": 250.5}
                 for i in range(4)] + [{"t": 51.0, "kind": "cpu", "cpu_pct": 12.5, "rss_gib": 0.5}]
    events = [{"event": "started", "t": 49.0}, {"event": "train_start", "t": 50.0, "world_size": 1},
              {"event": "warmup_done", "step": 2, "t": 52.0}, {"event": "finished", "t": 71.0}]
    store_run(store, run_id, config, metrics, telemetry, events, environment={"gpu": "H100", "torch": "2.5"},
              state=state)
    from ddpgui.core.runs.protocol import Chunk

    for spool, text in (("stdout.log", b"step 1\nstep 2\n"), ("stderr.log", b"\xff\xfebinary warning\n")):
        store.store_chunk(run_id, 0, Chunk(spool, 0, len(text), text))


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        yield s


@pytest.fixture
def comparison(store):
    _run_with_everything(store, "fast-1", 200.0, dict(BASE, seed=1, nproc_per_node=2))
    _run_with_everything(store, "fast-2", 210.0, dict(BASE, seed=2, nproc_per_node=2))
    _run_with_everything(store, "slow-1", 100.0, dict(BASE, seed=1))
    return analysis.compare([analysis.run_stats(store, r) for r in ("slow-1", "fast-1", "fast-2")])


def test_points_csv_rows_equal_the_store(store, comparison, tmp_path):
    written = export.write_data(comparison, store, tmp_path, ["csv"])
    assert [p.name for p in written.paths] == ["points.csv", "telemetry.csv", "series.csv", "summary.csv"]
    with open(tmp_path / "points.csv", newline="") as fh:
        rows = [(r["run"], r["step"], r["metric"], float(r["value"])) for r in csv.DictReader(fh)]
    expected = []
    for run_id in ("slow-1", "fast-1", "fast-2"):
        series = store.series(run_id)
        for key in sorted(k for k, v in series.items() if k not in ID_KEYS and v.dtype.kind == "f"):
            for i in np.flatnonzero(~np.isnan(series[key])):
                expected.append((run_id, str(int(series["step"][i])), key, float(series[key][i])))
    assert rows == expected and len(rows) == 3 * (20 + 19 + 20)  # samples_per_s, loss (one null), memory


def test_summary_csv_holds_the_comparison(store, comparison, tmp_path):
    path = tables.write_summary_csv(comparison, tmp_path / "summary.csv")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == tables.SUMMARY_COLUMNS
    fast = comparison.groups[1]
    tput = next(r for r in rows if r["level"] == "group" and r["label"] == "2×" and r["metric"] == "throughput")
    est = fast.metrics["throughput"]
    assert (float(tput["value"]), int(tput["n"]), tput["over"]) == (est.mean, 2, "repeats")
    # two repeats: no interval at all; the range of the two and what a claim needs
    assert (tput["ci95"], tput["low"], tput["high"]) == ("", "", "")
    assert (float(tput["min"]), float(tput["max"])) == est.range and "needs ≥ 3 repeats" in tput["interval"]
    assert tput["centre"] == "geometric mean"
    assert tput["runs"] == "fast-1 fast-2" and tput["unit"] == "samples/s"
    speed = next(r for r in rows if r["label"] == "2×" and r["metric"] == "speedup")
    assert float(speed["value"]) == comparison.speedup[fast.key].value
    # 2 repeats against a single baseline run: no interval (the run's own 18 intervals stay in its run rows)
    assert (speed["n"], speed["over"], speed["low"]) == ("2/1", "repeats", "") and "≥ 3 repeats" in speed["reason"]
    run_tput = next(r for r in rows if r["level"] == "run" and r["id"] == "slow-1" and r["metric"] == "throughput")
    assert (run_tput["n"], run_tput["over"]) == ("18", "intervals") and 0 < float(run_tput["low"])
    cost = next(r for r in rows if r["level"] == "run" and r["id"] == "slow-1" and r["metric"] == "cost")
    assert cost["value"] == "" and "price" in cost["reason"]
    energy = next(r for r in rows if r["level"] == "run" and r["id"] == "slow-1" and r["metric"] == "energy_j")
    assert float(energy["value"]) == pytest.approx(250.5 * 3)  # constant power over 3 s


def _tabular(text):
    body = text[text.index(r"\begin{tabular}"):text.index(r"\end{tabular}")]
    spec = re.match(r"\\begin\{tabular\}\{([lrc]+)\}", body).group(1)
    rows = [line.rstrip().removesuffix(r"\\").strip() for line in body.splitlines()[1:]
            if line.rstrip().endswith(r"\\")]
    return spec, rows


def test_latex_table_is_booktabs_with_one_bold_per_column(comparison, tmp_path):
    text = tables.write_latex_table(comparison, tmp_path / "summary.tex").read_text()
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert text.count(rule) == 1, rule
    assert text.index(r"\toprule") < text.index(r"\midrule") < text.index(r"\bottomrule")
    spec, rows = _tabular(text)
    cells = [row.split(" & ") for row in rows]
    assert all(len(c) == len(spec) for c in cells), cells
    header, body = cells[0], cells[1:]
    assert header[:2] == ["setting", "$n$"] and len(body) == 2
    for column in range(2, len(spec)):
        assert sum(r"\mathbf" in row[column] for row in body) == 1, header[column]
    col = header.index("throughput (samples/s)")
    assert r"\mathbf" in body[1][col]  # 2 processes are faster
    assert r"\mathbf" in body[0][header.index("peak memory (GiB)")]  # every run peaks at 3.0 GiB: a tie → first row
    assert body[1][0] == r"2$\times$" and body[1][1] == "2"
    assert "cost" not in header  # no host has a price: the column is left out


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (texlive is too big for CI); the table is checked as text")
def test_latex_table_compiles(comparison, tmp_path):
    table = tables.write_latex_table(comparison, tmp_path / "summary.tex")
    doc = tmp_path / "doc.tex"
    doc.write_text("\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n\\input{summary.tex}\n"
                   "\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert table.exists() and (tmp_path / "doc.pdf").exists()


def test_number_formatting_and_escaping():
    # the ends to 2 significant digits of the interval's width (2800 → hundreds), the centre to whole units
    assert format_interval(5327.4, 4100.3, 6900.2) == "$5327$ [$4100$, $6900$]"
    assert format_interval(0.123456, 0.119, 0.1275) == "$0.1235$ [$0.1190$, $0.1275$]"  # width 0.0085 → 4 places
    assert format_interval(5327.4, 5100.0, 5500.0, "()") == "$5327$ ($5100$--$5500$)"  # the range of 2 repeats
    assert format_interval(5.0) == "$5$" and format_interval(5.0, 5.0, 5.0) == "$5$"
    assert tex_escape("a_b & 50% #1 ×2") == r"a\_b \& 50\% \#1 $\times$2"


def test_bundle_round_trip(store, comparison, tmp_path):
    path = write_bundle(store, ["slow-1", "fast-1"], tmp_path / "runs.json")
    with RunStore(tmp_path / "other.sqlite3") as other:
        imported = import_bundle(other, path)
        assert [r.id for r in imported] == ["slow-1", "fast-1"]
        for run_id in ("slow-1", "fast-1"):
            before, after = dataclasses.asdict(store.get_run(run_id)), dataclasses.asdict(other.get_run(run_id))
            before.pop("updated_at"), after.pop("updated_at")
            assert after == before
            for spool in ("metrics.jsonl", "telemetry.jsonl", "events.jsonl"):
                assert other.records(run_id, spool) == store.records(run_id, spool), spool
            for spool in ("stdout.log", "stderr.log"):
                assert other.log_tail(run_id, spool) == store.log_tail(run_id, spool)
            assert other.log_tail(run_id, "stderr.log").startswith(b"\xff\xfe")
            mine, theirs = analysis.run_stats(store, run_id), analysis.run_stats(other, run_id)
            assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)


def test_bundle_with_a_run_already_in_the_store_is_refused_whole(store, comparison, tmp_path):
    path = write_bundle(store, ["slow-1", "fast-1"], tmp_path / "runs.json")
    with RunStore(tmp_path / "other.sqlite3") as other:
        constant_run(other, "fast-1", 5.0, BASE)
        with pytest.raises(BundleError, match="1 of the 2 runs in runs.json are already in the run store: fast-1") \
                as caught:
            import_bundle(other, path)
        assert "delete them first" in caught.value.hint
        assert [r.id for r in other.list_runs()] == ["fast-1"]  # nothing was imported
        assert other.records("fast-1")[0]["samples_per_s"] == 5.0  # and nothing changed


def test_bad_bundles_are_refused_with_a_hint(tmp_path, store):
    cases = [(b"{not json", "not JSON"), (b'{"format": "other", "runs": []}', "not a ddpgui run bundle"),
             (b'{"format": "ddpgui-runs", "version": 99, "runs": []}', "version 99"),
             (b'{"format": "ddpgui-runs", "version": 1, "runs": [{"record": {}}]}', "run 0 of the bundle")]
    for data, message in cases:
        path = tmp_path / "bad.json"
        path.write_bytes(data)
        with pytest.raises(BundleError, match=message) as caught:
            import_bundle(store, path)
        assert caught.value.hint
    with pytest.raises(BundleError, match="cannot read"):
        import_bundle(store, tmp_path / "missing.json")
    assert store.list_runs() == []


def test_an_active_run_is_imported_as_stopped(store, tmp_path):
    _run_with_everything(store, "live", 100.0, BASE, state="running")
    path = write_bundle(store, ["live"], tmp_path / "runs.json")
    assert json.loads(path.read_text())["runs"][0]["record"]["state"] == "running"
    with RunStore(tmp_path / "other.sqlite3") as other:
        (record,) = import_bundle(other, path)
        assert record.state == "stopped" and "while it was running" in record.message
        assert other.records("live") == store.records("live")


def test_unknown_data_format_is_refused(store, comparison, tmp_path):
    with pytest.raises(ValueError, match="unknown format docx: choose from csv, tex, json"):
        export.write_data(comparison, store, tmp_path / "out", ["csv", "docx"])
    assert not (tmp_path / "out").exists()
    assert export.write_data(comparison, store, tmp_path / "out", []).paths == []
