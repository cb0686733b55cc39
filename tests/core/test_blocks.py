"""The columnar block codec by itself, no SQLite: encode, decode, merge and series round-trip exactly."""
from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpgui.core.store import StoreError
from ddpgui.core.store.blocks import (
    TAG_BOOL,
    TAG_FLOAT,
    TAG_INT,
    TAG_MISSING,
    TAG_NULL,
    decode_block,
    encode_block,
    merge_blocks,
    pack_block,
    records_of,
    series_of,
)


def round_trip(records: list[dict]) -> list[dict]:
    return records_of(*decode_block(encode_block(records)))


def canon(records: list[dict]) -> list[str]:
    """Type-strict: 2 and 2.0, 1 and true, null and an absent key all differ; NaN equals NaN."""
    return [json.dumps(r, sort_keys=True) for r in records]


def same(a: object, b: object) -> bool:
    """Equal as values (2 == 2.0, True == 1.0), NaN equal to NaN, inside lists and dicts too."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def columns(records: list[dict]) -> dict:
    return decode_block(encode_block(records))[1]


# Every value a JSON record can hold, and the floats a record written by Python could (NaN, inf).
scalars = st.one_of(
    st.integers(), st.integers(-5, 5), st.sampled_from([2 ** 53, 2 ** 53 + 1, -2 ** 63, 2 ** 63, 2 ** 64]),
    st.floats(), st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1e300]),
    st.booleans(), st.none(), st.text(max_size=6), st.sampled_from(["gpu", "cpu", ""]))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=3), scalars, max_size=2))
# Records over a few shared keys, so columns mix types and miss values; some all-numeric, like metrics.
records_lists = st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["seq", "loss", "phase", "x", "y"]), values, max_size=5),
    st.dictionaries(st.sampled_from(["loss", "lr"]), st.one_of(st.floats(), st.integers(-2 ** 40, 2 ** 40),
                                                               st.booleans(), st.none()), min_size=2)),
    max_size=40)


@settings(max_examples=200, deadline=None)
@given(records_lists)
def test_any_records_come_back_exactly(records):
    assert canon(round_trip(records)) == canon(records)


@settings(max_examples=150, deadline=None)
@given(records_lists, st.lists(st.integers(0, 40), max_size=6))
def test_merging_several_blocks_keeps_every_record_in_order(records, cuts):
    bounds = sorted({0, len(records), *(c for c in cuts if c <= len(records))})
    parts = [decode_block(encode_block(records[a:b])) for a, b in zip(bounds, bounds[1:])]
    if not parts:
        return
    n, merged = merge_blocks(parts)
    assert n == len(records)
    assert canon(records_of(n, merged)) == canon(records)
    assert canon(records_of(*decode_block(pack_block(n, merged)))) == canon(records)  # as compaction stores it


# A series is float64 while every block holds numbers, so values it cannot hold alike split and merged stay
# out: ints beyond 2**53 (float64 in a lone block, exact JSON values once merged with floats) and NaN (None
# once the series turns to objects).
series_values = st.one_of(st.integers(-2 ** 53, 2 ** 53), st.floats(allow_nan=False), st.booleans(), st.none(),
                          st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2))
series_records = st.lists(st.dictionaries(st.sampled_from(["seq", "loss", "phase"]), series_values, max_size=3),
                          max_size=40)


@settings(max_examples=100, deadline=None)
@given(series_records, st.lists(st.integers(0, 40), max_size=6))
def test_series_of_several_blocks_equal_the_series_of_the_merged_block(records, cuts):
    bounds = sorted({0, len(records), *(c for c in cuts if c <= len(records))})
    blocks = [encode_block(records[a:b]) for a, b in zip(bounds, bounds[1:])]
    if not blocks:
        return
    split = series_of((decode_block(b) for b in blocks), len(records), None)
    whole = series_of([merge_blocks([decode_block(b) for b in blocks])], len(records), None)
    assert list(split) == list(whole)
    for key, array in split.items():
        assert array.dtype == whole[key].dtype, key
        if array.dtype == np.float64:
            np.testing.assert_array_equal(array, whole[key])
        else:  # a key that is a number in some blocks only: 0.0 in one series may be 0 in the other
            assert all(map(same, array.tolist(), whole[key].tolist())), key


def test_each_kind_of_column_gets_its_encoding():
    cols = columns([{"f": 0.5, "i": 1, "b": True, "n": None, "s": "a", "big": 2 ** 64, "mix": 1, "j": [1]},
                    {"f": 1.5, "i": 2, "b": False, "n": None, "s": "b", "big": 1, "mix": "x", "j": {"k": 2}}])
    assert (cols["f"].enc, cols["f"].data.dtype, cols["f"].tag) == ("num", np.float64, TAG_FLOAT)
    assert (cols["i"].enc, cols["i"].data.dtype, cols["i"].tag) == ("num", np.int64, TAG_INT)
    assert (cols["b"].enc, cols["b"].data.dtype, cols["b"].tag) == ("num", np.uint8, TAG_BOOL)
    assert (cols["n"].enc, cols["n"].tag) == ("num", TAG_NULL)
    assert (cols["s"].enc, cols["s"].data.tolist(), cols["s"].items) == ("str", [0, 1], ["a", "b"])
    for key in ("big", "mix", "j"):  # beyond int64, numbers and strings, lists and dicts: JSON values
        assert cols[key].enc == "json", key


def test_missing_values_and_nulls_are_tagged_per_row():
    cols = columns([{"x": 1, "s": "a"}, {"x": None, "s": None}, {}, {"x": 2.5, "s": "a"}])
    assert cols["x"].enc == "num" and cols["x"].tags(4).tolist() == [TAG_INT, TAG_NULL, TAG_MISSING, TAG_FLOAT]
    assert cols["s"].data.tolist() == [0, -2, -1, 0] and cols["s"].items == ["a"]  # -2 null, -1 absent
    assert round_trip([{"x": 1}, {"x": None}, {}]) == [{"x": 1}, {"x": None}, {}]


def test_nan_and_infinity_survive_every_encoding():
    records = [{"f": math.nan, "m": math.inf, "j": math.nan}, {"f": math.inf, "m": 1, "j": "text"},
               {"f": -math.inf, "m": None, "j": -math.inf}]
    cols = columns(records)
    assert (cols["f"].enc, cols["m"].enc, cols["j"].enc) == ("num", "num", "json")
    back = round_trip(records)
    assert math.isnan(back[0]["f"]) and back[1]["f"] == math.inf and back[2]["f"] == -math.inf
    assert back[0]["m"] == math.inf and type(back[1]["m"]) is int and back[2]["m"] is None
    assert math.isnan(back[0]["j"]) and back[1]["j"] == "text" and back[2]["j"] == -math.inf


@pytest.mark.parametrize("values", [[-2 ** 63, 0.5], [2 ** 53 + 1, None, 1.5],
                                    [-2 ** 63, 2 ** 53 + 1, 0.5, 2 ** 64, True, 7, None]])
def test_numbers_a_float64_cannot_hold_stay_exact_through_a_merge(values):
    blocks = [decode_block(encode_block([{"big": v}])) for v in values]  # one block each: int64, float, ...
    n, merged = merge_blocks(blocks)
    assert [r["big"] for r in records_of(n, merged)] == values
    assert [type(r["big"]) for r in records_of(n, merged)] == [type(v) for v in values]


def test_merged_numbers_widen_to_float64_and_keep_their_types():
    ints, floats = decode_block(encode_block([{"x": 1}, {"x": 2}])), decode_block(encode_block([{"x": 0.5}]))
    bools = decode_block(encode_block([{"x": True}, {}]))
    n, merged = merge_blocks([ints, floats, bools])
    assert merged["x"].enc == "num" and merged["x"].data.dtype == np.float64
    assert records_of(n, merged) == [{"x": 1}, {"x": 2}, {"x": 0.5}, {"x": True}, {}]
    assert [type(r["x"]) for r in records_of(n, merged)[:4]] == [int, int, float, bool]
    same = merge_blocks([ints, ints])[1]["x"]
    assert same.data.dtype == np.int64 and same.tag == TAG_INT  # one shared type stays one tag


def test_merged_strings_share_one_table():
    a = decode_block(encode_block([{"s": "x"}, {"s": "y"}, {"s": None}]))
    b = decode_block(encode_block([{"s": "y"}, {}, {"s": "z"}]))
    c = decode_block(encode_block([{"other": 1}]))
    n, merged = merge_blocks([a, b, c])
    assert merged["s"].enc == "str" and merged["s"].items == ["x", "y", "z"]
    assert records_of(n, merged) == [{"s": "x"}, {"s": "y"}, {"s": None}, {"s": "y"}, {}, {"s": "z"}, {"other": 1}]


def test_a_key_that_changes_kind_between_blocks_becomes_json_values():
    n, merged = merge_blocks([decode_block(encode_block([{"v": 1.5}])), decode_block(encode_block([{"v": "n/a"}]))])
    assert merged["v"].enc == "json" and records_of(n, merged) == [{"v": 1.5}, {"v": "n/a"}]


def test_series_are_float64_with_nan_or_objects_with_none():
    blocks = [encode_block([{"seq": 0, "loss": 1.0, "ok": True, "phase": "a"}, {"seq": 1, "loss": None}]),
              encode_block([{"seq": 2, "loss": 0.5, "ok": False, "phase": 3}])]  # phase: a number here
    series = series_of((decode_block(b) for b in blocks), 3, None)
    assert series["seq"].tolist() == [0.0, 1.0, 2.0] and series["seq"].dtype == np.float64
    assert series["loss"][0] == 1.0 and math.isnan(series["loss"][1]) and series["loss"][2] == 0.5
    assert series["ok"][0] == 1.0 and math.isnan(series["ok"][1]) and series["ok"][2] == 0.0
    assert series["phase"].dtype == object and series["phase"].tolist() == ["a", None, 3.0]
    picked = series_of((decode_block(b) for b in blocks), 3, ["loss", "absent"])
    assert list(picked) == ["loss", "absent"] and np.isnan(picked["absent"]).all()


def test_a_key_numeric_first_and_text_later_turns_the_series_into_objects():
    blocks = [encode_block([{"v": 1.0}, {}]), encode_block([{"v": "x"}])]
    series = series_of((decode_block(b) for b in blocks), 3, None)
    assert series["v"].dtype == object and series["v"].tolist() == [1.0, None, "x"]


def test_empty_blocks_and_records_without_keys():
    assert decode_block(encode_block([])) == (0, {})
    assert round_trip([{}, {}]) == [{}, {}]
    n, merged = merge_blocks([decode_block(encode_block([])), decode_block(encode_block([{"a": 1}]))])
    assert records_of(n, merged) == [{"a": 1}]


def test_the_payload_layout_is_aligned_and_its_arrays_are_read_only_views():
    payload = encode_block([{"seq": i, "loss": i / 3, "tag": "t"} for i in range(5)])
    magic, version, header_len = struct.unpack_from("<4sII", payload)
    assert (magic, version) == (b"DDPB", 1) and (12 + header_len) % 8 == 0 and len(payload) % 8 == 0
    header = json.loads(payload[12:12 + header_len])
    assert header["n"] == 5 and all(entry[3] % 8 == 0 for entry in header["c"])
    _, cols = decode_block(payload)
    assert not cols["loss"].data.flags.writeable
    assert cols["loss"].data.base is not None  # no copy: a view of the payload


@pytest.mark.parametrize("patch", [b"XXXX", struct.pack("<4sI", b"DDPB", 2)])
def test_an_unknown_magic_or_format_version_raises_the_store_error(patch):
    payload = encode_block([{"seq": 0}])
    with pytest.raises(StoreError, match="unknown format"):
        decode_block(patch + payload[len(patch):])


@settings(max_examples=100, deadline=None)
@given(records_lists.filter(bool), st.data())
def test_a_truncated_payload_raises_or_is_only_short_of_padding(records, data):
    """The codec does not check lengths itself: struct/json/numpy refuse a short payload (none returns wrong rows)."""
    payload = encode_block(records)
    cut = data.draw(st.integers(0, len(payload) - 1))
    try:
        back = records_of(*decode_block(payload[:cut]))
    except (struct.error, ValueError):
        return
    assert canon(back) == canon(records)  # only trailing padding was cut
