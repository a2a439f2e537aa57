"""Errors of the trio layer: why a stream stopped working.

Both derive from ``trio.BrokenResourceError``, so code written against trio's stream
contract handles them without knowing mplex, and from ``MplexError``, so code that
does know mplex can tell a peer's reset from a lost connection.
"""

from __future__ import annotations

import trio

from ._exceptions import MplexError

__all__ = ["ConnectionLost", "StreamReset"]


class StreamReset(trio.BrokenResourceError, MplexError):
    """The stream was reset: by the peer, or by our slow-reader policy.

    ``by_peer`` tells which.  Data that arrived before the reset is still returned by
    ``receive_some``; this error comes once it is drained.
    """

    def __init__(self, message: str, *, stream_id: int, by_peer: bool) -> None:
        super().__init__(message)
        self.stream_id = stream_id
        self.by_peer = by_peer


class ConnectionLost(trio.BrokenResourceError, MplexError):
    """The connection under the stream ended: the transport failed or closed, the peer
    broke the protocol, or the muxer was closed.  ``__cause__`` holds the detail."""
