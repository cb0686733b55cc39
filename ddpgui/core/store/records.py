"""The records of the run store: its errors and the run, sweep and cell rows, with their SQL conversions."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from remote_runner.status import FINAL_STATES

#: ``seq`` of the events the client adds itself (warnings about skipped lines).
CLIENT_SEQ = -1


class StoreError(Exception):
    """The run store cannot do what was asked; the message says why, ``hint`` (when there is one) what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(f"{message} — {hint}" if hint else message)  # describe() shows the two apart
        self.hint = hint


class StoreFileError(StoreError):
    """The store file itself fails (damaged, its disk full or read-only...): no operation on it can be trusted to
    work until the user acts, whatever was asked (unlike a run that is not found)."""


class StoreCorruptError(StoreFileError):
    """The store file is not a readable ddpgui run store."""


class StoreFullError(StoreFileError):
    """The disk of the store file is full: nothing of the write was stored; it can be tried again once there is space."""


class StoreReadOnlyError(StoreFileError):
    """The store file or its folder cannot be written (a read-only folder or file system)."""


class StoreVersionError(StoreError):
    """The store file was written by a newer ddpgui."""


class StoreGapError(StoreError):
    """A chunk starts after the end of the data before it: bytes in between would be lost.

    Nothing of the call that raised it is stored; follow again from ``offset`` (what the store holds).
    """

    def __init__(self, run_id: str, node: int, spool: str, offset: int, start: int):
        super().__init__(f"run {run_id} node {node} {spool}: a chunk starts at byte {start}, after the end of the data "
                         f"before it; nothing was stored, follow again from the stored offset {offset}")
        self.run_id, self.node, self.spool, self.offset, self.start = run_id, node, spool, offset, start


class SweepNotFound(StoreError, KeyError):
    def __init__(self, sweep_id: str):
        super().__init__(f"no sweep {sweep_id!r} in the run store")
        self.sweep_id = sweep_id

    def __str__(self) -> str:
        return self.args[0]


class RunNotFound(StoreError, KeyError):
    def __init__(self, run_id: str):
        super().__init__(f"no run {run_id!r} in the run store")
        self.run_id = run_id

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return self.args[0]


@dataclass
class StoreResult:
    """What storing chunks did.

    ``records``: records stored; ``corrupt``: lines skipped because they are not
    records (not JSON objects, or without an integer ``seq``) or hold a value the store
    cannot (see :func:`~ddpgui.core.store.ingest.holdable`); ``skipped``: chunks
    that were already stored (a replay); ``duplicates``: records dropped because
    their ``seq`` was not above the last stored one; ``new``: spool → the records
    stored, in order (what a live view appends; log spools are not listed).
    """

    records: int = 0
    corrupt: int = 0
    skipped: int = 0
    duplicates: int = 0
    new: dict[str, list[dict]] = field(default_factory=dict)


@dataclass
class RunRecord:
    """One row of ``runs``; JSON columns decoded (``run_dirs`` keyed by node index)."""

    id: str
    name: str = ""
    tags: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    host: str = ""
    config: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    run_dirs: dict[int, str] = field(default_factory=dict)
    state: str = "created"
    message: str = ""
    hint: str = ""
    failure: str | None = None
    failed_rank: int | None = None
    exit_code: int | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    summary: dict = field(default_factory=dict)
    sweep_id: str | None = None
    total_steps: int | None = None
    last_step: int | None = None
    corrupt_lines: int = 0
    updated_at: float = 0.0
    loss_series: str | None = None  # the stored series read as the loss (None: the host's choice)

    @property
    def active(self) -> bool:
        return self.state not in FINAL_STATES

    @property
    def nodes(self) -> list[int]:
        """Its node indexes: 0 always (a run not launched yet has no run dir), then every node with a run dir."""
        return sorted({0, *map(int, self.run_dirs)})


RUN_COLUMNS = tuple(f.name for f in fields(RunRecord))
RUN_JSON_COLUMNS = frozenset({"tags", "hosts", "config", "environment", "run_dirs", "summary"})
RUN_UPDATABLE = frozenset(RUN_COLUMNS) - {"id", "created_at", "updated_at"}


#: A sweep's states; ``stopping`` only while a stop is ending its running cells.
SWEEP_FINAL_STATES = ("done", "failed", "stopped", "cancelled")
#: A sweep cell's states.
CELL_FINAL_STATES = ("done", "failed", "skipped", "cancelled")


@dataclass
class SweepRecord:
    """One row of ``sweeps``: the matrix and how it is run (its cells are :class:`SweepCell` rows)."""

    id: str
    name: str = ""
    hosts: list[str] = field(default_factory=list)
    base: dict = field(default_factory=dict)
    matrix: dict[str, list] = field(default_factory=dict)
    repeats: int = 1
    parallel: bool = False
    seeds: str = ""
    state: str = "queued"
    message: str = ""
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.state not in SWEEP_FINAL_STATES


@dataclass
class SweepCell:
    """One run of a sweep: its settings (for make_config), its host, and the run it got (the latest)."""

    sweep_id: str
    index: int
    label: str = ""
    host: str = ""
    settings: dict = field(default_factory=dict)
    repeat: int = 0
    run_id: str | None = None
    state: str = "pending"
    reason: str = ""
    hint: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float = 0.0


SWEEP_COLUMNS = tuple(f.name for f in fields(SweepRecord))
CELL_COLUMNS = tuple(f.name for f in fields(SweepCell))
SWEEP_JSON = frozenset({"hosts", "base", "matrix"})


# --------------------------------------------------------------------------------------------------
# Values as SQL stores them


def number_of(value: Any) -> float | None:
    """A JSON number as a float, else None (an event's ``t`` column)."""
    return float(value) if type(value) in (int, float) else None


def text_of(value: Any) -> str | None:
    """A JSON string, else None (an event's ``event`` column)."""
    return value if isinstance(value, str) else None


def run_sql(column: str, value: Any) -> Any:
    """A run value as stored: JSON text for the JSON columns (``run_dirs`` keyed by strings)."""
    if column in RUN_JSON_COLUMNS:
        if column == "run_dirs":
            value = {str(k): v for k, v in (value or {}).items()}
        return json.dumps(value if value is not None else ({} if column not in ("tags", "hosts") else []))
    return value


def quoted(columns: Iterable[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)  # "index" is an SQL keyword


def sweep_sql(column: str, value: Any) -> Any:
    """A sweep or cell value as stored: JSON text for the JSON columns, 0/1 for the flag."""
    if column in SWEEP_JSON or column == "settings":
        return json.dumps(value)
    return int(value) if column == "parallel" else value


def decoded(cls: type, columns: tuple[str, ...], row: tuple) -> Any:
    """A :class:`SweepRecord` or :class:`SweepCell` (``cls``) from its row."""
    values = dict(zip(columns, row))
    for column in SWEEP_JSON | {"settings"}:
        if column in values:
            values[column] = json.loads(values[column])
    if "parallel" in values:
        values["parallel"] = bool(values["parallel"])
    return cls(**values)


def run_of(row: tuple) -> RunRecord:
    """A :class:`RunRecord` from its row of ``RUN_COLUMNS``."""
    values = dict(zip(RUN_COLUMNS, row))
    for column in RUN_JSON_COLUMNS:
        values[column] = json.loads(values[column])
    values["run_dirs"] = {int(k): v for k, v in values["run_dirs"].items()}
    return RunRecord(**values)
