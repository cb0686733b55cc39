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
