"""Helpers for tests that compare what the client stored with what the host wrote."""
import json
import os
import time


def host_records(run_dir, spool="metrics.jsonl"):
    """The records as the host wrote them, skipping lines that are not JSON objects."""
    out = []
    with open(os.path.join(run_dir, spool), "rb") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def wait_for(predicate, timeout=120.0, interval=0.1):
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def assert_stored_as_on_host(store, record, spools=("metrics.jsonl", "telemetry.jsonl", "events.jsonl")):
    """Every record of every node's spools stored exactly as the host wrote it (the metrics not empty)."""
    for node, run_dir in record.run_dirs.items():
        for spool in spools:
            if os.path.exists(os.path.join(run_dir, spool)):
                assert store.records(record.id, spool, node) == host_records(run_dir, spool), (node, spool)
    assert store.records(record.id)
