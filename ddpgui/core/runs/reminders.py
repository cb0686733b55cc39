"""Reminders that a rented host is still costing money while nothing runs on it.

A host with a price per hour is *idle* when none of its runs is active and its last
use — the end of its latest run, or the last time the app talked to it — is more than
``idle_minutes`` ago.  A host never used in this store is not reported (nothing says
the instance is up).  The GUI calls :func:`idle_priced_hosts` on a timer.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..hosts import HostProfile
from ..store import RunStore


@dataclass(frozen=True)
class IdleHost:
    host: str
    idle_s: float
    price_per_hour: float
    last_used: float

    @property
    def idle_cost(self) -> float:
        """What the idle time has cost so far."""
        return self.price_per_hour * self.idle_s / 3600.0

    def message(self) -> str:
        minutes = int(self.idle_s // 60)
        return (f"{self.host} has run nothing for {minutes} min and still costs {self.price_per_hour:g}/h "
                f"({self.idle_cost:.2f} so far while idle). Release the instance if you are done with it.")


def idle_priced_hosts(store: RunStore, profiles: Iterable[HostProfile], idle_minutes: float,
                      last_contact: dict[str, float] | None = None, now: float | None = None) -> list[IdleHost]:
    """Priced hosts with no active run whose last use is more than ``idle_minutes`` ago (none if 0 or less)."""
    if idle_minutes <= 0:
        return []
    now = time.time() if now is None else now
    last_contact = last_contact or {}
    idle = []
    for profile in profiles:
        if not profile.price_per_hour:
            continue
        runs = store.list_runs(host=profile.name)
        if any(run.active for run in runs):
            continue
        uses = [run.ended_at or run.updated_at for run in runs] + [last_contact.get(profile.name, 0.0)]
        last = max(uses, default=0.0)
        if last and now - last >= idle_minutes * 60:
            idle.append(IdleHost(profile.name, now - last, profile.price_per_hour, last))
    return idle
