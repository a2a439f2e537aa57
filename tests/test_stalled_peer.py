"""A peer that stops reading can hold up the transport, never our tasks.

Over every transport (memory, TCP with and without the socket path, TLS), with a peer
that reads nothing: a cancelled ``send_all`` returns at its deadline, queues whole
frames or nothing, and what it queued arrives whole once the peer reads again;
``aclose()`` and a cancelled ``run()`` end every task of ours within
``Config.close_timeout``, even over a transport whose ``send_all`` never returns and
whose ``aclose`` does not wake it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio
import trio.testing

import mplex
from mplex import Decoder, Flag

from .helpers import PlainStream, tcp_streams, tls_over

#: Small kernel buffers: a peer that reads nothing fills them in a few writes.
_SOCKET_BUFFER = 4096
#: A frame's worth of data; each send is one frame.
_MESSAGE = 1000
#: How long each send may take before it is cancelled, and how late its return may be.
_DEADLINE = 0.1
_LATENESS = 1.0


class Peer:
    """The far end: reads nothing until ``release()``, then decodes everything."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.released = trio.Event()
        self.data = bytearray()

    def release(self) -> None:
        self.released.set()

    async def run(self) -> None:
        if isinstance(self.stream, trio.SSLStream):
            await self.stream.do_handshake()
        await self.released.wait()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while chunk := await self.stream.receive_some(65536):
                self.data += chunk


async def _lockstep() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    # Memory streams whose send_all waits until the other end reads: a peer that
    # reads nothing holds every write up, as a full socket does.
    return trio.testing.lockstep_stream_pair()


async def _tcp() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    return await tcp_streams(_SOCKET_BUFFER)


async def _tcp_generic() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    a, b = await tcp_streams(_SOCKET_BUFFER)
    return PlainStream(a), b


async def _tls() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    return await tls_over(*await tcp_streams(_SOCKET_BUFFER))


STALLING: dict[str, Callable[[], Awaitable[tuple[trio.abc.Stream, trio.abc.Stream]]]] = {
    "memory": _lockstep,
    "tcp": _tcp,
    "tcp-generic": _tcp_generic,
    "tls": _tls,
}
over_every_stalling_transport = pytest.mark.parametrize("make", list(STALLING.values()), ids=list(STALLING))


@contextlib.asynccontextmanager
async def stalled(
    make: Callable[[], Awaitable[tuple[trio.abc.Stream, trio.abc.Stream]]], config: mplex.Config
) -> AsyncIterator[tuple[mplex.Muxer, Peer, trio.Nursery]]:
    """A running muxer over a transport whose peer reads nothing until released; the
    peer is released on the way out, so a write held up in it can end."""
    a, b = await make()
    peer = Peer(b)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer.run)
            try:
                muxer = mplex.Muxer(a, config)
                await nursery.start(muxer.run)
                yield muxer, peer, nursery
            finally:
                peer.release()
                await trio.aclose_forcefully(a)
    finally:
        await trio.aclose_forcefully(b)


async def quiet_spell() -> None:
    """Let the connection be idle for longer than a busy sender's gaps, so that each
    send finds the writer parked and the link quiet (the condition under which a
    sender might be tempted to write to the transport itself): real time must pass."""
    await trio.testing.wait_all_tasks_blocked(0.01)
    await trio.sleep(0.002)


async def send_until_cancelled(stream: mplex.MplexStream, peer: Peer) -> list[tuple[bool, float]]:
    """Send one frame after another, each under a deadline, until one is cancelled (or
    the peer reads again): (cancelled, seconds taken) per send."""
    outcomes: list[tuple[bool, float]] = []
    for i in range(5_000):
        if peer.released.is_set():
            break
        await quiet_spell()
        started = trio.current_time()
        with trio.move_on_after(_DEADLINE) as scope:
            await stream.send_all(bytes([i % 251]) * _MESSAGE)
        outcomes.append((scope.cancelled_caught, trio.current_time() - started))
        if scope.cancelled_caught:
            break
    return outcomes


@over_every_stalling_transport
async def test_a_cancelled_send_all_returns_at_its_deadline_and_loses_no_frame(
    make: Callable[[], Awaitable[tuple[trio.abc.Stream, trio.abc.Stream]]],
) -> None:
    config = mplex.Config(send_high_water=8192, close_timeout=10)
    outcomes: list[tuple[bool, float]] = []
    async with stalled(make, config) as (muxer, peer, nursery):
        stream = await muxer.open_stream()
        finished = trio.Event()

        async def sender() -> None:
            outcomes.extend(await send_until_cancelled(stream, peer))
            finished.set()

        nursery.start_soon(sender)
        with trio.move_on_after(30):
            await finished.wait()
        # Whatever happened, the peer now reads: a write held up in the transport ends.
        peer.release()
        await finished.wait()
        await muxer.aclose()  # flushes what was queued
    slowest = max(seconds for _, seconds in outcomes)
    assert slowest < _DEADLINE + _LATENESS, f"a send took {slowest:.2f} s against a {_DEADLINE} s deadline"
    assert outcomes[-1][0], "the sends never filled the send buffer"
    # Every send that returned queued its frame whole; the cancelled one queued nothing.
    frames = Decoder().feed(bytes(peer.data))
    data = [f for f in frames if f.flag is Flag.MESSAGE_INITIATOR]
    returned = sum(1 for cancelled, _ in outcomes if not cancelled)
    assert [f.data for f in data] == [bytes([i % 251]) * _MESSAGE for i in range(returned)]


class NeverReturns(PlainStream):
    """A transport whose ``send_all`` does not return once ``stalled`` is set, unless
    cancelled (or the test's watchdog gives up), and whose ``aclose`` does not wake it."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.stalled = False
        self.given_up = trio.Event()
        self.writes_waiting = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self.stalled:
            await self.inner.send_all(data)
            return
        self.writes_waiting += 1
        try:
            await self.given_up.wait()
        finally:
            self.writes_waiting -= 1

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def _never_returns() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    a, b = trio.testing.memory_stream_pair()
    return NeverReturns(a), b


@pytest.mark.parametrize("make", [*STALLING.values(), _never_returns], ids=[*STALLING, "never-returns"])
@pytest.mark.parametrize("ending", ["aclose", "cancelled run"])
async def test_every_task_ends_within_close_timeout_while_the_transport_holds_a_write(
    make: Callable[[], Awaitable[tuple[trio.abc.Stream, trio.abc.Stream]]], ending: str
) -> None:
    config = mplex.Config(send_high_water=8192, close_timeout=0.5)
    a, b = await make()
    peer = Peer(b)
    senders_done = 0
    gave_up = False

    async def watchdog() -> None:
        # Should a task of ours be stuck where cancellation cannot reach it, free it
        # after a while so that the test fails instead of hanging.
        nonlocal gave_up
        await trio.sleep(30)
        gave_up = True
        peer.release()
        if isinstance(a, NeverReturns):
            a.given_up.set()

    try:
        async with trio.open_nursery() as outer:
            outer.start_soon(peer.run)
            outer.start_soon(watchdog)
            async with trio.open_nursery() as nursery:
                muxer = mplex.Muxer(a, config)
                await nursery.start(muxer.run)
                streams = [await muxer.open_stream() for _ in range(3)]
                for stream in streams:
                    await stream.send_all(b"warm-up")  # and, over TLS, the handshake
                # The writer is parked and the link quiet when the first send comes.
                await quiet_spell()
                if isinstance(a, NeverReturns):
                    a.stalled = True

                async def sender(stream: mplex.MplexStream) -> None:
                    nonlocal senders_done
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        while True:
                            await stream.send_all(b"x" * _MESSAGE)
                    senders_done += 1

                for stream in streams:
                    nursery.start_soon(sender, stream)
                # Until the transport holds the writer up and every sender waits for room.
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert muxer.stats.writer == "writing"
                started = trio.current_time()
                if ending == "aclose":
                    await muxer.aclose()
                    assert trio.current_time() - started < config.close_timeout + _LATENESS
                else:
                    nursery.cancel_scope.cancel()
            # Every task of ours (reader, writer, senders) has ended: the nursery exited.
            assert not gave_up, "a task of the muxer's could not be cancelled"
            assert trio.current_time() - started < config.close_timeout + _LATENESS
            peer.release()
            outer.cancel_scope.cancel()  # the watchdog
    finally:
        await trio.aclose_forcefully(a)
        await trio.aclose_forcefully(b)
    if ending == "aclose":
        assert senders_done == 3  # each was told the muxer closed
    assert muxer.closed
    if isinstance(a, NeverReturns):
        assert a.writes_waiting == 0
