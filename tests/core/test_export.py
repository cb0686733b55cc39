"""``ddpgui export RUN --format csv``: one tidy row per stored point, telemetry in its own file."""
import csv
import json

from ddpgui.cli import main
from ddpgui.core.runs.protocol import Chunk
from ddpgui.core.store import RunStore

METRICS = [{"seq": i, "t": 100.0 + i / 4, "step": i + 1, "phase": "train", "loss": None if i == 3 else 2.0 / (i + 1),
            "lr": 1e-3, "samples_per_s": 10.0 * i, "warmup": i < 2, "world_size": 2} for i in range(12)]
TELEMETRY = [{"seq": i, "t": 99.5 + i, "kind": "gpu" if i % 2 else "cpu", **({"gpu": 1, "util_pct": 50.0 + i}
              if i % 2 else {"cpu_pct": 12.5})} for i in range(6)]


def _store_run(path):
    path.parent.mkdir(parents=True)
    with RunStore(path) as store:
        store.create_run("20261130-000000-abcdef", name="a, b", hosts=["local"], run_dirs={0: "/x"})
        for spool, records in (("metrics.jsonl", METRICS), ("telemetry.jsonl", TELEMETRY)):
            data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
            store.store_chunk("20261130-000000-abcdef", 0, Chunk(spool, 0, len(data), data))


def test_export_writes_every_point_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    _store_run(tmp_path / "data" / "runs.sqlite3")
    assert main(["export", "20261130", "--format", "csv", "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "points.csv", newline="") as fh:
        points = list(csv.DictReader(fh))
    expected = {(r["step"], key, r[key]) for r in METRICS for key in ("loss", "lr", "samples_per_s")
                if r.get(key) is not None}
    assert {(int(p["step"]), p["metric"], float(p["value"])) for p in points} == expected
    assert len(points) == len(expected)
    assert {p["run"] for p in points} == {"20261130-000000-abcdef"} and points[0]["name"] == "a, b"
    assert min(float(p["time"]) for p in points) == 0.0 and points[0]["phase"] == "train"
    with open(tmp_path / "out" / "telemetry.csv", newline="") as fh:
        telemetry = list(csv.DictReader(fh))
    assert sorted((t["kind"], t["gpu"], t["metric"], float(t["value"])) for t in telemetry) == sorted(
        [("cpu", "", "cpu_pct", 12.5)] * 3 + [("gpu", "1", "util_pct", 50.0 + i) for i in (1, 3, 5)])
    assert str(tmp_path / "out" / "points.csv") in capsys.readouterr().out


def test_export_of_an_unknown_run_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    assert main(["export", "nope", "--out", str(tmp_path / "out")]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
