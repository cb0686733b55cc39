"""Real recorded runs (tests/fixtures/compare) put into a RunStore the way the follower stores them.

Recorded on CPU with ``ddpgui launch local --workload mlp`` and ``ddpgui sweep``: "ordinary" holds
four runs of different lengths (40, 150 and 600 steps, and one stopped at step 3638), "sweep" a
sweep of nproc 1,2 × lr 0.001,0.003 with 3 repeats each.  The files are the runs' metrics (gzip)
and events as the store held them.
"""
import gzip
import json
from pathlib import Path

from ddpgui.core.store import SweepRecord
from helpers.stored_runs import store_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compare"


def recorded(kind: str) -> dict:
    """The index of one kind ("ordinary" or "sweep"): its runs and sweeps."""
    return json.loads((FIXTURES / "runs.json").read_text())[kind]


def metrics_of(run_id: str) -> list[dict]:
    with gzip.open(FIXTURES / f"{run_id}.metrics.jsonl.gz", "rt") as fh:
        return [json.loads(line) for line in fh]


def events_of(run_id: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{run_id}.events.jsonl").read_text().splitlines()]


def put_recorded(store, kind: str) -> list[str]:
    """Store every run of ``kind`` (and its sweeps) in ``store``; the run ids in recording order."""
    index = recorded(kind)
    for sweep in index["sweeps"]:
        store.create_sweep(SweepRecord(id=sweep["id"], name=sweep["name"], state=sweep["state"]), [])
    for run in index["runs"]:
        store_run(store, run["id"], run["config"], metrics_of(run["id"]),
                  events=events_of(run["id"]), hosts=run["hosts"], environment=run["environment"],
                  state=run["state"])
        if run["sweep_id"]:
            store.update_run(run["id"], sweep_id=run["sweep_id"])
    return [run["id"] for run in index["runs"]]
