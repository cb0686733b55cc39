"""Qt-free worker functions the app runs on its worker threads: probing a host, launching a run on one or several nodes."""
from __future__ import annotations

from collections.abc import Callable

from ..targets.uploads import collected_skips
from .manager import RunManager


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


def probe_host(manager: RunManager, host: str):
    """Worker: connect, deploy the runner and probe; yields progress text, returns the probe report."""
    yield "connecting"
    try:
        target = manager.targets.target(host)
        yield "probing"
        return target.probe()
    except Exception:
        manager.targets.drop(host)  # the next try reconnects from scratch
        raise


def launch_run(manager: RunManager, host: str, settings: dict, progress: Callable[[int, int, str], None]):
    """Worker: deploy, upload and launch (``progress`` is thread-safe); yields the files a script upload
    skipped (and why), returns the RunRecord."""
    progress(0, 0, "connecting and uploading the runner…")
    with collected_skips() as skipped:
        record = manager.launch(host, settings, progress=lambda done, total, files, nfiles: progress(
            done, total, f"uploading {files}/{nfiles} files"))
    if skipped:
        yield skipped
    return record
