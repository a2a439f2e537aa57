"""multistream-select over a trio stream: the I/O half of ``mplex._engine.multistream``.

Use it on a fresh connection to agree on ``/mplex/6.7.0`` before handing the
connection to a ``Muxer``, and on a muxed stream to agree on an application
protocol.  It reads no byte beyond the negotiation, so the stream is returned to the
caller exactly where the chosen protocol begins.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from .._engine.multistream import (
    MAX_PROPOSALS,
    DialerNegotiation,
    ListenerNegotiation,
    NegotiationError,
)

__all__ = ["accept_protocol", "select_protocol"]


async def select_protocol(stream: trio.abc.Stream, protocols: str | Sequence[str]) -> str:
    """As the dialer, propose ``protocols`` in order; return the one the peer accepts.

    ``protocols`` is a sequence of ids, or one id as a ``str``.

    Raises ``ProtocolNotSupportedError`` when the peer refuses them all,
    ``NegotiationError`` for a malformed exchange, and lets the transport's own errors
    (``trio.BrokenResourceError`` and the like) through.  Wrap it in
    ``trio.fail_after`` to bound how long a silent peer may take.
    """
    return await _negotiate(stream, DialerNegotiation(protocols))


async def accept_protocol(
    stream: trio.abc.Stream, protocols: str | Sequence[str], *, max_proposals: int = MAX_PROPOSALS
) -> str:
    """As the listener, accept the first proposal found in ``protocols`` (a sequence of
    ids, or one id as a ``str``); return it.

    Answers ``na`` to others and lists ``protocols`` for ``ls``.  Raises
    ``NegotiationError`` for a malformed exchange or after ``max_proposals``
    refusals.
    """
    return await _negotiate(stream, ListenerNegotiation(protocols, max_proposals=max_proposals))


async def _negotiate(stream: trio.abc.Stream, negotiation: DialerNegotiation | ListenerNegotiation) -> str:
    while True:
        if outgoing := negotiation.data_to_send():
            await stream.send_all(outgoing)
        if negotiation.selected is not None:
            return negotiation.selected
        data = await stream.receive_some(negotiation.bytes_wanted)
        if not data:
            raise NegotiationError("the peer closed the stream during protocol negotiation")
        negotiation.receive_data(bytes(data))
