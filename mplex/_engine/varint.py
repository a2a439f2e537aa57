"""Unsigned varints as multiformats defines them (sans-IO).

Seven bits per byte, least significant group first, high bit set on every byte but
the last.  mplex caps them at 9 bytes (63 bits) and we only accept the minimal
encoding, as go-mplex and rust-libp2p do: a longer-than-needed varint can only come
from a broken or hostile encoder, and accepting it would let one value have many
spellings on the wire.

Encoding goes through a precomputed table for values below 2**14, which covers every
stream id below 2048 with its flag and every frame length up to 16 KiB: the common
case costs one tuple index instead of a loop; three-byte values (stream ids up to
262,143) are built directly.
"""

from __future__ import annotations

from .errors import InvalidVarintError

__all__ = [
    "MAX_VARINT_BYTES",
    "MAX_VARINT_VALUE",
    "TABLE_LIMIT",
    "VARINTS",
    "decode_uvarint",
    "encode_uvarint",
    "encode_uvarints",
]

#: The longest varint mplex allows (multiformats unsigned-varint spec).
MAX_VARINT_BYTES = 9
#: The largest value a 9-byte varint can carry.
MAX_VARINT_VALUE = 2**63 - 1

#: Values below this are encoded by ``VARINTS[value]``.
TABLE_LIMIT = 1 << 14
_THREE_BYTES_LIMIT = 1 << 21


def _encode_slow(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: The encoding of every value below ``TABLE_LIMIT``, for hot paths that index it
#: themselves (a frame's prefix).
VARINTS: tuple[bytes, ...] = tuple(_encode_slow(v) for v in range(TABLE_LIMIT))


def encode_uvarint(value: int) -> bytes:
    """Return the minimal varint encoding of ``value`` (0 <= value < 2**63)."""
    if 0 <= value < TABLE_LIMIT:
        return VARINTS[value]
    if 0 <= value < _THREE_BYTES_LIMIT:
        # Stream ids from 2048 on (a long-lived connection's): three bytes, no loop.
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0 or value > MAX_VARINT_VALUE:
        raise ValueError(f"varint value out of range: {value}")
    return _encode_slow(value)


def encode_uvarints(first: int, second: int) -> bytes:
    """The varints of ``first`` and ``second``, back to back (a frame's header and
    length).  ``frame_prefix`` indexes ``VARINTS`` itself for two values below
    ``TABLE_LIMIT``; a three-byte header (a stream id from 2048 on) before a table
    length is built here without a call per value."""
    if TABLE_LIMIT <= first < _THREE_BYTES_LIMIT and 0 <= second < TABLE_LIMIT:
        return bytes(((first & 0x7F) | 0x80, ((first >> 7) & 0x7F) | 0x80, first >> 14)) + VARINTS[second]
    return encode_uvarint(first) + encode_uvarint(second)


def decode_uvarint(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int] | None:
    """Decode one varint from ``data`` starting at ``pos``.

    Returns ``(value, next_pos)``, or ``None`` when ``data`` ends before the varint
    does.  Raises ``InvalidVarintError`` for a varint longer than 9 bytes or one that
    is not minimally encoded; both are detected as early as the bytes allow.
    """
    value = 0
    shift = 0
    end = len(data)
    start = pos
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and pos - start > 1:
                raise InvalidVarintError("varint is not minimally encoded", offset=start)
            return value, pos
        shift += 7
        if pos - start >= MAX_VARINT_BYTES:
            raise InvalidVarintError(f"varint is longer than {MAX_VARINT_BYTES} bytes", offset=start)
    return None
