"""The write path: queued frames leave together, a lone frame leaves at once."""

from __future__ import annotations

import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import CountingStream, frame, read_all, settle


async def counting_pair() -> tuple[CountingStream, trio.abc.Stream]:
    a, b = trio.testing.memory_stream_pair()
    return CountingStream(a), b


async def test_frames_from_many_senders_leave_in_one_write() -> None:
    wire, peer = await counting_pair()
    async with mplex.open_muxer(wire) as muxer:
        streams = [await muxer.open_stream() for _ in range(200)]
        await settle()
        before = len(wire.writes)
        async with trio.open_nursery() as nursery:
            for stream in streams:
                nursery.start_soon(stream.send_all, b"x" * 32)
        await settle()
        assert len(wire.writes) - before == 1
        assert wire.writes[-1] == sum(
            len(frame(s.id, Flag.MESSAGE_INITIATOR, b"x" * 32)) for s in streams
        )
    await peer.aclose()


async def test_a_burst_of_send_nowait_leaves_in_few_large_writes() -> None:
    wire, peer = await counting_pair()
    async with mplex.open_muxer(wire) as muxer:
        stream = await muxer.open_stream()
        await settle()
        before = len(wire.writes)
        for _ in range(50_000):
            try:
                stream.send_nowait(b"y" * 32)
            except trio.WouldBlock:
                await stream.wait_send_all_might_not_block()
                stream.send_nowait(b"y" * 32)
        await settle()
        writes = wire.writes[before:]
        assert sum(writes) == 50_000 * 34
        assert len(writes) <= 50_000 * 34 // (64 * 1024) + 2
    await peer.aclose()


async def test_a_lone_message_leaves_without_waiting_for_a_timer(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The clock is frozen: if the writer relied on Config.max_flush_delay, nothing
    # would ever be sent.  It must go out as soon as every task is blocked.
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
        stream = await left.open_stream()
        received: list[bytes] = []

        async def receive() -> None:
            peer = await right.accept_stream()
            received.append(await peer.receive_some())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            start = trio.current_time()
            await stream.send_all(b"ping")
        assert received == [b"ping"]
        assert trio.current_time() == start


async def test_a_busy_program_still_flushes_within_the_delay_bound(
    mock_clock: trio.testing.MockClock,
) -> None:
    # A task that never lets the scheduler go idle, moving the (frozen) clock on by
    # 0.1 ms per step: the frame must still leave within Config.max_flush_delay.
    a, b = trio.testing.memory_stream_pair()
    step = 0.0001
    config = mplex.Config(max_flush_delay=0.002)
    async with mplex.open_muxer(a, config) as muxer:
        stream = await muxer.open_stream()
        await settle()
        done = trio.Event()
        arrived_at: list[float] = []

        async def busy() -> None:
            while not done.is_set():
                mock_clock.jump(step)
                await trio.lowlevel.checkpoint()

        async def watch() -> None:
            decoder = mplex.Decoder()
            while not arrived_at:
                if any(f.data == b"late" for f in decoder.feed(await b.receive_some())):
                    arrived_at.append(trio.current_time())
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy)
            nursery.start_soon(watch)
            await trio.lowlevel.checkpoint()
            start = trio.current_time()
            stream.send_nowait(b"late")
        # The deadline (not idleness) sent it; a few scheduler passes, each moving the
        # clock one step, go to waking the writer and delivering to the reader.
        assert 0.002 - step <= arrived_at[0] - start <= 0.002 + 6 * step


async def test_interleaved_senders_each_keep_their_own_order() -> None:
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
        streams = [await left.open_stream() for _ in range(5)]

        async def send(stream: mplex.MplexStream) -> None:
            for i in range(2000):
                if i % 3:
                    await stream.send_all(b"%d," % i)
                else:
                    try:
                        stream.send_nowait(b"%d," % i)
                    except trio.WouldBlock:
                        await stream.send_all(b"%d," % i)
            await stream.send_eof()

        results: dict[int, bytes] = {}

        async def receive() -> None:
            peer = await right.accept_stream()
            results[peer.id] = await read_all(peer)

        async with trio.open_nursery() as nursery:
            for stream in streams:
                nursery.start_soon(send, stream)
                nursery.start_soon(receive)
        expected = b"".join(b"%d," % i for i in range(2000))
        assert results == dict.fromkeys(range(5), expected)


async def test_close_and_reset_frames_keep_their_place_after_queued_data() -> None:
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a) as muxer:
        stream = await muxer.open_stream()
        stream.send_nowait(b"a" * 100)
        await stream.send_eof()
        other = await muxer.open_stream()
        other.send_nowait(b"b")
        other.reset()
        await muxer.aclose()
    flags = [(f.stream_id, f.flag) for f in mplex.Decoder().feed(await read_all(b))]
    assert flags == [
        (0, Flag.NEW_STREAM),
        (0, Flag.MESSAGE_INITIATOR),
        (0, Flag.CLOSE_INITIATOR),
        (1, Flag.NEW_STREAM),
        (1, Flag.MESSAGE_INITIATOR),
        (1, Flag.RESET_INITIATOR),
    ]
