"""The columnar block codec: a chunk's records as one payload of numpy arrays, merged and read back as series.

Metric and telemetry records are stored in columnar *blocks*: the records of a
stored chunk become one row whose payload holds one numpy array per key (see
:func:`encode_block`).  A row per (step, metric) would cap inserts at a few
thousand records per second in Python's sqlite3 and make loading 10^7 points take
seconds; a block is one INSERT and loads with ``np.frombuffer``.  A run that logs
slowly leaves many tiny blocks, so they are merged into big ones (*compaction*,
:func:`merge_blocks`) once enough accumulate and when the run ends.
"""
from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from .failures import DamagedBlock
from .records import StoreError


class _Missing:
    """The key is absent from the record (unlike JSON null, which is ``None``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
TAG_MISSING, TAG_NULL, TAG_FLOAT, TAG_INT, TAG_BOOL = range(5)
_TAG_OF_TYPE = {_Missing: TAG_MISSING, type(None): TAG_NULL, float: TAG_FLOAT, int: TAG_INT, bool: TAG_BOOL}
_FROM_TAG: tuple[Callable[[Any], Any], ...] = (lambda v: MISSING, lambda v: None, float, int, bool)
_NUM_TYPES = frozenset(_TAG_OF_TYPE)
_EXACT_INT = 2 ** 53
_F8, _I8, _U1, _I4 = np.dtype("<f8"), np.dtype("<i8"), np.dtype("u1"), np.dtype("<i4")
_MAGIC = b"DDPB"
_FORMAT = 1
_PREAMBLE = struct.Struct("<4sII")  # magic, format version, header length


@dataclass
class Column:
    """One key of a block.

    ``num``: ``data`` holds the values (float64, int64 or uint8 for bools) and
    ``tag`` the JSON type of every row (an int when all rows share it, else a
    uint8 array: TAG_MISSING, TAG_NULL, TAG_FLOAT, TAG_INT, TAG_BOOL).
    ``str``: ``data`` holds int32 codes into ``items`` (-1 absent, -2 null).
    ``json``: ``data`` is a uint8 presence mask and ``items`` the present values.
    """

    enc: str
    data: np.ndarray
    tag: int | np.ndarray = TAG_FLOAT
    items: list | None = None

    def tags(self, n: int) -> np.ndarray:
        return np.full(n, self.tag, _U1) if isinstance(self.tag, int) else self.tag

    def to_list(self) -> list:
        """Python values per row, MISSING where the record lacks the key."""
        if self.enc == "num":
            values = self.data.tolist()
            if isinstance(self.tag, int):
                if self.tag == TAG_FLOAT or (self.tag == TAG_INT and self.data.dtype == _I8):
                    return values
                convert = _FROM_TAG[self.tag]
                return [convert(v) for v in values]
            return [_FROM_TAG[t](v) for t, v in zip(self.tag.tolist(), values)]
        if self.enc == "str":
            table = self.items + [None, MISSING]  # code -2 → None, -1 → MISSING
            return [table[c] for c in self.data.tolist()]
        present = iter(self.items)
        return [next(present) if p else MISSING for p in self.data.tolist()]

    def to_array(self, out: np.ndarray) -> None:
        """Write the rows into ``out``: float64 (NaN for absent and null) or object (None for absent and null)."""
        if out.dtype == _F8:
            out[:] = self.data
            if not isinstance(self.tag, int):
                out[self.tag <= TAG_NULL] = np.nan
            elif self.tag <= TAG_NULL:
                out[:] = np.nan
        elif self.enc == "str":
            out[:] = np.array(self.items + [None, None], dtype=object)[self.data]
        else:
            out[:] = np.fromiter((None if v is MISSING else v for v in self.to_list()), object, len(out))


def _encode_values(col: Sequence) -> Column:
    """The column for one key's values (MISSING where a record lacks it)."""
    n = len(col)
    types = set(map(type, col))
    if types <= _NUM_TYPES:
        if len(types) == 1:
            (only,) = types
            if only is float:
                return Column("num", np.fromiter(col, _F8, n), TAG_FLOAT)
            if only is int:
                try:
                    return Column("num", np.fromiter(col, _I8, n), TAG_INT)
                except OverflowError:
                    return _json_column(col)
            if only is bool:
                return Column("num", np.fromiter(col, _U1, n), TAG_BOOL)
            return Column("num", np.full(n, np.nan), _TAG_OF_TYPE[only])  # all null
        tags = np.array([_TAG_OF_TYPE[type(v)] for v in col], _U1)
        if types <= {int, type(None), _Missing}:
            try:
                values = np.fromiter((v if type(v) is int else 0 for v in col), _I8, n)
            except OverflowError:
                return _json_column(col)
            return Column("num", values, tags)
        if int in types and any(type(v) is int and not -_EXACT_INT <= v <= _EXACT_INT for v in col):
            return _json_column(col)  # a float64 cannot hold it exactly
        nan = math.nan
        values = np.fromiter((nan if v is None or v is MISSING else v for v in col), _F8, n)
        return Column("num", values, tags)
    if types <= {str, type(None), _Missing}:
        index: dict[str, int] = {}
        codes = [-1 if v is MISSING else -2 if v is None else index.setdefault(v, len(index)) for v in col]
        return Column("str", np.array(codes, _I4), items=list(index))
    return _json_column(col)


def _json_column(col: Sequence) -> Column:
    present = np.array([v is not MISSING for v in col], _U1)
    return Column("json", present, items=[v for v in col if v is not MISSING])


def _columns_of(records: list[dict]) -> dict[str, Column]:
    keys = list(records[0]) if records else []  # the first record's order first
    union = set().union(*records)
    if len(union) == len(keys) and sum(map(len, records)) == len(keys) * len(records):
        # Every record has the same keys (the usual case): transpose in C.
        values = zip(*map(itemgetter(*keys), records)) if len(keys) > 1 else ([r[k] for r in records] for k in keys)
        return {k: _encode_values(col) for k, col in zip(keys, values)}
    keys += [k for k in union if k not in keys]
    return {k: _encode_values([r.get(k, MISSING) for r in records]) for k in keys}


def encode_block(records: list[dict]) -> bytes:
    """The payload of a block: a small header, then one raw little-endian array per key.

    Layout: ``b"DDPB"``, uint32 format version, uint32 header length, the header
    (JSON: ``{"n": rows, "c": [[key, enc, dtype, offset, tag, tag_offset, items], ...]}``),
    then the arrays, each at an 8-byte aligned offset from the data start.
    """
    return pack_block(len(records), _columns_of(records))


def pack_block(n: int, columns: dict[str, Column]) -> bytes:
    """The payload of ``n`` rows held in ``columns`` (encode_block's layout; what compaction writes)."""
    sections: list[bytes] = []
    size = 0

    def add(array: np.ndarray) -> int:
        nonlocal size
        offset = size
        raw = array.tobytes()
        sections.append(raw)
        size += len(raw)
        if size % 8:
            sections.append(b"\0" * (8 - size % 8))
            size += 8 - size % 8
        return offset

    entries = []
    for key, col in columns.items():
        offset = add(col.data)
        tag, tag_offset = (col.tag, -1) if isinstance(col.tag, int) else (-1, add(col.tag))
        entries.append([key, col.enc, col.data.dtype.str, offset, tag, tag_offset, col.items])
    header = json.dumps({"n": n, "c": entries}, separators=(",", ":")).encode()
    header += b" " * (-(_PREAMBLE.size + len(header)) % 8)
    return b"".join([_PREAMBLE.pack(_MAGIC, _FORMAT, len(header)), header, *sections])


def decode_block(payload: bytes) -> tuple[int, dict[str, Column]]:
    """Rows and columns of a block payload; the arrays are read-only views of ``payload``.

    A payload whose bytes were changed (a damaged disk) raises :class:`DamagedBlock`."""
    try:
        magic, version, header_len = _PREAMBLE.unpack_from(payload)
    except struct.error as exc:
        raise DamagedBlock(f"a block of {len(payload)} bytes") from exc
    if magic != _MAGIC or version != _FORMAT:
        raise StoreError(f"a block in the run store has an unknown format ({magic!r} v{version})")
    base = _PREAMBLE.size + header_len
    try:
        header = json.loads(payload[_PREAMBLE.size:base])
        n = header["n"]
        columns = {}
        for key, enc, dtype, offset, tag, tag_offset, items in header["c"]:
            data = np.frombuffer(payload, np.dtype(dtype), n, base + offset)
            tags = tag if tag >= 0 else np.frombuffer(payload, _U1, n, base + tag_offset)
            columns[key] = Column(enc, data, tags, items)
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # json's and numpy's errors are ValueErrors
        raise DamagedBlock(f"a damaged block: {exc}") from exc
    return n, columns


def records_of(n: int, columns: dict[str, Column]) -> list[dict]:
    """The records of a decoded block as they were encoded (absent keys stay absent)."""
    keys = list(columns)
    rows = zip(*(columns[k].to_list() for k in keys)) if keys else ([] for _ in range(n))
    return [{k: v for k, v in zip(keys, row) if v is not MISSING} for row in rows]


def merge_blocks(blocks: list[tuple[int, dict[str, Column]]]) -> tuple[int, dict[str, Column]]:
    """One block holding the rows of ``blocks`` in order, merged column by column with numpy."""
    total = sum(n for n, _ in blocks)
    keys = list(dict.fromkeys(k for _, cols in blocks for k in cols))
    merged = {}
    for key in keys:
        parts = [(n, cols.get(key)) for n, cols in blocks]
        present = [c for _, c in parts if c is not None]
        encs = {c.enc for c in present}
        column = None
        if encs == {"num"}:
            column = _merge_numbers(parts)
        elif encs == {"str"}:
            column = _merge_strings(parts)
        if column is None:
            column = _encode_values([v for n, c in parts for v in (c.to_list() if c is not None else [MISSING] * n)])
        merged[key] = column
    return total, merged


def _merge_numbers(parts: list[tuple[int, Column | None]]) -> Column | None:
    dtypes = {c.data.dtype for _, c in parts if c is not None}
    dtype = dtypes.pop() if len(dtypes) == 1 else _F8
    values, tags = [], []
    for n, c in parts:
        if c is None:
            values.append(np.full(n, np.nan) if dtype == _F8 else np.zeros(n, dtype))
            tags.append(np.full(n, TAG_MISSING, _U1))
            continue
        if dtype == _F8 and c.data.dtype == _I8 and ((c.data > _EXACT_INT) | (c.data < -_EXACT_INT)).any():
            return None  # a float64 cannot hold these ints exactly: fall back to JSON values
        values.append(c.data.astype(dtype, copy=False))
        tags.append(c.tags(n))
    tag = np.concatenate(tags)
    return Column("num", np.concatenate(values), int(tag[0]) if tag.size and (tag == tag[0]).all() else tag)


def _merge_strings(parts: list[tuple[int, Column | None]]) -> Column:
    index: dict[str, int] = {}
    codes = []
    for n, c in parts:
        if c is None:
            codes.append(np.full(n, -1, _I4))
            continue
        remap = np.array([index.setdefault(s, len(index)) for s in c.items] + [-2, -1], _I4)
        codes.append(remap[c.data])  # -2 and -1 index the last two entries: null and absent stay
    return Column("str", np.concatenate(codes), items=list(index))


def series_of(blocks: Iterable[tuple[int, dict[str, Column]]], total: int,
               keys: list[str] | None) -> dict[str, np.ndarray]:
    """Concatenate blocks (in seq order, ``total`` rows in all) into one array per key.

    Each block is copied into the output as it arrives, so only one block's payload
    is in memory at a time: the output is the only large allocation.
    """
    out: dict[str, np.ndarray] = {}
    start = 0
    for n, columns in blocks:
        stop = start + n
        for key, column in columns.items():
            if keys is not None and key not in keys:
                continue
            array = out.get(key)
            if array is None:
                array = out[key] = np.empty(total, _F8 if column.enc == "num" else object)
                array[:start] = np.nan if array.dtype == _F8 else None
            elif column.enc != "num" and array.dtype == _F8:  # a key that is a number in some records only
                numbers = array
                array = out[key] = numbers.astype(object)
                array[np.isnan(numbers)] = None
            column.to_array(array[start:stop])
        for key, array in out.items():
            if key not in columns:
                array[start:stop] = np.nan if array.dtype == _F8 else None
        start = stop
    if keys is None:
        return out
    return {key: out[key] if key in out else np.full(total, np.nan) for key in keys}
