"""The issue's check, as a user types it: ``ddpgui sweep`` with repeats, then ``ddpgui compare --sweep`` writes
curves.csv whose n is the number of repeats, with the mean and interval of the repeats' own logged losses."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from ddpgui.core.analysis.curves import ema
from ddpgui.core.store import RunStore

REPO = Path(__file__).resolve().parents[2]


def _cli(args, env, timeout):
    proc = subprocess.run([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_compare_of_a_sweep_with_three_repeats_writes_curves_csv_with_n_3(tmp_path):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    out = _cli(["sweep", "local", "--workload", "linear", "--steps", "12", "--warmup-steps", "2", "--batch-size", "8",
                "--repeats", "3", "--name", "three seeds"], env, timeout=400)
    assert "sweep done: 3 of 3 cells done" in out
    (sweep,) = json.loads(_cli(["sweeps", "--json"], env, timeout=60))

    _cli(["compare", "--sweep", sweep["id"], "--out", str(tmp_path / "out"), "--format", "curves"], env, timeout=120)
    with open(tmp_path / "out" / "curves.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["n"] for r in rows} == {"3"} and len({r["group"] for r in rows}) == 1

    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        runs = store.sweep_runs(sweep["id"])
        assert sorted(r.config["seed"] for r in runs) == [0, 1, 2]
        losses = [{rec["step"]: rec["loss"] for rec in store.records(r.id) if rec.get("loss") is not None}
                  for r in runs]
    assert [int(r["x"]) for r in rows] == sorted(losses[0])
    # each seed's losses smoothed (TensorBoard's debiased EMA, 0.6) before the centre; positive losses: the
    # geometric mean and SciPy's t-interval of the logs, back-transformed (docs/ANALYSIS.md)
    smooth = [dict(zip(sorted(seed), ema(np.array([seed[k] for k in sorted(seed)]), 0.6))) for seed in losses]
    positive = all(v > 0 for seed in smooth for v in seed.values())
    for r in rows:
        values = np.array([seed[int(r["x"])] for seed in smooth])
        data = np.log(values) if positive else values
        lo, hi = scipy.stats.t.interval(0.95, 2, loc=data.mean(), scale=scipy.stats.sem(data))
        back = np.exp if positive else (lambda v: v)
        assert float(r["mean"]) == pytest.approx(back(data.mean()))
        assert float(r["ci_lo"]) == pytest.approx(back(lo)) and float(r["ci_hi"]) == pytest.approx(back(hi))
        assert r["centre"] == ("geometric mean" if positive else "mean")
