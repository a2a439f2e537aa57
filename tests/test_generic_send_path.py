"""Over the generic path (any transport but a socket on the fast path) only the writer
task writes; a failed write ends the send side with the transport's error as its
cause.  (What a stalled transport does to senders: tests/test_stalled_peer.py.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

import mplex

from .helpers import PlainStream, RawPeer, settle


async def quiet_spell() -> None:
    await settle()
    await trio.sleep(0.002)


class GatedStream(PlainStream):
    """A transport whose ``send_all`` can be held up (``gate``) or made to fail."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.gate: trio.Event | None = None
        self.entered = trio.Event()
        self.failure: Exception | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.failure is not None:
            await trio.lowlevel.checkpoint()
            raise self.failure
        if self.gate is not None:
            self.entered.set()
            await self.gate.wait()
        await self.inner.send_all(data)


@contextlib.asynccontextmanager
async def gated_stream() -> AsyncIterator[tuple[GatedStream, mplex.Muxer, mplex.MplexStream, RawPeer]]:
    """A muxer over a ``GatedStream``, one stream opened, and the transport quiet."""
    a, b = trio.testing.memory_stream_pair()
    transport = GatedStream(a)
    peer = RawPeer(b)
    async with mplex.open_muxer(transport) as muxer:
        stream = await muxer.open_stream()
        assert len(await peer.receive_frames(1)) == 1
        await quiet_spell()
        yield transport, muxer, stream, peer


async def test_a_failed_write_ends_the_send_side_with_its_cause() -> None:
    async with gated_stream() as (transport, muxer, stream, _peer):
        transport.failure = OSError("the wire is cut")
        await stream.send_all(b"lost")  # queued, and written by the writer: it fails
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(mplex.ConnectionLost) as info:
            await stream.send_all(b"after")
        assert info.value.__cause__ is transport.failure
        with pytest.raises(mplex.ConnectionLost):
            await muxer.open_stream()
