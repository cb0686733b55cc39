"""What the host writes for a script run, made here from printed output by the host's own readers
(remote_runner.scriptread: OutputReader → MetricSink), to store in a RunStore as the follower would."""
from pathlib import Path

from remote_runner.scriptread.output import OutputReader
from remote_runner.scriptread.sink import MetricSink

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"
#: A script run's config as the store keeps it.
SCRIPT_CONFIG = {"mode": "script", "nproc_per_node": 2, "script": {"dir": "/src", "entry": "train.py"}}


def read_as_host(streams: dict, loss_series=None) -> tuple:
    """(metric records, events) for a run whose rank 0 printed ``streams`` ({"stderr": bytes, "stdout": bytes},
    read in that order, as the supervisor reads stderr first), between a started and a finished event."""
    records, events = [], [{"event": "started", "t": 1000.0}, {"event": "train_start", "t": 1000.5}]

    class Writer:
        def write(self, record, t=None):
            records.append(dict(record, t=1001.0 + len(records) if t is None else t))

    sink = MetricSink(Writer(), lambda event, /, **fields: events.append(dict(fields, event=event, t=1100.0)),
                      world_size=2, loss_series=loss_series)
    readers = [(stream, OutputReader(stream, sink)) for stream in streams]
    for stream, reader in readers:
        reader.feed(streams[stream])
        reader.close()
    sink.close(readers)
    return records, events + [{"event": "finished", "t": 1200.0}]


def capture_run(name: str, loss_series=None, streams=("stderr", "stdout")) -> tuple:
    """:func:`read_as_host` of the real capture ``name`` (tests/fixtures/scriptlogs/NAME.stderr and .stdout).

    The streams are read one after the other (a capture does not keep how they interleaved): a capture whose
    printed lines take their step from a bar on the other stream (the Trainer's) is read from one stream."""
    return read_as_host({stream: (CAPTURES / f"{name}.{stream}").read_bytes() for stream in streams}, loss_series)
