"""``mplex decode``: a recorded byte stream, frame by frame."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._engine.decoder import Decoder
from .._engine.errors import ProtocolError
from .._engine.multistream import NegotiationError, leading_handshake
from .._engine.varint import encode_uvarint
from .._engine.wire import PROTOCOL_ID, Frame
from .errors import CommandError
from .output import print_table

__all__ = ["decode_command"]


def decode_command(args: argparse.Namespace) -> int:
    """Print the frames of the capture in ``args.file``; 1 if it is malformed."""
    raw = sys.stdin.buffer.read() if args.file == "-" else _read_file(args.file)
    if args.hex:
        try:
            raw = bytes.fromhex(raw.decode("ascii", errors="replace").replace("\n", " "))
        except ValueError as exc:
            raise CommandError(f"the input is not valid hex: {exc}") from None
    start = args.offset if args.offset is not None else _handshake_end(raw)
    if start > len(raw):
        raise CommandError(f"--offset {start} is past the end of the capture ({len(raw)} bytes)")
    decoder = Decoder(args.max_message_size)
    error: ProtocolError | None = None
    try:
        frames = decoder.feed(raw[start:])
    except ProtocolError as exc:
        frames, error = exc.decoded, exc
    rows = []
    offset = start
    for frame in frames:
        side = "opener" if frame.flag.from_initiator else "acceptor"
        rows.append(
            [
                str(offset),
                str(frame.stream_id),
                side,
                frame.flag.name,
                str(len(frame.data)),
                _preview(frame.data),
            ]
        )
        offset += _frame_size(frame)
    print_table(
        f"{_count(len(frames), 'frame')} in {_count(len(raw) - start, 'byte')}"
        + (f" from byte {start}" if start else ""),
        ["offset", "stream", "sent by", "flag", "length", "data"],
        rows,
        plain=args.plain,
    )
    if error is not None:
        where = start + error.offset if error.offset is not None else offset
        print(f"mplex decode: stops at byte {where}: {error}", file=sys.stderr)
        return 1
    if decoder.buffered:
        print(
            f"note: the capture ends inside a frame starting at byte {offset} "
            f"({len(raw) - offset} bytes of it present)",
            file=sys.stderr,
        )
    return 0


def _handshake_end(raw: bytes) -> int:
    """Where the frames begin: after a leading multistream-select handshake, if any."""
    try:
        found = leading_handshake(raw, PROTOCOL_ID)
    except NegotiationError as exc:
        raise CommandError(f"the capture starts with multistream-select, but {exc} (see --offset)") from None
    if found is None:
        return 0
    messages, end = found
    print(
        f"note: skipped the multistream-select handshake, bytes 0-{end - 1}: {', '.join(messages)}",
        file=sys.stderr,
    )
    return end


def _read_file(name: str) -> bytes:
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror}") from None


def _preview(data: bytes, limit: int = 16) -> str:
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in data[:limit])
    more = "..." if len(data) > limit else ""
    return f"{data[:limit].hex(' ')}{more}  |{text}|" if data else ""


def _frame_size(frame: Frame) -> int:
    """Bytes the frame took on the wire (varints are minimal, or it was rejected)."""
    return len(encode_uvarint(frame.header)) + len(encode_uvarint(len(frame.data))) + len(frame.data)


def _count(number: int, noun: str) -> str:
    """``1 frame``, ``2 frames``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
