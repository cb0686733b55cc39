"""EventFileTail on event files written by the real writers: PyTorch's SummaryWriter (old and new style) and
TensorBoard's own EventFileWriter; tailing while a writer appends; corrupt, truncated and empty files."""
import random
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_masked_crc32c
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from torch.utils.tensorboard import SummaryWriter

from remote_runner.scriptread.tbevents import EventFileTail, Scalar, masked_crc32c


def _event_file(folder: Path) -> Path:
    (path,) = folder.glob("events.out.tfevents.*")
    return path


def _f32(x: float) -> float:
    return float(np.float32(x))


def _summary_writer_file(folder: Path, steps: int = 20, new_style: bool = False, double: bool = False) -> Path:
    """A SummaryWriter run: train/loss and lr every step, a histogram, a text and an image between them."""
    writer = SummaryWriter(str(folder))
    for step in range(steps):
        writer.add_scalar("train/loss", 2.0 / (step + 1), step, new_style=new_style, double_precision=double)
        writer.add_scalar("learning_rate", 1e-3 * 0.9 ** step, step, new_style=new_style, double_precision=double)
        if step == 3:
            writer.add_histogram("weights", np.arange(10.0), step)
            writer.add_text("note", "hello", step)
            writer.add_image("img", np.zeros((3, 4, 4)), step)
    writer.close()
    return _event_file(folder)


def _expected(steps: int, exact: bool) -> list[tuple[int, str, float]]:
    conv = float if exact else _f32
    out = []
    for step in range(steps):
        out += [(step, "train/loss", conv(2.0 / (step + 1))), (step, "learning_rate", conv(1e-3 * 0.9 ** step))]
    return out


def _triples(scalars: list[Scalar]) -> list[tuple[int, str, float]]:
    return [(s.step, s.tag, s.value) for s in scalars]


def _record_bounds(data: bytes) -> list[int]:
    """The end offset of every record of an event file's bytes."""
    bounds, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 16 + length
        bounds.append(pos)
    return bounds


def test_old_style_scalars_of_summary_writer(tmp_path):
    path = _summary_writer_file(tmp_path)
    tail = EventFileTail(str(path))
    assert tail.unavailable is None
    scalars = tail.read()
    assert _triples(scalars) == _expected(20, exact=False)  # simple_value is a float32
    assert all(s.wall_time > 1e9 for s in scalars)
    assert tail.corrupt == 0 and tail.records == 1 + 40 + 3  # the file_version event, scalars, hist/text/image
    assert tail.finish() == [] and tail.truncated == 0 and tail.offset == path.stat().st_size


@pytest.mark.parametrize("double", [False, True], ids=["float", "double"])
def test_new_style_scalars_of_summary_writer(tmp_path, double):
    path = _summary_writer_file(tmp_path, new_style=True, double=double)
    assert _triples(EventFileTail(str(path)).read()) == _expected(20, exact=double)


def test_tensorboard_writer_metadata_on_the_first_value_only_and_other_dtypes(tmp_path):
    """TensorBoard's own writer, with values as tf.summary writes them: the scalars plugin's metadata on a
    tag's first value only, values in tensor_content, and int64, half and bfloat16 tensors."""
    writer = EventFileWriter(str(tmp_path))

    def add(step, tag, tensor, first):
        metadata = scalar_metadata.create_summary_metadata(display_name=tag, description="") if first else None
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)
        writer.add_event(event_pb2.Event(step=step, wall_time=1000.0 + step, summary=summary_pb2.Summary(value=[value])))

    for step in range(3):
        add(step, "loss", tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE,
                                                 tensor_content=struct.pack("<d", 1.0 / 3 + step)), step == 0)
        add(step, "tokens", tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, int64_val=[1000 * step]), step == 0)
        add(step, "half", tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF,
                                                 half_val=[int(np.float16(0.5 + step).view(np.uint16))]), step == 0)
        bf16 = int(np.float32(1.5 + step).view(np.uint32)) >> 16
        add(step, "bf16", tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, half_val=[bf16]), step == 0)
    text = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    writer.add_event(event_pb2.Event(step=3, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag="note", tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"hi"]), metadata=text)])))
    writer.close()
    scalars = EventFileTail(str(_event_file(tmp_path))).read()
    assert _triples(scalars) == [t for step in range(3) for t in (
        (step, "loss", 1.0 / 3 + step), (step, "tokens", 1000.0 * step), (step, "half", 0.5 + step),
        (step, "bf16", 1.5 + step))]
    assert [s.wall_time for s in scalars[::4]] == [1000.0, 1001.0, 1002.0]


def test_the_header_crc_is_tensorboards():
    rng = random.Random(1)
    for _ in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 8, 8, 30])))
        assert masked_crc32c(data) == tensorboard_masked_crc32c(data)


def test_tailing_a_live_summary_writer(tmp_path):
    writer = SummaryWriter(str(tmp_path), flush_secs=3600)
    writer.add_scalar("loss", 1.0, 0)
    writer.flush()
    tail = EventFileTail(str(_event_file(tmp_path)))
    assert _triples(tail.read()) == [(0, "loss", 1.0)]
    assert tail.read() == []
    for step in range(1, 4):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.flush()
        assert _triples(tail.read()) == [(step, "loss", _f32(1.0 / (step + 1)))]
    writer.close()
    assert tail.finish() == [] and tail.truncated == 0


def test_a_record_cut_in_the_middle_is_waited_for(tmp_path):
    source = _summary_writer_file(tmp_path / "w", steps=5)
    data = source.read_bytes()
    bounds = _record_bounds(data)
    path = tmp_path / "events.out.tfevents.tail"
    path.write_bytes(b"")
    tail = EventFileTail(str(path))
    got = []
    with path.open("ab") as fh:
        start = 0
        for end in bounds:
            middle = start + (end - start) // 2
            fh.write(data[start:middle])
            fh.flush()
            got += tail.read()  # half a record: nothing of it yet
            assert tail.offset == start
            fh.write(data[middle:end])
            fh.flush()
            got += tail.read()
            assert tail.offset == end
            start = end
    assert _triples(got) == _expected(5, exact=False) and tail.corrupt == 0


def test_byte_by_byte_appends_give_each_record_once(tmp_path):
    data = _summary_writer_file(tmp_path / "w", steps=3).read_bytes()
    path = tmp_path / "events.out.tfevents.tail"
    path.write_bytes(b"")
    tail = EventFileTail(str(path))
    got = []
    with path.open("ab", buffering=0) as fh:
        for i in range(len(data)):
            fh.write(data[i:i + 1])
            got += tail.read()
    assert _triples(got) == _expected(3, exact=False) and tail.corrupt == 0


def _damaged(tmp_path: Path, damage) -> tuple[Path, list[int]]:
    data = bytearray(_summary_writer_file(tmp_path / "w", steps=10).read_bytes())
    bounds = _record_bounds(bytes(data))
    data = damage(data, bounds)
    path = tmp_path / "events.out.tfevents.damaged"
    path.write_bytes(bytes(data))
    return path, bounds


def test_a_flipped_length_is_counted_and_everything_after_it_read(tmp_path):
    def flip(data, bounds):  # record 5 (step 2's train/loss): its length bytes
        data[bounds[4]] ^= 0xFF
        data[bounds[4] + 1] ^= 0x5A
        return data

    path, _ = _damaged(tmp_path, flip)
    tail = EventFileTail(str(path))
    scalars = tail.read()
    expected = _expected(10, exact=False)
    assert _triples(scalars) == expected[:4] + expected[5:]
    assert tail.corrupt == 1
    assert tail.finish() == [] and tail.truncated == 0


def test_garbage_between_records_and_a_zeroed_hole_are_skipped(tmp_path):
    def insert(data, bounds):
        rng = random.Random(7)
        garbage = bytes(rng.randrange(256) for _ in range(333))
        return data[:bounds[10]] + b"\0" * 5000 + data[bounds[10]:bounds[20]] + garbage + data[bounds[20]:]

    path, _ = _damaged(tmp_path, insert)
    tail = EventFileTail(str(path))
    assert _triples(tail.read()) == _expected(10, exact=False)
    assert tail.corrupt == 2


def test_a_record_whose_data_does_not_parse_is_counted_and_skipped(tmp_path):
    def smash(data, bounds):  # record 3's data (its framing intact): 0xFF bytes, not a protobuf
        start = bounds[2] + 12
        data[start:bounds[3] - 4] = b"\xff" * (bounds[3] - 4 - start)
        return data

    path, _ = _damaged(tmp_path, smash)
    tail = EventFileTail(str(path))
    expected = _expected(10, exact=False)
    assert _triples(tail.read()) == expected[:2] + expected[3:]
    assert tail.corrupt == 1


def test_a_truncated_file(tmp_path):
    data = _summary_writer_file(tmp_path / "w", steps=5).read_bytes()
    bounds = _record_bounds(data)
    path = tmp_path / "events.out.tfevents.cut"
    path.write_bytes(data[:bounds[-1] - 7])  # the last record (step 4's lr) cut 7 bytes short
    tail = EventFileTail(str(path))
    assert _triples(tail.read()) == _expected(5, exact=False)[:-1]
    assert tail.truncated == 0
    assert tail.finish() == []
    assert tail.truncated == 1 and tail.truncated_bytes == bounds[-1] - 7 - bounds[-2] and tail.corrupt == 0


def test_an_empty_file_and_one_not_there_yet(tmp_path):
    empty = tmp_path / "events.out.tfevents.empty"
    empty.write_bytes(b"")
    tail = EventFileTail(str(empty))
    assert tail.read() == [] and tail.finish() == []
    assert (tail.records, tail.corrupt, tail.truncated) == (0, 0, 0)
    later = tmp_path / "events.out.tfevents.later"
    tail = EventFileTail(str(later))
    assert tail.read() == []
    later.write_bytes(_summary_writer_file(tmp_path / "w", steps=2).read_bytes())
    assert _triples(tail.read()) == _expected(2, exact=False)


def test_without_tensorboard_or_tensorboardx_it_says_why(tmp_path, monkeypatch):
    path = _summary_writer_file(tmp_path, steps=2)
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    tail = EventFileTail(str(path))
    assert "neither tensorboard nor tensorboardX" in tail.unavailable
    assert tail.read() == [] and tail.finish() == [] and tail.truncated == 0
