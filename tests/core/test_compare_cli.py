"""``ddpgui compare`` and ``ddpgui import`` on real runs: three tiny torchrun jobs on this computer."""
import csv
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pypdf
import pytest

from ddpgui.cli import main
from ddpgui.core.analysis.curves import ema
from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target
from remote_runner.hooks import STEP_SECONDS_ENV

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The app's data dir holding three finished runs: mlp 1 process (seeds 0 and 1) and 2 processes."""
    data = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DDPGUI_DATA_DIR", str(data))
        mp.setenv(STEP_SECONDS_ENV, "0.02")  # a throughput that settles on a loaded machine: every figure has data
        hosts = HostStore(data / "hosts.json")
        with RunStore() as store, RunManager(store, hosts, lambda name: open_target(name, hosts)) as manager:
            ids = []
            for nproc, seed in ((1, 0), (1, 1), (2, 0)):
                record = manager.launch("local", {"workload": "mlp", "nproc_per_node": nproc, "steps": 60,
                                                  "seed": seed, "name": f"mlp {nproc}p seed {seed}"})
                final = manager.wait(record.id, timeout=240)
                assert final.state == "finished", (final.message, store.log_tail(record.id)[-2000:])
                ids.append(record.id)
        yield data, ids


@pytest.fixture
def app_data(data_dir, monkeypatch):
    data, ids = data_dir
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(data))
    return ids


def test_compare_writes_every_format(app_data, tmp_path, capsys):
    one_a, one_b, two = app_data
    out = tmp_path / "out"
    assert main(["compare", one_a, one_b[:-1], "mlp 2p seed 0", "--baseline", one_a, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out.split()
    names = {f"{f}.{e}" for f in ("loss", "throughput", "memory", "speedup", "scaling") for e in ("pdf", "svg", "png")}
    names |= {"points.csv", "telemetry.csv", "series.csv", "curves.csv", "summary.csv", "summary.tex", "runs.json"}
    assert {p.rsplit("/", 1)[-1] for p in printed} == names and all(p.startswith(str(out)) for p in printed)
    assert "1× (baseline)" in captured.err and "2×" in captured.err

    reader = pypdf.PdfReader(out / "speedup.pdf", strict=True)
    assert len(reader.pages) == 1 and "torch" in reader.metadata["/Subject"]
    svg = ET.parse(out / "loss.svg").getroot()
    text = " ".join("".join(t.itertext()) for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    for label in ("1× (n=2)", "2×"):  # repeats: one mean curve with its 95% interval
        assert label in text

    with RunStore() as store, open(out / "points.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
        for run_id in app_data:
            mine = [r for r in rows if r["run"] == run_id and r["metric"] == "loss"]
            assert [(int(r["step"]), float(r["value"])) for r in mine] == [
                (rec["step"], rec["loss"]) for rec in store.records(run_id)]
    with open(out / "summary.csv", newline="") as fh:
        summary = list(csv.DictReader(fh))
    groups = {r["label"] for r in summary if r["level"] == "group"}
    assert groups == {"1×", "2×"}
    repeats = next(r for r in summary if r["level"] == "group" and r["label"] == "1×" and r["metric"] == "final_loss")
    assert repeats["n"] == "2" and repeats["over"] == "repeats" and math.isfinite(float(repeats["value"]))
    tex = (out / "summary.tex").read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and "2$\\times$" in tex
    bundle = json.loads((out / "runs.json").read_text())
    assert [r["record"]["id"] for r in bundle["runs"]] == app_data


def test_compare_of_real_repeats_writes_curves_csv_with_their_n(app_data, tmp_path, capsys):
    ids = app_data
    out = tmp_path / "out"
    assert main(["compare", *ids, "--out", str(out), "--format", "curves,png"]) == 0
    printed = {p.rsplit("/", 1)[-1] for p in capsys.readouterr().out.split()}
    assert "curves.csv" in printed and "loss.png" in printed
    with open(out / "curves.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    repeats = [r for r in rows if r["group"] == "1×"]
    single = [r for r in rows if r["group"] == "2×"]
    assert repeats and single and len(repeats) + len(single) == len(rows)
    assert {r["n"] for r in repeats} == {"2"} and {r["n"] for r in single} == {"1"}
    assert all(r["ci_lo"] == r["ci_hi"] == "" for r in single)  # one run: no interval
    with RunStore() as store:
        losses = [{rec["step"]: rec["loss"] for rec in store.records(run_id) if rec.get("loss") is not None}
                  for run_id in ids[:2]]
    assert [int(r["x"]) for r in repeats] == sorted(losses[0]) == sorted(losses[1])
    # each run smoothed (TensorBoard's EMA, 0.6) before the centre: the geometric mean of two positive losses;
    # two repeats give no interval (an interval needs 3)
    smooth = [dict(zip(sorted(seed), ema(np.array([seed[k] for k in sorted(seed)]), 0.6))) for seed in losses]
    for r in repeats:
        a, b = (seed[int(r["x"])] for seed in smooth)
        assert float(r["mean"]) == pytest.approx(math.sqrt(a * b)) and r["centre"] == "geometric mean"
        assert r["ci_lo"] == r["ci_hi"] == "" and r["smoothing"] == "0.6"


def test_import_of_the_bundle_into_another_store_then_refused_twice(app_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert main(["compare", *app_data, "--format", "json", "--out", str(out)]) == 0
    assert [p.rsplit("/", 1)[-1] for p in capsys.readouterr().out.split()] == ["runs.json"]
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "elsewhere"))
    assert main(["import", str(out / "runs.json")]) == 0
    assert capsys.readouterr().out.count("imported ") == 3
    with RunStore() as store:
        assert sorted(r.id for r in store.list_runs()) == sorted(app_data)
        assert all(r.state == "finished" for r in store.list_runs())
    assert main(["import", str(out / "runs.json")]) == 2
    err = capsys.readouterr().err
    assert "already in the run store" in err and "hint: delete them first" in err


def test_compare_refuses_bad_requests(app_data, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["compare", app_data[0], "--format", "pdf,docx", "--out", out]) == 2
    assert "unknown format docx" in capsys.readouterr().err
    assert main(["compare", "--out", out]) == 2
    assert "hint: name runs" in capsys.readouterr().err
    assert main(["compare", "no-such-run", "--out", out]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    assert main(["compare", "--sweep", "nope", "--out", out]) == 2
    assert "no sweep 'nope'" in capsys.readouterr().err
    assert main(["compare", app_data[0], "--dpi", "10", "--out", out]) == 2
    assert "--dpi 10 is too low" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written for a refused request


def test_compare_a_sweep_takes_its_finished_runs(tmp_path, monkeypatch, capsys):
    from helpers.stored_runs import constant_run

    from ddpgui.core.store import SweepCell, SweepRecord

    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    base = {"workload": "mlp", "compile": "off", "precision": "fp32", "steps": 10}
    with RunStore() as store:
        store.create_sweep(SweepRecord("sw-1234", name="nproc sweep", hosts=["local"]),
                           [SweepCell("sw-1234", i) for i in range(3)])
        for i, (nproc, rate) in enumerate([(1, 100.0), (2, 190.0), (2, 0.0)]):
            constant_run(store, f"cell{i}", rate, dict(base, nproc_per_node=nproc))
            store.update_run(f"cell{i}", sweep_id="sw-1234", state="failed" if i == 2 else "finished")
        constant_run(store, "other", 50.0, base)  # not in the sweep
    out = tmp_path / "out"
    assert main(["compare", "--sweep", "nproc sweep", "--format", "csv", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "comparing 2 finished of its 3 runs" in captured.err
    with open(out / "summary.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["level"] == "group"]
    efficiency = next(r for r in rows if r["label"] == "2×" and r["metric"] == "scaling_efficiency")
    assert float(efficiency["value"]) == pytest.approx(190.0 / (2 * 100.0))  # T(2) / (2 · T(1))
    assert {r["runs"] for r in rows} == {"cell0", "cell1"}
    assert main(["compare", "--sweep", "sw-12", "--format", "tex", "--out", str(out)]) == 0
