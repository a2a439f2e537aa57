"""Limits that hold under what careless programs and hostile peers do: tracing never
breaks the muxer; closing is bounded while others send; policy resets free what they
reset; buffer limits count memory, not payload; frames that change nothing spend a
budget, while healthy traffic keeps its verdict; large sends in small frames respect
IOV_MAX; control frames respect the send high-water mark."""

from __future__ import annotations

import contextlib
import logging
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import (
    frame,
    muxer_pair,
    over_every_transport,
    raw_pair,
    read_all,
    tcp_streams,
    tcp_transport,
)


class TestTracingNeverBreaksTheMuxer:
    async def test_turning_on_debug_during_a_large_tcp_send_is_harmless(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        a, b = await tcp_streams(buffer_size=16384)
        # The receiver holds little and reads nothing until DEBUG is on, so the sender is
        # stuck with the tail of a directly written frame in its buffer.
        holds_little = mplex.Config(max_stream_buffer=65536, max_connection_buffer=65536)
        async with mplex.open_muxer(a) as sender, mplex.open_muxer(b, holds_little) as receiver:
            stream = await sender.open_stream()
            payload = bytes(range(256)) * 4096  # 1 MiB, far more than the socket takes at once
            peer: list[bytes] = []

            async def receive() -> None:
                accepted = await receiver.accept_stream()
                await trio.testing.wait_all_tasks_blocked()
                caplog.set_level(logging.DEBUG, logger="mplex")  # while frames are half-written
                peer.append(await read_all(accepted))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive)
                await stream.send_all(payload)
                await stream.send_eof()
            assert peer == [payload]
            assert not sender.closed and not receiver.closed
        assert any("send" in r.getMessage() for r in caplog.records)


class TestClosingIsBounded:
    @over_every_transport
    async def test_aclose_returns_while_other_tasks_keep_sending(self, transport: Callable[[], Any]) -> None:
        async with transport() as (a, b), mplex.open_muxer(b) as receiver:
            muxer = mplex.Muxer(a)
            async with trio.open_nursery() as nursery:
                await nursery.start(muxer.run)

                async def read_until_lost(stream: mplex.MplexStream) -> None:
                    with contextlib.suppress(mplex.ConnectionLost):  # when the sender closes
                        await read_all(stream)

                async def drain() -> None:
                    async for stream in receiver:
                        nursery.start_soon(read_until_lost, stream)

                async def keep_sending() -> None:
                    try:
                        while True:
                            stream = await muxer.open_stream()
                            for _ in range(100):
                                await stream.send_all(b"x" * 32)
                    except trio.ClosedResourceError:
                        pass  # intake stopped by aclose

                nursery.start_soon(drain)
                for _ in range(4):
                    nursery.start_soon(keep_sending)
                await trio.testing.wait_all_tasks_blocked()
                with trio.fail_after(10):  # it returns, although four tasks keep sending
                    await muxer.aclose()
                nursery.cancel_scope.cancel()
            assert muxer.end_reason is mplex.EndReason.CLOSED


class TestPolicyResetsFreeWhatTheyReset:
    async def test_block_then_reset_frees_what_it_resets_and_the_read_stream_goes_on(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        config = mplex.Config(
            max_stream_buffer=32768,
            max_connection_buffer=4 * 32768,
            slow_reader_policy="block-then-reset",
            slow_reader_timeout=1.0,
        )
        async with raw_pair(config) as (muxer, peer):
            streams = []
            for n in range(9):
                await peer.send(frame(n, Flag.NEW_STREAM))
                streams.append(await muxer.accept_stream())
            # Eight streams hold exactly their limit: only the connection's budget is
            # over (twice over), and no stream is over its own.
            await peer.send(*(frame(n, Flag.MESSAGE_INITIATOR, bytes(32768)) for n in range(8)))
            await trio.testing.wait_all_tasks_blocked()  # the reader is blocked now
            await peer.send(frame(8, Flag.MESSAGE_INITIATOR, b"r" * 5000), frame(8, Flag.CLOSE_INITIATOR))
            got: list[bytes] = []
            async with trio.open_nursery() as nursery:

                async def read_stream_8() -> None:
                    got.append(await read_all(streams[8]))

                nursery.start_soon(read_stream_8)
                for _ in range(20):  # each timeout may reset one more stream
                    await trio.testing.wait_all_tasks_blocked()
                    if got:
                        break
                    mock_clock.jump(config.slow_reader_timeout)
            assert got == [b"r" * 5000]
            stats = muxer.stats
            assert stats.streams_reset_by_policy >= 1
            # What was reset was freed: only the streams not reset still hold data.
            assert stats.unread_bytes == (8 - stats.streams_reset_by_policy) * 32768


class ChunkedTransport(trio.abc.Stream):
    """Hands the muxer its input in exactly the chunks given: a peer's tiny reads."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks[::-1]
        self.done = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        if self.chunks:
            return self.chunks.pop()
        self.done.set()
        await trio.sleep_forever()
        raise AssertionError  # unreachable

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def peak_memory_of(chunks: list[bytes], config: mplex.Config | None = None) -> tuple[int, mplex.Muxer]:
    transport = ChunkedTransport(chunks)
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        async with mplex.open_muxer(transport, config) as muxer:
            await transport.done.wait()
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - start, muxer


class TestBufferLimitsCountMemory:
    async def test_a_frame_in_two_byte_reads_costs_its_size(self) -> None:
        body = bytes(range(256)) * 1024  # 256 KiB
        wire = frame(0, Flag.NEW_STREAM) + frame(0, Flag.MESSAGE_INITIATOR, body)
        chunks = [wire[i : i + 2] for i in range(0, len(wire) - 2, 2)]  # the last bytes never come
        peak, _muxer = await peak_memory_of(chunks)
        assert peak < 4 * len(body), peak  # was about 21x: an object per read

    async def test_unread_one_byte_frames_cost_about_their_size(self) -> None:
        count = 50_000
        chunks = [frame(0, Flag.NEW_STREAM)] + [frame(0, Flag.MESSAGE_INITIATOR, b"b")] * count
        peak, muxer = await peak_memory_of(chunks)
        assert muxer.stats.unread_bytes == count
        assert peak < 10 * count, peak  # was about 22x the buffered bytes


class TestBudgetsForFramesThatDoNothing:
    async def test_zero_length_message_frames_store_nothing_and_wake_nobody(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(0, Flag.NEW_STREAM))
            stream = await muxer.accept_stream()
            got: list[bytes] = []
            async with trio.open_nursery() as nursery:

                async def receive() -> None:
                    got.append(await stream.receive_some())

                nursery.start_soon(receive)
                for _ in range(1000):  # one read each: nothing merges them
                    await peer.send(frame(0, Flag.MESSAGE_INITIATOR))
                    await trio.testing.wait_all_tasks_blocked()
                assert got == []
                await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"data"))
            assert got == [b"data"]
            assert muxer.stats.unread_bytes == 0

    @pytest.mark.parametrize(
        "useless",
        [
            [frame(0, Flag.CLOSE_INITIATOR), frame(1, Flag.CLOSE_INITIATOR)],
            [frame(0, Flag.MESSAGE_INITIATOR), frame(1, Flag.MESSAGE_INITIATOR)],  # two streams: no merging
        ],
        ids=["repeated Close", "zero-length Message"],
    )
    async def test_a_flood_of_frames_that_do_nothing_spends_a_budget(self, useless: list[bytes]) -> None:
        config = mplex.Config(max_ignored_frames=100)
        async with raw_pair(config) as (muxer, peer):
            await peer.send(*(frame(n, Flag.NEW_STREAM) + frame(n, Flag.CLOSE_INITIATOR) for n in (0, 1)))
            await muxer.accept_stream()
            await muxer.accept_stream()
            await peer.send(*(useless * 51))
            assert [s async for s in muxer] == []
            assert muxer.end_reason is mplex.EndReason.PROTOCOL_ERROR
            assert "max_ignored_frames" in str(muxer.end_error)


class TestHealthyConnectionsKeepTheirVerdict:
    async def test_in_flight_data_after_a_batch_reset_of_many_streams_is_not_abuse(self) -> None:
        config = mplex.Config(max_outbound_streams=6000, max_inbound_streams=6000, accept_backlog=6000)
        async with raw_pair(config) as (muxer, peer):
            streams = [await muxer.open_stream() for _ in range(6000)]
            for stream in streams:
                stream.reset()
            # The peer's data, sent before our resets reached it, arrives now.
            await peer.send(*(frame(s.id, Flag.MESSAGE_RECEIVER, b"late") for s in streams))
            await peer.send(frame(0, Flag.NEW_STREAM))
            with trio.fail_after(10):
                inbound = await muxer.accept_stream()  # still alive
            assert inbound.id == 0
            assert not muxer.closed


class TestSmallFramesStayFast:
    async def test_a_large_send_with_small_frames_respects_iov_max(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import os

        calls: list[int] = []
        real_writev = os.writev

        def counting_writev(fd: int, buffers: Any) -> int:
            calls.append(len(buffers))
            return real_writev(fd, buffers)

        monkeypatch.setattr(os, "writev", counting_writev)
        limit = os.sysconf("SC_IOV_MAX")
        payload = bytes(range(256)) * 4096  # 1 MiB in 512-byte frames: 2,048 frames
        async with muxer_pair(tcp_transport, mplex.Config(max_send_frame_size=512)) as (left, right):
            stream = await left.open_stream()
            async with trio.open_nursery() as nursery:
                got: list[bytes] = []

                async def receive() -> None:
                    got.append(await read_all(await right.accept_stream()))

                nursery.start_soon(receive)
                await stream.send_all(payload)
                await stream.send_eof()
            assert got == [payload]
        assert calls and max(calls) <= limit


class TestBoundedMemory:
    async def test_control_frames_respect_the_send_high_water_mark(self) -> None:
        # A peer that never reads opens and closes streams; we accept and close each.
        # Streams past the backlog are refused, and their Closes then count as frames
        # that change nothing: this test is about memory, so no budget may cut it short.
        config = mplex.Config(max_refused_streams=10**7, max_resets_received=10**7, max_ignored_frames=10**7)
        a, b = await tcp_streams(buffer_size=4096)
        peak = 0
        async with b, mplex.open_muxer(a, config) as muxer:

            def sample() -> None:
                nonlocal peak
                peak = max(peak, muxer.stats.queued_bytes)

            async def attack() -> None:
                with trio.move_on_after(5):
                    for start in range(0, 200_000, 2000):  # 200,000 streams, each id once
                        ids = range(start, start + 2000)
                        await b.send_all(
                            b"".join(frame(n, Flag.NEW_STREAM) + frame(n, Flag.CLOSE_INITIATOR) for n in ids)
                        )
                        sample()

            async def accept_and_close() -> None:
                async for stream in muxer:
                    await stream.aclose()
                    sample()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(accept_and_close)
                await attack()
                nursery.cancel_scope.cancel()
        assert 0 < peak <= 2 * config.send_high_water, peak
