"""Script runs stored as the follower stores them, with the records and events the host's own readers
(remote_runner.scriptread) write for the real captures in tests/fixtures/scriptlogs."""
from pathlib import Path

from helpers.stored_runs import store_run

from remote_runner.scriptread.output import OutputReader
from remote_runner.scriptread.reports import SettingsReports
from remote_runner.scriptread.sink import MetricSink

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"
SCRIPT = {"mode": "script", "nproc_per_node": 2, "script": {"dir": "/src", "entry": "train.py"}}
T0 = 1_764_500_000.0


def host_run(capture: str, loss_series: str | None = None, streams=("stderr", "stdout"), data=None):
    """The metric records and events the host writes for a run that printed the capture ``capture`` (or ``data``:
    stream → bytes): its streams through the host's readers into one sink, as the supervisor feeds them."""
    records, events = [], [{"event": "started", "t": T0}, {"event": "train_start", "t": T0 + 0.5}]

    class Writer:
        def write(self, record, t=None):
            records.append(dict(record, t=T0 + 1.0 + len(records) if t is None else t))

    def event(name, /, **fields):
        events.append(dict(fields, event=name, t=T0 + 100.0))

    sink = MetricSink(Writer(), event, world_size=2, loss_series=loss_series)
    reports = SettingsReports(event)  # what the script says it ran with, as the supervisor reads it
    readers = [(stream, OutputReader(stream, sink, reports=reports)) for stream in streams]
    for stream, reader in readers:
        reader.feed(data[stream] if data is not None else (CAPTURES / f"{capture}.{stream}").read_bytes())
        reader.close()
    sink.close(readers)
    return records, events


def store_capture_run(store, run_id: str, capture: str, state: str = "finished", name: str | None = None, **kwargs):
    """A finished (or ``state``) script run of ``capture`` in ``store``; returns its metric records."""
    metrics, events = host_run(capture, **kwargs)
    if state in ("finished", "failed", "stopped"):
        events.append({"event": state, "t": T0 + 200.0})
    store_run(store, run_id, dict(SCRIPT, name=name or f"{capture} 2x"), metrics, events=events, state=state)
    return metrics
