"""Memory stays within the configured budget whatever a peer sends (measured).

The attacker writes raw frames into a real socket, so whatever the muxer refuses to
read stays in the kernel, not in Python; tracemalloc measures what the muxer holds.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import RawPeer, TransportPair, frame, over_every_transport, read_all, settle

BUDGET = mplex.Config(max_stream_buffer=256 * 1024, max_connection_buffer=1024 * 1024)
#: What the muxer may hold beyond the budget: one 64 KiB frame that crossed a limit, one
#: transport read (256 KiB) being decoded, bookkeeping.  Measured peaks are below it.
SLACK = 1024 * 1024
CHUNK = frame(0, Flag.MESSAGE_INITIATOR, b"f" * 65536)


@asynccontextmanager
async def measured() -> AsyncIterator[list[int]]:
    """Yield a list that receives the peak traced memory above the starting point."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result: list[int] = []
        yield result
        _, peak = tracemalloc.get_traced_memory()
        result.append(peak - start)
        print(f"\npeak traced memory: {(peak - start) / 2**20:.2f} MiB")  # shown with pytest -s
    finally:
        tracemalloc.stop()


@asynccontextmanager
async def attacked(config: mplex.Config) -> AsyncIterator[tuple[mplex.Muxer, trio.SocketStream]]:
    a, b = trio.socket.socketpair()
    attacker = trio.SocketStream(b)
    try:
        # The allocator's one-time 2 MiB priming block is not the muxer's memory.
        unprimed = dataclasses.replace(config, prime_allocator=False)
        async with mplex.open_muxer(trio.SocketStream(a), unprimed) as muxer:
            yield muxer, attacker
    finally:
        await attacker.aclose()


async def flood(attacker: trio.SocketStream, count: int) -> None:
    for _ in range(count):
        await attacker.send_all(CHUNK)


class TestOneUnreadStream:
    async def test_block_pushes_back_and_loses_nothing(self) -> None:
        async with measured() as peak, attacked(BUDGET) as (muxer, attacker):
            await attacker.send_all(frame(0, Flag.NEW_STREAM))
            stream = await muxer.accept_stream()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood, attacker, 300)  # 19.7 MB, never read meanwhile
                await settle()
                assert muxer.stats.reader_blocked_seconds > 0  # the flood waits in the kernel
                # Blocking never stops us opening streams (the writer is independent).
                with trio.fail_after(5):
                    opened = await muxer.open_stream()
                    await opened.send_all(b"still sending")
                got = 0
                while got < 300 * 65536:
                    got += len(await stream.receive_some())
            assert got == 300 * 65536  # nothing lost once the reader drains
        assert peak[0] < BUDGET.max_connection_buffer + SLACK

    async def test_reset_drops_the_stream_and_others_keep_working(self) -> None:
        config = mplex.Config(
            max_stream_buffer=256 * 1024, max_connection_buffer=1024 * 1024, slow_reader_policy="reset"
        )
        async with measured() as peak, attacked(config) as (muxer, attacker):
            await attacker.send_all(frame(0, Flag.NEW_STREAM) + frame(1, Flag.NEW_STREAM))
            flooded, other = await muxer.accept_stream(), await muxer.accept_stream()
            await flood(attacker, 300)  # nothing blocks: the muxer keeps reading and dropping
            await attacker.send_all(
                frame(1, Flag.MESSAGE_INITIATOR, b"still here") + frame(1, Flag.CLOSE_INITIATOR)
            )
            assert await read_all(other) == b"still here"
            with pytest.raises(mplex.StreamReset) as info:
                await read_all(flooded)
            assert not info.value.by_peer
            assert "max_stream_buffer" in str(info.value)
            assert muxer.stats.streams_reset_by_policy == 1
        assert peak[0] < config.max_stream_buffer + SLACK

    async def test_reset_frees_the_unread_data_of_the_stream_it_resets(self) -> None:
        """A policy that resets must free what it resets: the reset stream's data no
        longer counts against the connection's budget (nor holds memory)."""
        config = mplex.Config(max_stream_buffer=250, slow_reader_policy="reset")
        async with attacked(config) as (muxer, attacker):
            await attacker.send_all(frame(0, Flag.NEW_STREAM))
            stream = await muxer.accept_stream()
            body = bytes(range(100))
            await attacker.send_all(frame(0, Flag.MESSAGE_INITIATOR, body) * 10)
            with pytest.raises(mplex.StreamReset):
                await read_all(stream)
            assert muxer.stats.unread_bytes == 0
            assert muxer.stats.streams_reset_by_policy == 1


async def test_other_connections_keep_serving_while_one_is_flooded() -> None:
    async with attacked(BUDGET) as (flooded_muxer, attacker), attacked(mplex.Config()) as (other, peer):
        await attacker.send_all(frame(0, Flag.NEW_STREAM))
        await flooded_muxer.accept_stream()  # and never read
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood, attacker, 100)
            await settle()
            assert flooded_muxer.stats.reader_blocked_seconds > 0
            # The other connection of this process answers at once.
            await peer.send_all(frame(0, Flag.NEW_STREAM) + frame(0, Flag.MESSAGE_INITIATOR, b"ping"))
            with trio.fail_after(5):
                assert await (await other.accept_stream()).receive_some() == b"ping"
            nursery.cancel_scope.cancel()


class TestManyStreamsAndFrames:
    async def test_ten_thousand_opens_stay_within_limits(self) -> None:
        # The refused-opens abuse budget would close this connection (tests/test_abuse.py);
        # raise it here to measure memory under a sustained storm instead.
        config = mplex.Config(
            max_inbound_streams=100,
            accept_backlog=100,
            max_connection_buffer=1024 * 1024,
            max_refused_streams=100_000,
        )
        batches = [  # built before measuring: the attacker's memory is not ours
            b"".join(
                frame(i, Flag.NEW_STREAM) + frame(i, Flag.MESSAGE_INITIATOR, b"x" * 1000)
                for i in range(start, start + 500)
            )
            for start in range(0, 10_000, 500)
        ]
        async with measured() as peak, attacked(config) as (muxer, attacker):
            for batch in batches:
                await attacker.send_all(batch)
            await settle()
            assert muxer.stats.streams_refused == 10_000 - 100
            assert muxer.stats.inbound_streams == 100
            assert muxer.stats.unread_bytes == 100 * 1000
        assert peak[0] < config.max_connection_buffer + SLACK

    async def test_large_frames_for_unknown_streams_are_dropped_without_growth(self) -> None:
        big = frame(77, Flag.MESSAGE_INITIATOR, b"u" * (1 << 20))
        async with measured() as peak, attacked(mplex.Config()) as (muxer, attacker):
            for _ in range(30):
                await attacker.send_all(big)
            await settle()
            assert muxer.stats.frames_dropped == 30
            assert not muxer.closed
        # One frame is assembled at a time (1 MiB) next to the read in progress.
        assert peak[0] < 3 * (1 << 20) + SLACK

    async def test_a_declared_two_to_the_sixty_two_byte_frame_closes_at_once(self) -> None:
        async with measured() as peak, attacked(mplex.Config()) as (muxer, attacker):
            await attacker.send_all(b"\x02" + mplex.encode_uvarint(2**62))
            with trio.fail_after(5):
                with pytest.raises(mplex.ConnectionLost) as info:
                    await muxer.accept_stream()
            assert isinstance(info.value.__cause__, mplex.FrameTooLargeError)
        assert peak[0] < SLACK


@over_every_transport
async def test_unread_data_holds_its_own_bytes_not_the_reads_it_came_in(transport: TransportPair) -> None:
    """A large Message body that lies whole in one transport read reaches its stream
    as a view of that read (copied once, when taken).  What is still unread when the
    next read comes in is copied out first, so a stream that leaves one frame of
    every read unread holds those frames' bytes, not every read they came in."""
    kept, taken, rounds = 20 * 1024, 200 * 1024, 20
    config = mplex.Config(prime_allocator=False, max_stream_buffer=4 * 2**20, max_connection_buffer=8 * 2**20)
    async with transport() as (a, b), mplex.open_muxer(a, config) as muxer:
        peer = RawPeer(b)
        await peer.send(frame(0, Flag.NEW_STREAM), frame(1, Flag.NEW_STREAM))
        unread, drained = await muxer.accept_stream(), await muxer.accept_stream()
        tracemalloc.start()
        try:
            start, _ = tracemalloc.get_traced_memory()
            for _ in range(rounds):
                # One send, so that over memory and sockets one read holds both frames.
                await peer.send(
                    frame(0, Flag.MESSAGE_INITIATOR, b"k" * kept),
                    frame(1, Flag.MESSAGE_INITIATOR, b"t" * taken),
                )
                got = 0
                while got < taken:
                    got += len(await drained.receive_some())
            while unread.unread_bytes < rounds * kept:
                await trio.testing.wait_all_tasks_blocked()
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert await unread.receive_some() == b"k" * (rounds * kept)  # nothing lost
    # Views kept alive would hold every read: rounds * (kept + taken), 4.3 MiB.
    assert held - start < rounds * kept + SLACK


@over_every_transport
@pytest.mark.parametrize(("streams", "body"), [(200, 200 * 1024), (1000, 64 * 1024)])
async def test_partly_read_frames_hold_what_the_budget_counts(
    transport: TransportPair, streams: int, body: int
) -> None:
    """A program that reads all but the last byte of each stream's one large Message
    (a "read exactly n bytes" helper whose next message shares the frame) holds about
    what the account says it holds, not every frame it has begun to read."""
    budget = 1024 * 1024
    config = mplex.Config(prime_allocator=False, max_connection_buffer=budget)
    async with transport() as (a, b), mplex.open_muxer(a, config) as muxer:
        peer = RawPeer(b)
        kept = []
        tracemalloc.start()
        try:
            start, _ = tracemalloc.get_traced_memory()
            for i in range(streams):
                await peer.send(frame(i, Flag.NEW_STREAM), frame(i, Flag.MESSAGE_INITIATOR, b"m" * body))
                stream = await muxer.accept_stream()
                wanted = body - 1
                while wanted:
                    wanted -= len(await stream.receive_some(wanted))
                kept.append(stream)
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert muxer.stats.unread_bytes == streams
        for stream in kept:  # nothing lost: each last byte is still there
            assert await stream.receive_some() == b"m"
    print(f"\nheld {(held - start) / 2**20:.2f} MiB for {streams} unread bytes")
    # Before the rest of a partly read piece was copied out: 40-64 MiB.
    assert held - start < 3 * budget


@over_every_transport
async def test_an_idle_connection_holds_none_of_the_input_it_handed_over(transport: TransportPair) -> None:
    """Once a large frame has been read and taken, a connection waiting for more input
    holds none of the reads it came in (an idle connection keeps no last read)."""
    size = 200 * 1024  # in one read of 256 KiB, over memory streams and TCP
    config = mplex.Config(prime_allocator=False, max_stream_buffer=4 * 2**20, max_connection_buffer=8 * 2**20)
    async with transport() as (a, b), mplex.open_muxer(a, config) as muxer:
        peer = RawPeer(b)
        await peer.send(frame(0, Flag.NEW_STREAM))
        stream = await muxer.accept_stream()
        tracemalloc.start()
        try:
            start, _ = tracemalloc.get_traced_memory()
            await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"m" * size))
            while stream.unread_bytes < size:  # read by the reader task, not by a receive
                await trio.testing.wait_all_tasks_blocked()
            got = 0
            while got < size:
                got += len(await stream.receive_some())
            await trio.testing.wait_all_tasks_blocked()
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert held - start < size // 4  # the last read held would be most of the frame
