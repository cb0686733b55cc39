"""Runs put into a RunStore the way the follower stores them (spool chunks), from constructed records."""
import json

from ddpgui.core.runs.protocol import Chunk


def spool_bytes(records):
    """JSONL lines with ``seq`` added (0, 1, 2, ...) where a record has none."""
    return b"".join(json.dumps({"seq": i, **r}).encode() + b"\n" for i, r in enumerate(records))


def put_spool(store, run_id, spool, records, node=0):
    """Store records (or a log's bytes) as node ``node`` wrote them, right after what the store holds."""
    data = records if isinstance(records, bytes) else b"".join(json.dumps(r).encode() + b"\n" for r in records)
    offset = store.offsets(run_id, node).get(spool, 0)
    store.store_chunk(run_id, node, Chunk(spool, offset, offset + len(data), data))
    return offset + len(data)


def store_run(store, run_id, config, metrics=(), telemetry=(), events=(), hosts=("local",), environment=None,
              state="finished", node=0):
    """Create the run, store its spools as chunks (one transaction), then set its final state."""
    store.create_run(run_id, name=config.get("name", run_id), hosts=list(hosts), config=config,
                     environment=environment or {}, run_dirs={node: f"/runs/{run_id}"}, state="running")
    chunks = []
    for spool, records in (("metrics.jsonl", metrics), ("telemetry.jsonl", telemetry), ("events.jsonl", events)):
        if records:
            data = spool_bytes(records)
            chunks.append(Chunk(spool, 0, len(data), data))
    if chunks:
        store.store_chunks(run_id, node, chunks)
    return store.update_run(run_id, state=state)


def constant_run(store, run_id, rate, config, steps=10, mem=1.0, loss=1.0, t0=1000.0):
    """A run whose every interval after warm-up has throughput ``rate`` (no warm-up, no compile)."""
    metrics = [{"t": t0 + s, "phase": "train", "step": s, "loss": loss, "samples_per_s": rate, "mem_peak_gib": mem,
                "warmup": False} for s in range(1, steps + 1)]
    events = [{"event": "started", "t": t0 - 1.0}, {"event": "train_start", "t": t0},
              {"event": "finished", "t": t0 + steps + 1.0}]
    return store_run(store, run_id, config, metrics, events=events)
