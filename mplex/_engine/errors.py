"""The mplex exception tree for protocol errors (sans-IO: no trio import).

``MplexError`` is the root of everything this package raises on its own account.
``ProtocolError`` means the bytes on the wire broke the mplex rules; the trio layer
turns it into a closed connection and a ``trio.BrokenResourceError`` on every stream,
chained to the ``ProtocolError`` so the cause is never lost.  The reset and
connection-loss errors derive from ``trio.BrokenResourceError`` and live in the trio
layer (``mplex._trio.errors``), so that this module stays importable without trio.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FrameTooLargeError",
    "InvalidVarintError",
    "MplexError",
    "ProtocolError",
    "UnknownFlagError",
]


class MplexError(Exception):
    """Base class of every error defined by this package."""


class ProtocolError(MplexError):
    """The peer sent bytes that break the mplex protocol.

    The connection cannot be trusted after this: the muxer closes it.
    ``offset`` is the position in the received byte stream where the
    offending frame starts, when known.
    """

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        #: Frames that the same input completed before the error (set by the Decoder).
        self.decoded: list[Any] = []


class InvalidVarintError(ProtocolError):
    """A varint was longer than 9 bytes or not minimally encoded."""


class FrameTooLargeError(ProtocolError):
    """A frame declared a body longer than the configured ``max_message_size``.

    Raised as soon as the length varint is decoded, before any body byte is buffered.
    """

    def __init__(self, length: int, limit: int, *, offset: int | None = None) -> None:
        super().__init__(
            f"frame declares {length} body bytes, over the limit of {limit}",
            offset=offset,
        )
        self.length = length
        self.limit = limit


class UnknownFlagError(ProtocolError):
    """A frame carried flag 7, which the mplex spec does not define."""

    def __init__(self, stream_id: int, *, offset: int | None = None) -> None:
        super().__init__(f"frame for stream {stream_id} has the undefined flag 7", offset=offset)
        self.stream_id = stream_id
