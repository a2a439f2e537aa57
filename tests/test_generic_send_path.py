"""Over the generic path (any transport but a socket on the fast path), a lone message
is written by the task that sends it, from ``send_all``: no scheduler pass through the
writer task.  That write is whole even when its caller is cancelled, and a failure of
it ends the send side like a failure of the writer's own write."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag, Frame

from .helpers import TRANSPORTS, PlainStream, RawPeer, TaskSteps, settle

#: The generic path over each kind of transport: a memory stream, TLS, and TCP with the
#: socket fast path switched off.
GENERIC = {
    "memory": ("memory", mplex.Config()),
    "tls": ("tls", mplex.Config()),
    "tcp-generic-path": ("tcp", mplex.Config(socket_fast_path=False)),
}


@contextlib.asynccontextmanager
async def counted_writer(muxer: mplex.Muxer) -> AsyncIterator[TaskSteps]:
    steps = TaskSteps(muxer, "writer")
    trio.lowlevel.add_instrument(steps)
    try:
        yield steps
    finally:
        trio.lowlevel.remove_instrument(steps)


async def quiet_spell() -> None:
    """Let the transport be quiet for longer than a busy sender's gaps (the
    condition under which a sender writes itself): real time must pass."""
    await settle()
    await trio.sleep(0.002)


@pytest.mark.parametrize("transport", list(GENERIC))
async def test_a_lone_message_leaves_without_a_writer_pass(transport: str) -> None:
    name, config = GENERIC[transport]
    async with TRANSPORTS[name]() as (a, b), mplex.open_muxer(a, config) as muxer:
        peer = RawPeer(b)
        stream = await muxer.open_stream()
        await stream.send_all(b"warm-up")  # and, over TLS, the handshake
        assert len(await peer.receive_frames(2)) == 2
        await quiet_spell()
        async with counted_writer(muxer) as steps:
            await stream.send_all(b"request")
            assert await peer.receive_frames(1) == [Frame(0, Flag.MESSAGE_INITIATOR, b"request")]
            assert steps.steps == 0
            # The count is real: send_nowait cannot write (it never yields), so the
            # writer task sends its frame.
            await quiet_spell()
            stream.send_nowait(b"queued")
            assert await peer.receive_frames(1) == [Frame(0, Flag.MESSAGE_INITIATOR, b"queued")]
            assert steps.steps > 0


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


async def test_a_cancelled_send_all_that_writes_itself_still_writes_its_frame_whole() -> None:
    async with gated_stream() as (transport, _muxer, stream, peer):
        gate = transport.gate = trio.Event()
        sender = trio.CancelScope()
        outcome: list[str] = []

        async def send() -> None:
            with sender:
                await stream.send_all(b"x" * 1000)
                outcome.append("returned")
                await trio.lowlevel.checkpoint()  # where the cancellation lands
            outcome.append("cancelled" if sender.cancelled_caught else "not cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await transport.entered.wait()  # the sender is inside the transport
            sender.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []  # still writing: a frame is never cut short
            gate.set()  # only now can its write end
        assert outcome == ["returned", "cancelled"]
        assert await peer.receive_frames(1) == [Frame(0, Flag.MESSAGE_INITIATOR, b"x" * 1000)]
        transport.gate = None
        await stream.send_all(b"and on")
        assert await peer.receive_frames(1) == [Frame(0, Flag.MESSAGE_INITIATOR, b"and on")]


async def test_a_failed_write_by_a_sender_ends_the_send_side_with_its_cause() -> None:
    async with gated_stream() as (transport, muxer, stream, _peer):
        transport.failure = OSError("the wire is cut")
        await stream.send_all(b"lost")  # queued, and written by this task: it fails
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(mplex.ConnectionLost) as info:
            await stream.send_all(b"after")
        assert info.value.__cause__ is transport.failure
        with pytest.raises(mplex.ConnectionLost):
            await muxer.open_stream()
