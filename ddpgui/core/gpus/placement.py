"""Where a parallel sweep's next cell runs on a host with GPUs: on GPUs of its own, free and not held by the
sweep's running cells.

The rules are the runner's (remote_runner/placement.py, one copy that the host's own queue places its cells with
too): a cell asks for as many GPUs as it has processes per node (:func:`gpu_request`, which here also reads the
launch form's ``"free:N"``), :func:`place` chooses them on a snapshot of the host -- free ones not held by the
sweep's running cells, in ``free:N``'s order, among those its CUDA_VISIBLE_DEVICES names -- or says in words why
the cell waits, or why it can never run there; a cell whose settings name its GPUs takes exactly those.  Here is
what only the client does: :func:`check_request` before a sweep starts, and the snapshots of the cells it places
itself (This computer; an SSH host's cells are placed by the host's queue, ddpgui.core.sweeps.hostqueue).

:class:`HostLooks` keeps the latest snapshot of each host for the runner, from one long-lived host monitor per
host (:class:`~ddpgui.core.gpus.monitor.HostMonitor`, never a sampler per look) that runs while the sweep's
cells wait there; its snapshots arrive on its own worker, so the runner's host worker never waits for one, and
after the sweep's cells have let GPUs go only a snapshot taken since serves (an older one still shows their
processes).  A host whose monitor fails but whose probe found no GPUs is placed as a CPU host.  Qt-free.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from remote_runner import placement as rules
from remote_runner.placement import GpuRequest, Placement

from ..errors import describe
from ..targets.base import Target
from .monitor import HostMonitor
from .picker import GpuChoiceError, check_indices, parse_gpu_choice
from .snapshot import FREE_MEMORY_MIB, HostSnapshot

#: Seconds a snapshot of a host serves a sweep's placements before another is taken.
LOOK_TTL_S = 5.0


def gpu_request(settings: dict) -> GpuRequest | None:
    """The GPUs a parallel sweep's cell asks for, from its settings (:func:`remote_runner.placement.gpu_request`);
    its ``gpus`` may also be, as the app's launch form writes them, ``"free:N"`` / ``"0,3"``."""
    gpus = settings.get("gpus")
    if isinstance(gpus, str):
        choice = parse_gpu_choice(gpus)
        if choice.free_count is not None:
            return GpuRequest(choice.free_count)
        settings = dict(settings, gpus=list(choice.indices))
    return rules.gpu_request(settings)


def check_request(host: str, snapshot: HostSnapshot, request: GpuRequest) -> None:
    """Refuse, before a sweep starts, a request the host can never meet (:class:`GpuChoiceError`): no GPUs, a
    named GPU it lacks or has lost, more GPUs than it has."""
    if not snapshot.gpus:
        raise GpuChoiceError(f"{host} has no GPUs", "run on the CPU (leave out --gpus), or choose a host with GPUs")
    if request.pool is not None:
        # named as the sweep names the host (its profile); its warnings (busy GPUs) are what cells wait for
        check_indices(dataclasses.replace(snapshot, host=host), request.pool)
    refused = rules.refusal(host, snapshot.gpus, request)
    if refused is not None:
        raise GpuChoiceError(f"a cell of {rules.plural(request.count, 'process', 'processes')} needs "
                             f"{rules.plural(request.count, 'GPU')}, but {refused[0]}", refused[1])


def place(host: str, snapshot: HostSnapshot, request: GpuRequest, held: Iterable[int] = (),
          memory_threshold_mib: int = FREE_MEMORY_MIB) -> Placement:
    """The GPUs of ``host`` (its profile name) for a cell asking ``request``, on this snapshot of it, leaving out
    ``held`` (the GPUs the sweep's running cells hold there): :func:`remote_runner.placement.place`."""
    return rules.place(host, snapshot.gpus, request, held, memory_threshold_mib)


# ---- the runner's snapshots ------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """The latest look at a host: its snapshot, or the error that stopped it (message, hint); neither while
    the first is on its way."""

    snapshot: HostSnapshot | None = None
    error: tuple[str, str] | None = None
    at: float = 0.0
    held: frozenset[int] = frozenset()


def decide(host: str, look: Look, request: GpuRequest | None, held: Iterable[int] = (),
           probed_gpus: int | None = None) -> Placement | None:
    """The placement of a cell on what ``look`` saw of ``host``; None when GPUs are not placed (the host has
    none, or the cell places itself): the runner then does what it does without GPUs.  ``probed_gpus``: the
    GPUs the host's probe found; a look that failed on a host whose probe found none is a CPU host's."""
    if request is None or (look.snapshot is not None and not look.snapshot.gpus):
        return None
    if look.snapshot is None:
        if look.error is None:
            return Placement()  # the first snapshot is on its way
        if probed_gpus == 0:
            return None  # the monitor failed, but the probe says there are no GPUs to place on
        return rules.unseen(host, *look.error)
    return place(host, look.snapshot, request, held)


class _Watch:
    """One host's long-lived monitor for the looks: the snapshots it sent (counted), its last problem."""

    def __init__(self, monitor):
        self.monitor, self.acquired = monitor, False
        self.latest: HostSnapshot | None = None
        self.count = 0  # snapshots sent by the monitor (its own seq starts again with each sampler)
        self.need = 0  # a look is served from a snapshot counted above this (newer than GPUs let go)
        self.error: Look | None = None
        self.look = Look()


class HostLooks:
    """The latest snapshot of each host, for one sweep's placements; thread-safe.

    With ``open_target(host)`` (the host's target, the runner deployed) each host gets one long-lived
    :class:`~ddpgui.core.gpus.monitor.HostMonitor`, acquired by the first look while its cells wait and released
    by :meth:`release` (no pending cells there) or :meth:`close`; its snapshots arrive on its worker and
    ``on_look()`` is called with each, so the caller's loop never waits.  A monitor that went away is started
    again once its error is ``ttl_s`` old.  Pure tests give ``take(host)`` instead: a snapshot taken on a thread
    of its own, again once the last is ``ttl_s`` old.
    """

    def __init__(self, take: Callable[[str], HostSnapshot] | None = None, ttl_s: float = LOOK_TTL_S,
                 on_look: Callable[[], None] | None = None, *, open_target: Callable[[str], Target] | None = None,
                 grace_s: float = LOOK_TTL_S):
        self._take, self.ttl_s, self._on_look = take, ttl_s, on_look
        self._open_target, self.grace_s = open_target, grace_s
        self._looks: dict[str, Look] = {}
        self._taking: dict[str, threading.Thread] = {}
        self._watches: dict[str, _Watch] = {}
        self._closed = False
        self._lock = threading.Lock()

    def look(self, host: str, held: Iterable[int] = ()) -> Look:
        """The latest look at ``host`` (perhaps an old one); a newer one comes meanwhile when it is older than
        ``ttl_s`` (``take``), or when GPUs it saw ``held`` are no longer (their processes had not ended on it): a
        snapshot taken after that is waited for.  A host without GPUs is looked at once."""
        held = frozenset(held)
        if self._take is None:
            return self._watched(host, held)
        with self._lock:
            look = self._looks.get(host)
            stale = look is None or (look.snapshot is None or bool(look.snapshot.gpus)) and \
                (time.monotonic() - look.at >= self.ttl_s or not look.held <= held)
            if stale and host not in self._taking:
                thread = threading.Thread(target=self._take_look, args=(host, held), name=f"gpu-look-{host}",
                                          daemon=True)
                self._taking[host] = thread
                thread.start()
            return look or Look()

    def _take_look(self, host: str, held: frozenset[int]) -> None:
        try:
            look = Look(snapshot=self._take(host), at=time.monotonic(), held=held)
        except Exception as exc:  # the monitor could not run, or the link dropped: said, and tried again
            look = Look(error=describe(exc), at=time.monotonic(), held=held)
        with self._lock:
            self._looks[host] = look
            self._taking.pop(host, None)
        if self._on_look is not None:
            self._on_look()

    # ---- one long-lived monitor per host ---------------------------------------------------------------
    def _watched(self, host: str, held: frozenset[int]) -> Look:
        actions = []  # the monitor's acquire/release, called outside the lock (they may wait for its worker)
        with self._lock:
            watch = self._watches.get(host)
            if watch is None:
                if self._closed:
                    return Look()
                watch = self._watches[host] = _Watch(self._monitor(host))
            look = watch.look
            if self._closed or look.snapshot is not None and not look.snapshot.gpus:
                return look  # the sweep is over, or the host has no GPUs: looked at once
            if not watch.acquired:
                watch.acquired, watch.need = True, watch.count
                actions.append(watch.monitor.acquire)
            elif watch.error is not None and time.monotonic() - watch.error.at >= self.ttl_s and \
                    not watch.monitor.running:  # its worker has ended: the next acquire starts a new one
                watch.error = dataclasses.replace(watch.error, at=time.monotonic())
                actions += [watch.monitor.release, watch.monitor.acquire]  # it went away: a new one starts
            if look.snapshot is not None and not look.held <= held:
                watch.need = max(watch.need, watch.count)  # it still shows the processes of GPUs let go
                look = watch.look = dataclasses.replace(look, held=held)  # once: a newer snapshot is awaited
            if watch.latest is not None and watch.count > watch.need:
                look = watch.look = Look(snapshot=watch.latest, at=time.monotonic(), held=held)
            elif watch.error is not None:
                look = watch.error
            if look.snapshot is not None and not look.snapshot.gpus and watch.acquired:
                watch.acquired = False  # nothing to place: the sampler may end
                actions.append(watch.monitor.release)
        for action in actions:
            action()
        return look

    def _monitor(self, host: str) -> HostMonitor:
        return HostMonitor(host, lambda: self._open_target(host), grace_s=self.grace_s,
                           on_snapshot=lambda snapshot: self._snapshot(host, snapshot),
                           on_problem=lambda problem: self._problem(host, problem))

    def _snapshot(self, host: str, snapshot: HostSnapshot) -> None:
        with self._lock:
            watch = self._watches[host]
            watch.latest, watch.error = snapshot, None
            watch.count += 1
        if self._on_look is not None:
            self._on_look()

    def _problem(self, host: str, problem: Exception) -> None:
        with self._lock:
            watch = self._watches[host]
            watch.latest = None  # its last snapshot grows old: the problem is what the looks say now
            watch.error = Look(error=describe(problem), at=time.monotonic())
        if self._on_look is not None:
            self._on_look()

    def release(self, host: str) -> None:
        """The host has no cells waiting for GPUs: its monitor is let go (it ends ``grace_s`` later)."""
        with self._lock:
            watch = self._watches.get(host)
            if watch is None or not watch.acquired:
                return
            watch.acquired = False
        watch.monitor.release()

    def close(self, timeout: float = 30.0) -> None:
        """Stop every host's monitor and wait (up to ``timeout`` s) for the snapshots being taken, so that no
        sampler outlives the sweep."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            threads = list(self._taking.values())
            watches = list(self._watches.values())
        for watch in watches:
            watch.monitor.stop(timeout=max(1.0, min(15.0, deadline - time.monotonic())))
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
