"""Multi-node runs in the app: the launch worker and the per-node state line (Qt-free, run on workers)."""
from __future__ import annotations

from collections.abc import Callable

from ddpgui.core.runs.manager import RunManager
from ddpgui.core.runs.multinode import NodeState
from ddpgui.core.targets.uploads import collected_skips


def launch_on_nodes(manager: RunManager, hosts: list[str], settings: dict,
                    progress: Callable[[int, int, str], None]):
    """Worker: preflight every node (progress says which check runs), yield the preflight's warnings
    (they do not block), then launch every node; returns the RunRecord.  Nothing is created when the
    preflight fails: its TargetError names the node and what to do."""
    progress(0, 0, f"checking {len(hosts)} nodes…")
    checked = manager.preflight(hosts, settings, say=lambda text: progress(0, 0, text))
    if checked.warnings:
        yield checked.warnings
    progress(0, 0, f"launching on {len(hosts)} nodes…")
    with collected_skips() as skipped:
        record = manager.launch_nodes(hosts, settings, checked=checked, progress=lambda done, total, files, nfiles:
                                      progress(done, total, f"uploading {files}/{nfiles} files"))
    if skipped:
        yield list(checked.warnings) + sorted(set(skipped))
    return record


def node_line(states: list[NodeState]) -> str:
    """``node 0 (A): running · node 1 (B): failed — why`` for a dashboard header."""
    return "   ·   ".join(f"{s.label}: {s.state}" + (f" — {s.message}" if s.state == "failed" and s.message else "")
                          for s in states)
