"""The mplex wire format: flags, frames and the Encoder (sans-IO).

Wire format (libp2p mplex spec, "Message format")::

    header (uvarint) | length (uvarint) | length bytes of data
    header = stream_id << 3 | flag

The incremental ``Decoder`` lives in ``decoder``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import NamedTuple

from .varint import MAX_VARINT_BYTES, TABLE_LIMIT, VARINTS, encode_uvarint, encode_uvarints

__all__ = [
    "MAX_MESSAGE_SIZE",
    "MAX_STREAM_ID",
    "PROTOCOL_ID",
    "Encoder",
    "Flag",
    "Frame",
    "frame_prefix",
    "name_bytes",
]

# --- libp2p mplex spec, "Protocol" and "Message format" -------------------------------

#: The multistream-select protocol id of this mplex version.
PROTOCOL_ID = "/mplex/6.7.0"
#: "up to 1MiB per message": the largest body we send, and the default receive limit.
MAX_MESSAGE_SIZE = 1 << 20
#: A header is a 9-byte varint carrying the id shifted left by 3, so ids fit in 60 bits.
MAX_STREAM_ID = (1 << 60) - 1
#: The longest header + length prefix: two 9-byte varints.
MAX_PREFIX_BYTES = 2 * MAX_VARINT_BYTES


class Flag(enum.IntEnum):
    """The low three bits of a frame header.

    Even flags are sent by the side that opened the stream, odd ones by the side that
    accepted it; 7 is undefined.
    """

    #: "NewStream": the opener announces a stream; the body is its name.
    NEW_STREAM = 0
    #: "MessageReceiver": data from the side that accepted the stream.
    MESSAGE_RECEIVER = 1
    #: "MessageInitiator": data from the side that opened the stream.
    MESSAGE_INITIATOR = 2
    #: "CloseReceiver": the acceptor will send no more data (half-close).
    CLOSE_RECEIVER = 3
    #: "CloseInitiator": the opener will send no more data (half-close).
    CLOSE_INITIATOR = 4
    #: "ResetReceiver": the acceptor aborts the stream in both directions.
    RESET_RECEIVER = 5
    #: "ResetInitiator": the opener aborts the stream in both directions.
    RESET_INITIATOR = 6

    @property
    def from_initiator(self) -> bool:
        """True for the flags that the stream's opener sends."""
        return not self & 1


class Frame(NamedTuple):
    """One decoded mplex frame."""

    stream_id: int
    flag: Flag
    data: bytes

    @property
    def header(self) -> int:
        """The header value as it travels on the wire."""
        return self.stream_id << 3 | self.flag


def frame_prefix(stream_id: int, flag: int, size: int) -> bytes:
    """What goes before a frame's body: its header and length varints.  The one place a
    frame's prefix is made; the caller vouches for the ranges (``Encoder`` checks them
    for callers that cannot)."""
    header = stream_id << 3 | flag
    if header < TABLE_LIMIT and size < TABLE_LIMIT:  # the common case, without a call
        return VARINTS[header] + VARINTS[size]
    return encode_uvarints(header, size)


class Encoder:
    """Turns mplex messages into wire bytes.

    Every frame comes out as ONE contiguous ``bytes`` (header, length and body
    together), so a transport write never splits a frame into a small header packet
    and a body packet.  Data longer than ``frame_size`` is split into several frames.
    """

    __slots__ = ("frame_size",)

    def __init__(self, frame_size: int = MAX_MESSAGE_SIZE) -> None:
        if not 1 <= frame_size <= MAX_MESSAGE_SIZE:
            raise ValueError(f"frame_size must be in 1..{MAX_MESSAGE_SIZE}, got {frame_size}")
        self.frame_size = frame_size

    def frame(self, stream_id: int, flag: Flag, data: bytes | bytearray | memoryview = b"") -> bytes:
        """Encode exactly one frame; ``data`` must fit in ``frame_size``."""
        if not 0 <= stream_id <= MAX_STREAM_ID:
            raise ValueError(f"stream id out of range: {stream_id}")
        if len(data) > self.frame_size:
            raise ValueError(f"{len(data)} bytes do not fit one frame of {self.frame_size}")
        return frame_prefix(stream_id, flag, len(data)) + data

    def prefix(self, stream_id: int, flag: Flag, size: int) -> bytes:
        """The header and length varints of a frame of ``size`` body bytes: what goes
        before the body (senders that keep bodies apart, for ``writev``, or that cache
        it for a run of equal sizes)."""
        if not 0 <= stream_id <= MAX_STREAM_ID:
            raise ValueError(f"stream id out of range: {stream_id}")
        if not 0 <= size <= self.frame_size:
            raise ValueError(f"{size} bytes do not fit one frame of {self.frame_size}")
        return frame_prefix(stream_id, flag, size)

    def append(self, out: bytearray, stream_id: int, flag: Flag, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` to ``out`` as whole frames of at most ``frame_size`` bytes
        (one empty frame for empty ``data``); return how many frames.  Each frame is
        appended whole, so a buffer shared by several senders never holds a part."""
        view = memoryview(data).cast("B") if not isinstance(data, bytes | bytearray) else data
        size = self.frame_size
        if len(view) <= size:
            out += self.prefix(stream_id, flag, len(view))
            out += view
            return 1
        head = self.prefix(stream_id, flag, 0)[:-1]  # validates; a zero length is one byte
        pieces = memoryview(view)
        count = 0
        for start in range(0, len(pieces), size):
            piece = pieces[start : start + size]
            out += head
            out += encode_uvarint(len(piece))
            out += piece
            count += 1
        return count

    def frames(self, stream_id: int, flag: Flag, data: bytes | bytearray | memoryview) -> Iterator[bytes]:
        """Encode ``data`` as as many frames of at most ``frame_size`` bytes as it needs."""
        view = memoryview(data)
        size = self.frame_size
        for start in range(0, len(view), size):
            yield self.frame(stream_id, flag, view[start : start + size])


def name_bytes(name: str | bytes | None, limit: int) -> bytes | None:
    """A stream name as ``open_stream`` takes it, as the bytes to send (None: the
    default); a wrong type, or a name over ``limit`` bytes, raises before anything is
    taken or sent."""
    if name is None:
        return None
    if isinstance(name, str):
        raw = name.encode()
    elif isinstance(name, bytes):
        raw = bytes(name)
    else:
        raise TypeError(f"a stream name is str, bytes or None, not {type(name).__name__}")
    if len(raw) > limit:
        raise ValueError(
            f"a stream name may have at most {limit} bytes (Config.max_stream_name_size, "
            f"within one frame of Config.max_send_frame_size); this one has {len(raw)}"
        )
    return raw
