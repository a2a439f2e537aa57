"""Helpers for testing programs that use mplex, like ``trio.testing`` for trio.

``open_muxer_pair()`` gives two running muxers connected to each other in memory, so
a test can drive both ends of a protocol without a socket::

    import mplex.testing

    async def test_echo() -> None:
        async with mplex.testing.open_muxer_pair() as (client, server):
            stream = await client.open_stream()
            await stream.send_all(b"ping")
            accepted = await server.accept_stream()
            assert await accepted.receive_some() == b"ping"
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio
import trio.testing

from mplex import _publish_loaded

from ._engine.config import Config
from ._trio.muxer import Muxer

__all__ = ["open_muxer_pair"]


@contextlib.asynccontextmanager
async def open_muxer_pair(config: Config | None = None) -> AsyncIterator[tuple[Muxer, Muxer]]:
    """Two running muxers connected over ``trio.testing.memory_stream_pair()``, for the
    ``async with`` block; both are closed on exit (queued frames are flushed first).

    ``config`` applies to both.  The memory streams between them have no flow control
    (a ``send_all`` on one never waits for the other to read), so a test of the
    slow-reader policies, which rely on the transport pushing back, wants a pair over
    ``trio.testing.lockstep_stream_pair()`` or TCP instead: ``mplex.Muxer`` takes any
    ``trio.abc.Stream``.  As with ``open_muxer``, an exception raised in the block
    reaches the caller as itself.
    """
    left, right = trio.testing.memory_stream_pair()
    async with Muxer(left, config) as first, Muxer(right, config) as second:
        try:
            yield first, second
        finally:
            # Both at once: each then ends as closed by us (EndReason.CLOSED), not as
            # closed by the other.
            async with trio.open_nursery() as closing:
                closing.start_soon(first.aclose)
                closing.start_soon(second.aclose)


_publish_loaded()  # the names the muxer loaded print as mplex.X from the start
