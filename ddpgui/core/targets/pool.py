"""TargetPool: one connected target per host, the runner deployed once, each host probed once.

The RunManager (single-node launch, following, stopping, deleting) and
multi-node launch (ddpgui.core.runs.multinode) share one pool, so a host used
by both is connected, deployed to and probed only once.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..hosts import LOCAL
from .base import Progress, Target, TargetError
from .zipapp import RunnerPackage, build_runner

OpenTarget = Callable[[str], Target]
log = logging.getLogger(__name__)


def environment_fingerprint(probe: dict) -> dict:
    """What a comparison must know about where a run ran (from the probe report)."""
    torch = probe.get("torch") or {}
    gpus = probe.get("gpus") or []
    return {"hostname": probe.get("hostname"), "gpu": gpus[0]["name"] if gpus else None, "gpu_count": len(gpus),
            "driver": probe.get("driver_version"), "cuda": torch.get("cuda_build"), "torch": torch.get("version"),
            "nccl": (torch.get("nccl") or {}).get("version"), "python": (probe.get("python") or {}).get("version"),
            "cpu": probe.get("cpu_model"), "cpu_count": probe.get("cpu_count")}


class TargetPool:
    """The hosts' targets, opened on first use by ``open_target(host)`` and reused; thread-safe."""

    def __init__(self, open_target: OpenTarget, package: RunnerPackage | None = None):
        self._open_target = open_target
        self._package = package
        self._targets: dict[str, Target] = {}
        self._deployed: set[str] = set()
        self._probes: dict[str, dict] = {}
        self._release: dict[str, dict] = {}
        #: Called with (host, what its release said or None) after each new connection (the RunManager collects
        #: what the host still waits for).
        self.on_connect: Callable[[str, dict | None], None] | None = None
        self._lock = threading.RLock()

    @property
    def package(self) -> RunnerPackage:
        """The runner zipapp deployed to every host (built on first use unless given)."""
        if self._package is None:
            self._package = build_runner()
        return self._package

    def target(self, host: str, progress: Progress | None = None) -> Target:
        """The host's target with the runner deployed (one connection per host, reused)."""
        with self._lock:
            target = self._targets.get(host)
            if target is None:
                target = self._targets[host] = self._open_target(host)
            if host not in self._deployed:
                target.deploy(self.package, progress)
                self._deployed.add(host)
                self._push_release(host, target)
                if self.on_connect is not None:
                    self.on_connect(host, self._release.get(host))
            return target

    def _push_release(self, host: str, target: Target) -> None:
        """At each new connection, the profile's release action goes to the host (and its watcher is started again
        after a reboot); what the host says of its release is kept for :meth:`release_state`, a failed release
        logged in words (core/hosts/release.py)."""
        profile = getattr(target, "profile", None)
        policy = getattr(profile, "release", None)
        if policy is None:
            return
        try:
            state = target.release_set(policy.for_host(profile.name))
        except TargetError as exc:
            log.warning("%s: the release action was not set on the host: %s", host, exc)
            return
        self._release[host] = state
        last = state.get("last") or {}
        if last and not last.get("ok"):
            from ..hosts.release import status_text

            log.warning("%s: %s", host, " ".join(status_text(state, profile.price_per_hour)[1:]))

    def release_state(self, host: str) -> dict | None:
        """What the host said of its release at this connection (None when it has no release action)."""
        return self._release.get(host)

    def connected(self, host: str) -> bool:
        """Whether ``host`` is connected in this pool (opened and the runner deployed, so using it again asks
        for no password or host key: a dropped link reconnects with the secrets its connection kept); This
        computer always is.  Never waits for the lock (a GUI asks, while another host may be connecting)."""
        return host == LOCAL or host in self._deployed

    def drop(self, host: str) -> None:
        """Forget a host's connection (after it dropped); the next use reconnects."""
        with self._lock:
            target = self._targets.pop(host, None)
            self._deployed.discard(host)
        if target is not None:
            try:
                target.close()
            except Exception:  # closing a dead connection may fail; it is gone either way
                pass

    def probe(self, host: str) -> dict:
        """The host's probe report (probed once per pool)."""
        with self._lock:
            if host not in self._probes:
                self._probes[host] = self.target(host).probe()
            return self._probes[host]

    def environment(self, host: str) -> dict:
        """The host's environment fingerprint (probed once per pool)."""
        return environment_fingerprint(self.probe(host))

    def close(self) -> None:
        """Close every connection (the next use of a host reconnects)."""
        with self._lock:
            hosts = list(self._targets)
        for host in hosts:
            self.drop(host)
