"""Errors of the trio layer: why a stream or a connection stopped working.

``StreamReset`` and ``ConnectionLost`` derive from ``trio.BrokenResourceError`` (the
peer or the transport failed), ``MuxerClosed`` from ``trio.ClosedResourceError`` (this
program closed the muxer), so code written against trio's stream contract handles them
without knowing mplex; all three also derive from ``MplexError``, so code that does know
mplex can tell them apart.  ``EndReason`` names the four ways a connection ends.
"""

from __future__ import annotations

import enum

import trio

from ._engine.errors import MplexError

__all__ = ["ConnectionLost", "EndReason", "MuxerClosed", "StreamReset"]


class EndReason(enum.Enum):
    """Why a connection ended: ``Muxer.end_reason`` and the errors' ``reason``."""

    #: The peer ended its side of the transport cleanly (end of input).
    PEER_CLOSED = "peer-closed"
    #: The transport failed (reset, broken pipe, a TLS error, ...): see ``__cause__``.
    TRANSPORT_FAILED = "transport-failed"
    #: The peer broke the mplex protocol or an abuse budget: ``__cause__`` is the
    #: ``ProtocolError``.
    PROTOCOL_ERROR = "protocol-error"
    #: This program ended it: ``Muxer.aclose()``, or ``run()`` was cancelled.
    CLOSED = "closed"


class StreamReset(trio.BrokenResourceError, MplexError):
    """The stream was reset: by the peer, or by our slow-reader policy.

    ``by_peer`` tells which.  ``refused`` is True when the peer reset a stream we
    opened before sending anything on it: what a peer does to a stream beyond its
    limits (``max_inbound_streams``, its accept backlog), and what a handler that
    fails before answering does too (mplex has no error codes).  Such a stream may be
    opened again later; the connection goes on.  Data that arrived before the reset is
    still returned by ``receive_some``; this error comes once it is drained.
    """

    def __init__(self, message: str, *, stream_id: int, by_peer: bool, refused: bool = False) -> None:
        super().__init__(message)
        self.stream_id = stream_id
        self.by_peer = by_peer
        self.refused = refused


class ConnectionLost(trio.BrokenResourceError, MplexError):
    """The connection under the stream ended without this program closing it.

    ``reason`` is an ``EndReason`` (the peer hung up, the transport failed, or the peer
    broke the protocol); ``__cause__`` holds the transport error or ``ProtocolError``,
    and is None for a clean end of input.
    """

    def __init__(self, message: str, *, reason: EndReason = EndReason.TRANSPORT_FAILED) -> None:
        super().__init__(message)
        self.reason = reason


class MuxerClosed(trio.ClosedResourceError, MplexError):
    """This program closed the muxer under the stream (``Muxer.aclose()``, or its
    ``run()`` was cancelled).  ``reason`` is always ``EndReason.CLOSED``."""

    reason = EndReason.CLOSED


def fresh_copy(failure: BaseException | None, stream_id: int = -1) -> BaseException:
    """A fresh copy of a recorded ``failure`` to raise, so that each raise gets its own
    traceback (None, or anything else: the stream was closed here)."""
    if isinstance(failure, StreamReset):
        return StreamReset(
            str(failure), stream_id=stream_id, by_peer=failure.by_peer, refused=failure.refused
        )
    if isinstance(failure, ConnectionLost):
        return ConnectionLost(str(failure), reason=failure.reason)
    if isinstance(failure, MuxerClosed):
        return MuxerClosed(str(failure))
    return trio.ClosedResourceError("this stream was closed")
