"""TensorBoard's event-file format, written without TensorBoard's summary package.

``tensorboard.summary.writer.record_writer`` (and ``torch.utils.tensorboard.summary``) import the whole
summary package, which pulls in absl flags, fsspec and TensorBoard's TensorFlow stub: 40-150 ms of every
run's start-up, before the first step. An event file is a sequence of TFRecords holding serialized
``Event`` protos; the framing is a few lines, and the protos come from TensorBoard's own light modules.
"""

import struct
from pathlib import Path

from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # CRC-32C (Castagnoli), reflected
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated and offset so a checksum of checksums stays informative."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tf_record(data: bytes) -> bytes:
    """One TFRecord: little-endian uint64 length, the length's masked CRC, the data, the data's."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def text_summary(tag: str, text: str) -> Summary:
    """What ``torch.utils.tensorboard``'s ``add_text`` writes: TensorBoard's text dashboard reads it
    under ``<tag>/text_summary``."""
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name="text", content=TextPluginData(version=0).SerializeToString()
        )
    )
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[text.encode("utf-8")],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary(value=[Summary.Value(tag=f"{tag}/text_summary", metadata=metadata, tensor=tensor)])


def read_records(data: bytes) -> list[bytes]:
    """The whole TFRecords of an event file's bytes, in order; a torn last record (a write in progress)
    is left out. Lengths are trusted only as far as the bytes go: the checksums are TensorBoard's job."""
    records, at = [], 0
    while at + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[at : at + 8])
        end = at + 12 + length + 4
        if end > len(data):
            break
        records.append(data[at + 12 : at + 12 + length])
        at = end
    return records


def wall_time_span(path: Path) -> tuple[float, float] | None:
    """The wall times of an event file's first and last events: while its process logged (one file
    per process of a run, as runner writes them). ``None`` for a file without a whole event."""
    try:
        records = read_records(path.read_bytes())
    except OSError:
        return None
    if not records:
        return None
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    try:
        first, last = Event.FromString(records[0]), Event.FromString(records[-1])
    except DecodeError:  # records, but not of events
        return None
    return first.wall_time, last.wall_time


def holds_only_events(path: Path) -> bool:
    """Whether every whole record of an event file is an event (TensorBoard's reader raises on one that
    is not)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    try:
        for record in read_records(path.read_bytes()):
            Event.FromString(record)
    except (OSError, DecodeError):
        return False
    return True
