"""The user's choice of a run's loss after the fact: which stored series every reader sees under ``loss``.

The host writes the run's loss under ``loss`` and names the series it took it from in a ``series`` event
(``"loss": true``, ``"from": "train_loss"``).  A run whose loss the user chose again (``runs.loss_series``,
set by :func:`ddpgui.core.runs.series.set_loss_series`) is read through one :class:`LossChoice`: the chosen
series is read as ``loss``, and what the host had put under ``loss`` is read under its own name (the
``from`` of its event; ``orig_loss`` when that is "loss" itself or unknown).  The run store applies it to
every metric record and series it gives (:meth:`RunStore.series`, :meth:`RunStore.records`, the records a
follow stores), so comparisons, curves, summaries, figures and exports all read the same loss.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

#: The name the host's loss is read under when its own name is "loss" (or unknown), as the host names a
#: series "loss" that is not the run's loss.
ORIG_LOSS = "orig_loss"


@dataclass(frozen=True)
class LossChoice:
    """Read the stored series ``chosen`` as ``loss``, and the stored ``loss`` as ``host_name``."""

    chosen: str
    host_name: str

    def read_name(self, stored: str) -> str:
        """The name a stored key is read under."""
        if stored == "loss":
            return self.host_name
        return "loss" if stored == self.chosen else stored

    def stored_name(self, name: str) -> str:
        """The stored key of a name as read (the inverse of :meth:`read_name`)."""
        if name == "loss":
            return self.chosen
        return "loss" if name == self.host_name else name

    def record(self, rec: dict) -> dict:
        """A metric record as read (a new dict when it changes; key order kept)."""
        if "loss" not in rec and self.chosen not in rec:
            return rec
        return {self.read_name(k): v for k, v in rec.items()}

    def columns(self, columns: dict) -> dict:
        """Columns (key → array) as read."""
        return {self.read_name(k): v for k, v in columns.items()}

    def event(self, rec: dict) -> dict:
        """A ``series`` event as read: its ``name`` and ``loss`` flag follow the choice."""
        if rec.get("event") != "series" or not isinstance(rec.get("name"), str):
            return rec
        name = self.read_name(rec["name"])
        out = {k: v for k, v in rec.items() if k != "loss"}
        out["name"] = name
        if name == "loss" and "also" not in rec:
            out["loss"] = True
        return out


def host_loss_from(events: Iterable[dict]) -> str | None:
    """The name of the series the host wrote as the run's loss (its ``series`` event's ``from``), if it said: the
    last one it named (a better-named loss that came later took over)."""
    origin = None
    for rec in events:
        if rec.get("event") == "series" and rec.get("loss") and rec.get("name") == "loss":
            origin = rec.get("from")
    return origin if isinstance(origin, str) and origin else None


def host_name_of(origin: str | None) -> str:
    """The name the host's loss is read under once another series is the loss."""
    return origin if origin and origin != "loss" else ORIG_LOSS


def series_events(conn: sqlite3.Connection, run_id: str) -> list[dict]:
    """The host's ``series`` events of a run's node 0 (where the script's metrics come from), in order."""
    rows = conn.execute("SELECT record FROM events WHERE run_id = ? AND node = 0 AND source = 'host' "
                        "AND event = 'series' ORDER BY seq", (run_id,))
    return [json.loads(r) for (r,) in rows]


def loss_choice(conn: sqlite3.Connection, run_id: str) -> LossChoice | None:
    """The run's :class:`LossChoice`, or None when it reads its loss as the host wrote it."""
    row = conn.execute("SELECT loss_series FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None or not row[0]:
        return None
    return LossChoice(row[0], host_name_of(host_loss_from(series_events(conn, run_id))))
