"""Ending every process of a run a test left behind on purpose (its run directory removed or broken under it)."""
import os
import signal

from remote_runner import proctree


def kill_run_processes(status: dict | None, run_dir: str, moved_to: str | None = None) -> None:
    """SIGKILL the run's supervisor group and every rank with its children: torchrun starts each rank in a session
    of its own, so killing the supervisor's group alone leaves the ranks training on (an orphan that eats a core
    for the rest of the suite). ``moved_to``: where the test moved the run directory (its pid files are there)."""
    pgid = (status or {}).get("pgid")
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    ranks = [pid for pid in proctree.rank_pids(moved_to or run_dir)
             if proctree._cmdline_mentions(pid, run_dir)]  # the rank's own command line: never a recycled pid
    proctree.signal_all(proctree.descendants(ranks), signal.SIGKILL)
