"""A run's stored series, events and log tails, read in one go for a live view (Qt-free: runs on a worker thread)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from remote_runner.spools import EVENTS, METRICS, TELEMETRY

from ..store import RunRecord, RunStore
from .loglines import log_text
from .nodes import NodeState, node_states
from .protocol import LOG_SPOOLS


@dataclass
class TraceData:
    """What the store holds for a run, read off the GUI thread."""

    run: RunRecord
    metrics: dict[str, np.ndarray]
    telemetry: dict[int, dict[str, np.ndarray]]  # node → its series
    events: list[dict]
    logs: dict[str, str]  # node 0's, as load_logs gives them
    last_seq: dict[tuple[str, int], int] = field(default_factory=dict)  # (spool, node) → last seq read
    nodes: list[NodeState] = field(default_factory=list)  # a multi-node run's nodes


def load_logs(store: RunStore, run_id: str, node: int = 0) -> dict[str, str]:
    """The log tails of one node of a run, as the app shows them (:func:`.loglines.log_text`; a worker reads
    them: decoding a large tail is no work for the GUI thread)."""
    return {spool: log_text(store.log_tail(run_id, spool, node)) for spool in LOG_SPOOLS}


def load_trace(store: RunStore, run_id: str) -> TraceData:
    """Read a run's series, events and log tails (runs on a worker thread: SQLite and numpy only)."""
    run = store.get_run(run_id)
    metrics = store.series(run_id, METRICS)
    nodes = sorted(run.run_dirs) or [0]
    telemetry = {node: store.series(run_id, TELEMETRY, node) for node in nodes}
    events = store.events(run_id)
    last_seq = {}
    for spool, node, columns in ((METRICS, 0, metrics), *((TELEMETRY, n, telemetry[n]) for n in nodes)):
        seq = columns.get("seq")
        last_seq[spool, node] = int(seq[-1]) if seq is not None and len(seq) else -1
    for node in nodes:
        host_events = events if len(nodes) == 1 else store.events(run_id, node)
        last_seq[EVENTS, node] = max((int(e["seq"]) for e in host_events if e.get("seq", -1) >= 0),
                                             default=-1)
    states = node_states(store, run) if len(nodes) > 1 else []
    return TraceData(run, metrics, telemetry, events, load_logs(store, run_id), last_seq, states)
