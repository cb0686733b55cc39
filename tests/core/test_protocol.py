"""The follow stream's framing, decoded from pieces of any size."""
import json

import pytest

from ddpgui.core.runs.protocol import Chunk, End, FollowDecoder, Heartbeat, ProtocolError, parse_records


def _frame(spool, start, data):
    return json.dumps({"spool": spool, "start": start, "end": start + len(data), "n": len(data)}).encode() + b"\n" + data


STREAM = (_frame("metrics.jsonl", 0, b'{"seq":0,"step":1}\n{"seq":1,"step":2}\n')
          + b'{"hb": 12.5, "state": "running"}\n'
          + _frame("stdout.log", 0, b"hello {not json}\n")
          + b'{"end": true, "status": {"state": "finished"}, "offsets": {"metrics.jsonl": 38}}\n')


@pytest.mark.parametrize("piece", [1, 3, 7, 64, len(STREAM)])
def test_decoder_handles_any_split(piece):
    decoder = FollowDecoder()
    messages = []
    for i in range(0, len(STREAM), piece):
        messages += decoder.feed(STREAM[i:i + piece])
    assert [type(m) for m in messages] == [Chunk, Heartbeat, Chunk, End]
    assert messages[0].data.count(b"\n") == 2 and messages[0].end == 38
    assert messages[2].spool == "stdout.log" and messages[2].data == b"hello {not json}\n"
    assert messages[3].ended and messages[3].status["state"] == "finished"
    assert decoder.idle


def test_garbage_frame_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        FollowDecoder().feed(b"Traceback (most recent call last):\n")
    with pytest.raises(ProtocolError):
        FollowDecoder().feed(b'{"spool": "../../etc/passwd", "start": 0, "end": 1, "n": 1}\n')


def test_parse_records_skips_and_returns_corrupt_lines():
    records, bad = parse_records(b'{"seq":0}\n{"seq":1,"lo\n[1,2]\n\n{"seq":2}\n')
    assert [r["seq"] for r in records] == [0, 2]
    assert bad == [b'{"seq":1,"lo', b"[1,2]"]
