"""One bad line must not stop a host (issue 23, item 2).

A record with a value the store cannot hold (a step beyond 64 bits, a seq beyond 64 bits, an event name
SQLite cannot encode, a ``t`` no float holds) is counted and skipped like a corrupt line; the run's other
records are stored and so are the other runs of the host.  A failure storing one run's data twice in a row
ends that run with the reason instead of restarting the host's follower forever.  Real store files, the
runner's own readers and spool writer, real follow streams of the runner on this computer.
"""
import json
import os
import sqlite3
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.runs.protocol import Chunk
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target
from remote_runner.scriptread.output import OutputReader
from remote_runner.scriptread.sink import MetricSink
from remote_runner.spools import EVENTS, METRICS, SpoolWriter
from remote_runner.status import write_status

HUGE = 99999999999999999999999  # what `print(f"step {HUGE} loss 0.1")` puts in a record written without a check


def _line(record) -> bytes:
    return json.dumps(record).encode() + b"\n"


def _store_spool(store, run_id, spool, data, node=0):
    offset = store.offsets(run_id, node).get(spool, 0)
    return store.store_chunk(run_id, node, Chunk(spool, offset, offset + len(data), data))


def test_values_the_store_cannot_hold_are_counted_and_skipped_like_corrupt_lines(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as store:
        store.create_run("a", hosts=["local"])
        metrics = (_line({"seq": 0, "t": 1.0, "step": 1, "loss": 1.0})
                   + _line({"seq": 1, "t": 2.0, "step": HUGE, "loss": 0.1})
                   + _line({"seq": HUGE, "t": 2.5, "step": 2, "loss": 0.2})
                   + _line({"seq": 2, "t": 3.0, "step": 3, "loss": 0.3, "tokens": HUGE}))  # a big value: kept
        result = _store_spool(store, "a", METRICS, metrics)
        assert (result.records, result.corrupt) == (2, 2)
        assert store.records("a") == [{"seq": 0, "t": 1.0, "step": 1, "loss": 1.0},
                                      {"seq": 2, "t": 3.0, "step": 3, "loss": 0.3, "tokens": HUGE}]
        events = (b'{"seq": 0, "t": 1.0, "event": "\\ud800"}\n'  # a lone surrogate: not UTF-8 text
                  + _line({"seq": 1, "t": 10 ** 400, "event": "started"})  # no float holds it
                  + _line({"seq": 2, "t": 1.0, "event": "started"}))
        result = _store_spool(store, "a", EVENTS, events)
        assert (result.records, result.corrupt) == (1, 2)
        run = store.get_run("a")
        assert run.corrupt_lines == 4 and run.last_step == 3
        assert store.offsets("a") == {METRICS: len(metrics), EVENTS: len(events)}  # nothing is fetched again
        warnings = [e["message"] for e in store.events("a") if e.get("event") == "warning"]
        first = len(_line({"seq": 0, "t": 1.0, "step": 1, "loss": 1.0}))  # the bad lines start after it
        assert warnings == [f"skipped 2 corrupt line(s) in {METRICS} at byte {first}",
                            f"skipped 2 corrupt line(s) in {EVENTS} at byte 0"]


# -- the property: whatever a script prints, the host's other runs are stored -----------------------------

# Integers at and beyond what 64 bits hold, as often as small ones.
_INTS = st.integers() | st.integers(2 ** 63 - 2, 10 ** 30) | st.integers(-(10 ** 30), -(2 ** 63) + 1)
_JSON = st.recursive(st.none() | st.booleans() | _INTS | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=6)
_PRINTED = st.one_of(
    st.text(max_size=80),
    st.builds(lambda step, key, value: f"step {step} {key} {value}", _INTS, st.sampled_from(
        ["loss", "tokens", "lr", "epoch", "iter"]), _INTS | st.floats() | st.text(max_size=6)),
    st.builds(lambda d: json.dumps(d), st.dictionaries(st.sampled_from(["step", "loss", "epoch", "x"]), _JSON)),
)
# What a run's metrics spool may hold: lines the script printed (read by the runner's own readers), records a
# runner wrote without the runner's checks (any JSON values: an older or another runner), and raw bytes.
_ITEMS = st.lists(st.one_of(st.tuples(st.just("printed"), _PRINTED),
                            st.tuples(st.just("record"), st.dictionaries(st.sampled_from(
                                ["step", "loss", "event", "t", "seq", "k"]), _JSON, max_size=4)),
                            st.tuples(st.just("json"), st.dictionaries(st.sampled_from(
                                ["step", "loss", "event", "t", "seq"]), _JSON, max_size=4)),
                            st.tuples(st.just("raw"), st.binary(max_size=40).filter(lambda b: b"\n" not in b))),
                  max_size=12)


def _spool_of(items, folder) -> bytes:
    """The metrics spool a run with these items would ship: written by the runner's SpoolWriter and readers."""
    path = os.path.join(folder, METRICS)
    events = []
    with SpoolWriter(path) as writer:
        sink = MetricSink(writer, lambda event, /, **fields: events.append(event))
        reader = OutputReader("stdout", sink)
        for kind, item in items:
            if kind == "printed":
                reader.feed(item.encode("utf-8", "surrogatepass") + b"\n")
            elif kind == "record":  # through the runner's writer: its seq and t
                writer.write(item)
            else:  # written by something else: any seq, any bytes
                with open(path, "ab") as fh:
                    fh.write((json.dumps(item).encode() if kind == "json" else item) + b"\n")
        reader.close()
        sink.close([("stdout", reader)])
    with open(path, "rb") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def shared_store():
    with tempfile.TemporaryDirectory() as folder, RunStore(os.path.join(folder, "runs.sqlite3")) as store:
        yield store


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(items=_ITEMS)
def test_whatever_a_script_prints_the_other_runs_of_the_host_are_stored(shared_store, items):
    store = shared_store
    bad, good = f"bad-{uuid.uuid4().hex}", f"good-{uuid.uuid4().hex}"
    store.create_run(bad, hosts=["local"])
    store.create_run(good, hosts=["local"])
    with tempfile.TemporaryDirectory() as folder:
        data = _spool_of(items, folder)
    result = _store_spool(store, bad, METRICS, data)  # never raises: a line is stored, or counted and skipped
    lines = [line for line in data.split(b"\n") if line.strip()]
    assert result.records + result.corrupt + result.duplicates == len(lines)
    assert store.get_run(bad).corrupt_lines == result.corrupt
    assert store.offsets(bad) == {METRICS: len(data)}
    ok = [{"seq": i, "t": float(i), "step": i, "loss": 1.0 / (i + 1)} for i in range(3)]
    assert _store_spool(store, good, METRICS, b"".join(map(_line, ok))).records == 3
    assert store.records(good) == ok


# -- through the real follower: one host, one run with the bad line, one without ----------------------------

@pytest.fixture
def manager(tmp_path, monkeypatch):
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    hosts = HostStore(tmp_path / "hosts.json")
    store = RunStore(tmp_path / "runs.sqlite3")
    m = RunManager(store, hosts, lambda name: open_target(name, hosts))
    yield m
    m.close()
    store.close()


def ended_run(store, root, run_id, metrics: bytes):
    """A run that ended on this computer (its run directory as the runner leaves it), in the store as launched."""
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    (run_dir / METRICS).write_bytes(metrics)
    (run_dir / EVENTS).write_bytes(_line({"seq": 0, "t": 1.0, "event": "started"})
                                   + _line({"seq": 1, "t": 9.0, "event": "finished"}))
    write_status(str(run_dir), state="finished", exit_code=0, ended_at=9.0)
    store.create_run(run_id, hosts=["local"], run_dirs={0: str(run_dir)}, state="running")
    return run_dir


def test_a_printed_step_no_integer_column_holds_stops_neither_its_run_nor_the_hosts_others(manager, tmp_path):
    """The runner of a script that printed ``step 99999999999999999999999 loss 0.1`` without the runner's
    check (an older runner) wrote that step: the follower stores everything else, of both runs, and ends."""
    good = [{"seq": i, "t": float(i), "step": i, "loss": 1.0} for i in range(5)]
    bad = good[:2] + [{"seq": 2, "t": 2.0, "step": HUGE, "loss": 0.1}] + good[3:]
    ended_run(manager.store, tmp_path / "runs", "with-bad-line", b"".join(map(_line, bad)))
    ended_run(manager.store, tmp_path / "runs", "other", b"".join(map(_line, good)))
    manager.follow("with-bad-line")
    manager.follow("other")
    assert manager.wait("with-bad-line", timeout=120).state == "finished"
    assert manager.wait("other", timeout=120).state == "finished"
    assert manager.store.records("other") == good
    assert manager.store.records("with-bad-line") == good[:2] + good[3:]
    assert manager.store.get_run("with-bad-line").corrupt_lines == 1


def test_a_run_whose_data_fails_to_be_stored_twice_ends_with_the_reason_and_the_host_goes_on(manager, tmp_path):
    """A failure storing one run's data (here a real SQLite refusal: a trigger of the store file) is tried once
    more, then that run ends failed saying why; the other run of the same host is stored and ends as usual."""
    records = [{"seq": i, "t": float(i), "step": i, "loss": 1.0} for i in range(5)]
    ended_run(manager.store, tmp_path / "runs", "refused", b"".join(map(_line, records)))
    ended_run(manager.store, tmp_path / "runs", "other", b"".join(map(_line, records)))
    with sqlite3.connect(manager.store.path) as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON blocks WHEN NEW.run_id = 'refused' "
                     "BEGIN SELECT RAISE(ABORT, 'this run cannot be stored'); END")
    conn.close()
    manager.follow("refused")
    manager.follow("other")
    refused = manager.wait("refused", timeout=120)
    assert (refused.state, refused.failure) == ("failed", "store_failed")
    assert "this run cannot be stored" in refused.message and "2 times in a row" in refused.message
    assert "still in its run directory on the host" in refused.hint
    other = manager.wait("other", timeout=120)
    assert other.state == "finished" and manager.store.records("other") == records
    assert manager.store.records("refused") == []
