"""TensorBoard event files read while the script writes them: the scalars, old style and new style.

An event file is a stream of TFRecords (``u64 length``, ``u32 masked crc32c(length)``, ``data``,
``u32 masked crc32c(data)``), each ``data`` one serialized ``Event`` protobuf.  :class:`EventFileTail` keeps
the offset just past the last whole record, as our spools keep byte offsets; a record the writer has only
partly written is left where it is and read again, whole, once the file has grown (TensorBoard's own
``event_file_loader`` does the same).  Bad input never stops the reading:

- a length whose CRC does not match (flipped bytes, garbage written in) is counted in ``corrupt`` and the
  reader resyncs to the next offset that holds a valid header;
- a record whose data does not parse as an ``Event`` (or whose data CRC fails, checked only when the fast
  ``google_crc32c``/``crc32c`` module is importable) is counted and skipped whole;
- :meth:`EventFileTail.finish`, at the run's end, counts a last record that never got whole (``truncated``).

The ``Event`` protobuf comes from the host Python's ``tensorboard`` (else ``tensorboardX``): the script that
wrote the file needed one of them.  Without either, ``unavailable`` says so in words and nothing is read.
"""
import os
import struct
from typing import Callable, NamedTuple, Optional

#: Bytes read from the file at a time (a poll reads as many pieces as the file has grown by).
READ_PIECE = 4 << 20
#: A length above this is no record of ours: its header is treated as corrupt.
MAX_RECORD = 256 << 20

_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C, in pure Python: cheap for the 8 length bytes of a header."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _fast_data_crc() -> Optional[Callable[[bytes], int]]:
    """A C implementation of the masked CRC-32C for the records' data, when the host has one."""
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":
            plain = google_crc32c.value
        else:
            return None
    except Exception:
        try:
            import crc32c

            plain = crc32c.crc32c
        except Exception:
            return None

    def masked(data: bytes) -> int:
        crc = plain(data)
        return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF

    return masked


class Scalar(NamedTuple):
    step: int
    wall_time: float
    tag: str
    value: float


# TensorFlow's DataType numbers (tensorflow/core/framework/types.proto) → (the TensorProto field, struct format
# of one value in tensor_content).
_DTYPES = {1: ("float_val", "<f"), 2: ("double_val", "<d"), 3: ("int_val", "<i"), 4: ("int_val", "<B"),
           5: ("int_val", "<h"), 6: ("int_val", "<b"), 9: ("int64_val", "<q"), 17: ("int_val", "<H"),
           22: ("uint32_val", "<I"), 23: ("uint64_val", "<Q")}
_DT_BFLOAT16, _DT_HALF = 14, 19


def _tensor_value(tensor) -> Optional[float]:
    """The number a scalar TensorProto holds, or None when it holds something else."""
    dims = tensor.tensor_shape.dim
    if dims and any(dim.size != 1 for dim in dims):
        return None
    dtype = tensor.dtype
    if dtype == 1 and tensor.float_val:  # the common cases first: DT_FLOAT, DT_DOUBLE
        return tensor.float_val[0]
    if dtype == 2 and tensor.double_val:
        return tensor.double_val[0]
    if dtype in (_DT_HALF, _DT_BFLOAT16):
        if tensor.half_val:
            bits = tensor.half_val[0]
        elif len(tensor.tensor_content) >= 2:
            bits = struct.unpack_from("<H", tensor.tensor_content)[0]
        else:
            return None
        if dtype == _DT_HALF:
            return struct.unpack("<e", struct.pack("<H", bits))[0]
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    kind = _DTYPES.get(dtype)
    if kind is None:
        return None
    values = getattr(tensor, kind[0])
    if values:
        return float(values[0])
    if len(tensor.tensor_content) >= struct.calcsize(kind[1]):
        return float(struct.unpack_from(kind[1], tensor.tensor_content)[0])
    return None


def _event_class():
    """(the Event protobuf class, None) from the host's tensorboard or tensorboardX, else (None, why)."""
    reasons = []
    for module in ("tensorboard.compat.proto.event_pb2", "tensorboardX.proto.event_pb2"):
        try:
            event_pb2 = __import__(module, fromlist=["Event"])
            return event_pb2.Event, None
        except Exception as exc:  # not installed, or a protobuf that does not fit it
            reasons.append("%s (%s: %s)" % (module.split(".")[0], type(exc).__name__, exc))
    return None, ("TensorBoard event files cannot be decoded by this host's Python: neither tensorboard nor "
                  "tensorboardX imports (%s)" % "; ".join(reasons))


class EventFileTail:
    """Incremental reader of one TensorBoard event file: call :meth:`read` as often as you like.

    ``offset`` is the byte just past the last whole record read (or skipped); ``records`` counts whole
    records; ``corrupt`` records (or stretches of garbage) skipped; ``truncated`` is 1 once :meth:`finish`
    found a last record that never got whole.  ``unavailable`` is None, or why nothing can be read here.
    """

    def __init__(self, path: str, offset: int = 0):
        self.path = path
        self.offset = offset
        self.records = 0
        self.corrupt = 0
        self.truncated = 0
        self.truncated_bytes = 0
        event_class, self.unavailable = _event_class()
        # one message parsed into again and again: a new one per record costs 4 times as much (upb), and the
        # scalars are copied out of it at once
        self._event = event_class() if event_class is not None else None
        self._data_crc = _fast_data_crc()
        self._fh = None
        self._buf = b""  # the bytes from ``offset`` on that are read but not yet a whole record
        self._plugins: dict[str, str] = {}  # tag → the plugin its metadata named (written with its first value)
        self._in_garbage = False  # resyncing: the stretch being skipped is counted once
        self._header_crcs: dict[int, int] = {}  # length → its masked CRC (records' lengths repeat)

    def read(self) -> list[Scalar]:
        """The scalars of every record that got whole since the last call (in file order)."""
        if self.unavailable:
            return []
        out: list[Scalar] = []
        while self._fill():
            self._parse(out)
        return out

    def finish(self) -> list[Scalar]:
        """Read what is left at the run's end; a last record still partial is counted in ``truncated``."""
        out = self.read()
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._buf and not self.unavailable and not self._in_garbage:
            self.truncated, self.truncated_bytes = 1, len(self._buf)
            self.offset += len(self._buf)
            self._buf = b""
        return out

    def _fill(self) -> bool:
        """Append what the file has grown by (up to READ_PIECE) to the buffer; False when nothing came."""
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except OSError:
                return False
        end = self.offset + len(self._buf)
        try:
            size = os.fstat(self._fh.fileno()).st_size
            if size <= end:
                return False
            self._fh.seek(end)
            data = self._fh.read(min(size - end, READ_PIECE))
        except OSError:
            return False
        self._buf += data
        return bool(data)

    def _parse(self, out: list[Scalar]) -> None:
        """Take every whole record off the front of the buffer."""
        buf, pos, n = self._buf, 0, len(self._buf)
        header_crcs = self._header_crcs
        while n - pos >= 12:
            length, length_crc = _HEADER.unpack_from(buf, pos)
            expected = header_crcs.get(length)
            if expected is None and length <= MAX_RECORD:
                if len(header_crcs) > 4096:
                    header_crcs.clear()
                expected = header_crcs[length] = masked_crc32c(buf[pos:pos + 8])
            if expected != length_crc:
                if not self._in_garbage:
                    self.corrupt += 1
                    self._in_garbage = True
                pos = self._resync(buf, pos + 1)
                continue
            self._in_garbage = False
            end = pos + 12 + length + 4
            if end > n:
                break
            data = buf[pos + 12:end - 4]
            if self._data_crc is not None and self._data_crc(data) != _U32.unpack_from(buf, end - 4)[0]:
                self.corrupt += 1
            else:
                self._scalars(data, out)
            pos = end
        self._buf = buf[pos:]
        self.offset += pos

    def _resync(self, buf: bytes, pos: int) -> int:
        """The first offset from ``pos`` on where a valid header starts (or where one may start once more bytes
        come: the last 11 bytes are kept)."""
        n = len(buf)
        while n - pos >= 12:
            if buf[pos] == 0 and buf[pos:pos + 12] == b"\0" * 12:  # a run of zeros (a crash's hole): jump over it
                run_end = n - len(buf[pos:].lstrip(b"\0"))
                pos = max(pos + 1, run_end - 11)
                continue
            length, length_crc = _HEADER.unpack_from(buf, pos)
            if length <= MAX_RECORD and masked_crc32c(buf[pos:pos + 8]) == length_crc:
                return pos
            pos += 1
        return pos

    def _scalars(self, data: bytes, out: list[Scalar]) -> None:
        try:
            self._event.ParseFromString(data)
        except Exception:  # a DecodeError, or worse from a damaged record
            self.corrupt += 1
            return
        self.records += 1
        event_scalars(self._event, self._plugins, out)


def event_scalars(event, plugins: dict[str, str], out: list[Scalar]) -> None:
    """Append the scalars of one ``Event`` to ``out``; ``plugins`` (tag → plugin, kept by the caller across the
    events of a file) remembers the metadata that only a tag's first value carries."""
    values = event.summary.value
    if not values:
        return
    step, wall_time = event.step, event.wall_time
    for value in values:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            out.append(Scalar(step, wall_time, value.tag, value.simple_value))
        elif kind == "tensor":
            tag = value.tag
            plugin = plugins.get(tag)
            if plugin is None:
                plugin = value.metadata.plugin_data.plugin_name
                if plugin:
                    plugins[tag] = plugin
                else:  # no metadata seen (read from the middle of the file): a lone number is a scalar
                    plugin = "scalars"
            if plugin == "scalars":
                number = _tensor_value(value.tensor)
                if number is not None:
                    out.append(Scalar(step, wall_time, tag, number))
