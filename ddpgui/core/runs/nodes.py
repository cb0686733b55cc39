"""Pure node state of a multi-node run: each node's state from its events, the failure to name, the run's end.

A node's end is read from the events its supervisor wrote (stored per node) or
from the final status its follow stream carried; the run ends, in the worst of
its nodes' states, once every node has (:func:`outcome`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from remote_runner.status import FINAL_STATES

from ..store import RunRecord, RunStore


@dataclass
class NodeState:
    """One node of a run, from the events it wrote (its supervisor records how it ended)."""

    node: int
    host: str
    run_dir: str
    state: str = "starting"
    message: str = ""
    hint: str = ""
    failure: str | None = None
    failed_rank: int | None = None
    exit_code: int | None = None
    t: float | None = None
    where: str = ""  # the machine it ran on, when not the host itself (a Slurm node)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def label(self) -> str:
        return f"node {self.node} ({self.where or self.host})"


def node_states(store: RunStore, record: RunRecord, statuses: dict[int, dict] | None = None) -> list[NodeState]:
    """Each node's state from the events its supervisor wrote (stored per node), or from its final
    status.json in ``statuses`` (what the follow stream's end carries)."""
    states = []
    for node, run_dir in sorted(record.run_dirs.items()):
        state = NodeState(node, record.hosts[node], run_dir)
        events = store.events(record.id, node)
        if any(e.get("event") in ("started", "train_start") for e in events):
            state.state = "running"
        placed = [e for e in events if e.get("event") == "placed"]  # a Slurm node (remote_runner.slurm)
        if placed:
            state.where = f"{placed[-1].get('node')} of {record.hosts[node]}"
        ends = [(e["event"], e.get("t"), e.get("rank"), e) for e in events if e.get("event") in FINAL_STATES]
        status = (statuses or {}).get(node) or {}
        if status.get("state") in FINAL_STATES:
            ends.append((status["state"], status.get("ended_at"), status.get("failed_rank"), status))
        if ends:
            state.state, state.t, state.failed_rank, fields = ends[-1]
            state.message, state.hint = fields.get("message") or "", fields.get("hint") or ""
            state.failure, state.exit_code = fields.get("failure"), fields.get("exit_code")
        states.append(state)
    return states


def first_failure(states: list[NodeState]) -> NodeState | None:
    """The node whose failure caused the others': a node whose ranks only lost their peers is an echo."""
    failed = sorted((s for s in states if s.state == "failed"), key=lambda s: (s.failure == "peer_lost", s.t or 0))
    return failed[0] if failed else None


def outcome(states: list[NodeState]) -> dict | None:
    """The run's final columns once every node has ended (None before): the worst node's state, named."""
    if not all(s.final for s in states):
        return None
    cause = first_failure(states)
    ended_at = max(s.t or 0 for s in states) or time.time()
    stopped = [s for s in states if s.state == "stopped"]
    if cause is not None and (cause.failure != "peer_lost" or not stopped):
        return dict(failure_columns(cause), state="failed", exit_code=cause.exit_code, ended_at=ended_at)
    # A stop on request ends the others' ranks too: their lost peers are not a failure.
    shown = stopped[0] if stopped else states[0]
    return {"state": shown.state, "message": shown.message if stopped else "", "hint": shown.hint if stopped else "",
            "exit_code": shown.exit_code, "failure": None, "failed_rank": None, "ended_at": ended_at}


def failure_columns(node: NodeState) -> dict:
    """The run's message, hint and failure fields for a failed node (named first)."""
    return {"message": f"{node.label} failed: {node.message}", "hint": node.hint, "failure": node.failure,
            "failed_rank": node.failed_rank}


def node_line(states: list[NodeState]) -> str:
    """``node 0 (A): running · node 1 (B): failed — why`` for a dashboard header."""
    return "   ·   ".join(f"{s.label}: {s.state}" + (f" — {s.message}" if s.state == "failed" and s.message else "")
                          for s in states)
