"""Qt-free worker functions the app runs on its worker threads: probing a host, launching a run on one or several nodes."""
from __future__ import annotations

from collections.abc import Callable

from ..gpus.launching import pool_snapshot_of, resolve_gpus, settings_choice
from ..targets.uploads import collected_skips
from .manager import RunManager


def checked_gpus(manager: RunManager, hosts: list[str], settings: dict,
                 progress: Callable[[int, int, str], None]) -> tuple[dict, list[str]]:
    """The settings on the GPUs they choose (``gpus``: indices, or "free:N"), checked on a fresh snapshot of
    every host, and the warnings (busy GPUs, with who holds them); settings without a choice as they are.
    GpuChoiceError (with a hint) for a choice that cannot run: a GPU lost or missing, too few free."""
    if settings_choice(settings) is None:
        return settings, []
    progress(0, 0, "checking the host's GPUs…" if len(hosts) == 1 else f"checking the GPUs of {len(hosts)} nodes…")
    return resolve_gpus(settings, hosts, pool_snapshot_of(manager.targets), manager.is_slurm)


def launch_on_nodes(manager: RunManager, hosts: list[str], settings: dict,
                    progress: Callable[[int, int, str], None]):
    """Worker: preflight every node (progress says which check runs), yield the preflight's warnings
    (they do not block), then launch every node; returns the RunRecord.  Nothing is created when the
    preflight fails: its TargetError names the node and what to do.  A GPU choice is checked first, the same
    on every node (:func:`checked_gpus`); its warnings come with the preflight's."""
    settings, gpu_warnings = checked_gpus(manager, hosts, settings, progress)
    if gpu_warnings:
        yield gpu_warnings
    progress(0, 0, f"checking {len(hosts)} nodes…")
    checked = manager.preflight(hosts, settings, say=lambda text: progress(0, 0, text))
    warnings = gpu_warnings + list(checked.warnings)
    if checked.warnings:
        yield warnings
    progress(0, 0, f"launching on {len(hosts)} nodes…")
    with collected_skips() as skipped:
        record = manager.launch_nodes(hosts, settings, checked=checked, progress=lambda done, total, files, nfiles:
                                      progress(done, total, f"uploading {files}/{nfiles} files"))
    if skipped:
        yield warnings + sorted(set(skipped))
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
    """Worker: check the GPUs chosen (:func:`checked_gpus`; yields its warnings), deploy, upload and launch
    (``progress`` is thread-safe); yields the warnings with the files a script upload skipped (and why),
    returns the RunRecord."""
    settings, warnings = checked_gpus(manager, [host], settings, progress)
    if warnings:
        yield warnings
    progress(0, 0, "connecting and uploading the runner…")
    with collected_skips() as skipped:
        record = manager.launch(host, settings, progress=lambda done, total, files, nfiles: progress(
            done, total, f"uploading {files}/{nfiles} files"))
    if skipped:
        yield warnings + list(skipped)
    return record
