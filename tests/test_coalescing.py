"""The write path: queued frames leave together, a lone frame leaves at once."""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import (
    CountingStream,
    RawPeer,
    ask,
    frame,
    memory_streams,
    muxer_pair,
    over_every_transport,
    read_all,
    reply_and_return,
    settle,
    tcp_streams,
    tcp_transport,
    tls_streams,
)


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
        # The first frame after a quiet spell wakes the writer, which takes it with
        # every frame queued in the same scheduler pass: all 200 leave in one write.
        total = sum(len(frame(s.id, Flag.MESSAGE_INITIATOR, b"x" * 32)) for s in streams)
        assert wire.writes[before:] == [total]
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


async def test_a_busy_sender_is_coalesced_and_flushed_within_the_delay_bound(
    mock_clock: trio.testing.MockClock,
) -> None:
    # A task that queues a frame on every scheduler pass and never lets the program go
    # idle, moving the frozen clock on by 0.1 ms per pass.  Its frames must leave in
    # multi-frame writes, none of them waiting longer than Config.max_flush_delay.
    a, b = trio.testing.memory_stream_pair()
    wire = CountingStream(a)
    write_times: list[float] = []
    inner_send = wire.send_all

    async def timed_send(data: bytes | bytearray | memoryview) -> None:
        write_times.append(trio.current_time())
        await inner_send(data)

    wire.send_all = timed_send  # type: ignore[method-assign]
    step, delay = 0.0001, 0.002
    async with mplex.open_muxer(wire, mplex.Config(max_flush_delay=delay)) as muxer:
        stream = await muxer.open_stream()
        await settle()
        first_write = len(write_times)
        start = trio.current_time()
        for _ in range(400):  # 40 ms of virtual time
            stream.send_nowait(b"z" * 10)
            mock_clock.jump(step)
            await trio.lowlevel.checkpoint()
        await settle()
        await b.aclose()
    times = [start, *write_times[first_write:]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # The writer waits at most `delay` for idleness; a write and the start of the
    # next wait take a few more scheduler passes (each moves the clock one step).
    assert max(gaps) <= delay + 8 * step
    assert len(gaps) < 400 // 10  # coalesced: far fewer writes than frames


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


class TestDirectWriteOverTcp:
    """Over TCP, the first frame after a quiet spell is written by the task that queues
    it, without waiting a scheduler pass for the writer task."""

    async def test_after_a_quiet_spell_send_nowait_puts_the_frame_on_the_wire_before_returning(
        self,
    ) -> None:
        ours, theirs = await tcp_streams()
        peer = RawPeer(theirs)
        async with mplex.open_muxer(ours) as muxer:
            stream = await muxer.open_stream()
            assert await peer.receive_frames(1) == [mplex.Frame(0, Flag.NEW_STREAM, b"0")]
            # The precondition is elapsed time itself (a quiet spell of 50 us), not
            # another task's progress: nothing here waits for a task.
            await trio.sleep(0.01)
            stream.send_nowait(b"ping")  # no checkpoint between this and the read below
            with socket.socket(fileno=os.dup(theirs.socket.fileno())) as plain:  # a synchronous read
                assert plain.recv(100, socket.MSG_DONTWAIT) == frame(0, Flag.MESSAGE_INITIATOR, b"ping")
        await theirs.aclose()

    async def test_what_the_kernel_does_not_take_at_once_follows_in_order(self) -> None:
        ours, theirs = await tcp_streams(buffer_size=4096)
        payload = bytes(range(256)) * 2000  # 512,000 bytes: far more than the socket buffers
        async with mplex.open_muxer(ours) as muxer, mplex.open_muxer(theirs) as far_end:
            stream = await muxer.open_stream()
            accepted = await far_end.accept_stream()
            await trio.sleep(0.01)  # a quiet spell, as above
            async with trio.open_nursery() as nursery:

                async def send() -> None:
                    await stream.send_all(payload)
                    await stream.send_eof()

                nursery.start_soon(send)
                assert await read_all(accepted) == payload


class TestLargeSendsOverTcp:
    """Over TCP, a send longer than one frame is written by the sending task with
    ``writev`` (no copy into the send buffer) whenever nothing is queued ahead."""

    async def test_with_nothing_queued_the_frames_skip_the_send_buffer(self) -> None:
        ours, theirs = await tcp_streams()
        async with mplex.open_muxer(ours) as muxer, mplex.open_muxer(theirs) as far_end:
            stream = await muxer.open_stream()
            accepted = await far_end.accept_stream()
            payload = bytes(range(256)) * 1000  # 256,000 bytes: four frames
            before = muxer.stats
            await stream.send_all(payload)
            await stream.send_eof()
            assert await read_all(accepted) == payload
            after = muxer.stats
            # The kernel's buffers take most of it at once, straight from our buffer
            # (the rest of the frame it stopped in goes through the queue).
            assert after.bytes_sent_without_copy - before.bytes_sent_without_copy > len(payload) // 2
            assert before.bytes_sent_without_copy == 0
        await theirs.aclose()

    async def test_sends_of_one_frame_are_queued_even_at_the_high_water_mark(self) -> None:
        # Small kernel buffers: the writer waits for room and the send buffer reaches
        # the mark, so senders wait.  They must then queue their frames for the writer's
        # large writes, never write them one by one to the socket.
        ours, theirs = await tcp_streams(buffer_size=8192)
        async with mplex.open_muxer(ours) as muxer, mplex.open_muxer(theirs) as far_end:
            chunk = b"s" * 1024
            high_water_seen = []

            async def send(stream: mplex.MplexStream) -> None:
                for _ in range(200):
                    high_water_seen.append(muxer.stats.queued_bytes >= muxer.config.send_high_water)
                    await stream.send_all(chunk)
                await stream.send_eof()

            async def sink(stream: mplex.MplexStream) -> None:
                assert await read_all(stream) == chunk * 200

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for _ in range(50):
                        nursery.start_soon(send, await muxer.open_stream())
                        nursery.start_soon(sink, await far_end.accept_stream())
            assert any(high_water_seen)
            assert muxer.stats.bytes_sent_without_copy == 0
        await theirs.aclose()

    async def test_concurrent_large_and_small_senders_keep_every_frame_whole(self) -> None:
        ours, theirs = await tcp_streams(buffer_size=8192)
        payloads = [bytes([i]) * (300_000 + i) for i in range(3)]
        async with mplex.open_muxer(ours) as muxer, mplex.open_muxer(theirs) as far_end:
            streams = [await muxer.open_stream() for _ in range(4)]
            accepted = [await far_end.accept_stream() for _ in range(4)]
            received: dict[int, bytes] = {}

            async def send_large(stream: mplex.MplexStream, payload: bytes) -> None:
                for _ in range(3):
                    await stream.send_all(payload)
                await stream.send_eof()

            async def send_small(stream: mplex.MplexStream) -> None:
                for i in range(2000):
                    await stream.send_all(i.to_bytes(4, "big"))
                await stream.send_eof()

            async def receive(index: int) -> None:
                received[index] = await read_all(accepted[index])

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for stream, payload in zip(streams, payloads, strict=False):
                        nursery.start_soon(send_large, stream, payload)
                    nursery.start_soon(send_small, streams[3])
                    for index in range(4):
                        nursery.start_soon(receive, index)
            for index, payload in enumerate(payloads):
                assert received[index] == payload * 3
            assert received[3] == b"".join(i.to_bytes(4, "big") for i in range(2000))
        await theirs.aclose()

    async def test_a_cancelled_large_send_leaves_whole_frames_and_a_working_connection(self) -> None:
        ours, theirs = await tcp_streams(buffer_size=4096)
        peer = RawPeer(theirs)
        payload = bytes(range(256)) * 4000  # 1,024,000 bytes: far more than the buffers
        async with mplex.open_muxer(ours) as muxer:
            stream = await muxer.open_stream()
            with trio.move_on_after(0.05) as scope:
                await stream.send_all(payload)  # nobody reads: it waits, then is cancelled
            assert scope.cancelled_caught
            await stream.send_all(b"after")
            await stream.send_eof()
            frames = await peer.receive_frames(1)  # NewStream
            data = bytearray()
            while True:
                (wire_frame,) = await peer.receive_frames(1)
                if wire_frame.flag is Flag.CLOSE_INITIATOR:
                    break
                data += wire_frame.data
            assert frames == [mplex.Frame(0, Flag.NEW_STREAM, b"0")]
            assert 0 < len(data) - len(b"after") < len(payload)
            assert data.endswith(b"after")
            assert payload.startswith(data[: -len(b"after")])
        await theirs.aclose()


async def test_a_large_send_all_is_a_checkpoint_even_with_room_to_queue() -> None:
    for transport in (memory_streams, tcp_streams):
        ours, theirs = await transport()
        async with mplex.open_muxer(ours) as muxer, mplex.open_muxer(theirs):
            stream = await muxer.open_stream()
            with trio.testing.assert_checkpoints():
                await stream.send_all(b"x" * 100_000)
        await theirs.aclose()


@pytest.mark.parametrize("writer", ["idle", "gathering"])
async def test_a_send_all_cancelled_before_it_starts_queues_nothing(writer: str) -> None:
    """send_all checks for cancellation before queuing whatever the writer is doing
    (while it gathers a busy program's frames the check and the yield come first)."""
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a) as muxer:
        peer = RawPeer(b)
        stream = await muxer.open_stream()
        await settle()
        sent: tuple[bytes, ...] = ()
        if writer == "gathering":
            stream.send_nowait(b"first")  # wakes the writer, whose write yields...
            for _ in range(20):
                await trio.lowlevel.checkpoint()
                if muxer.stats.writer == "writing":
                    break
            stream.send_nowait(b"second")  # ...so this piles up, and it gathers next
            for _ in range(20):
                await trio.lowlevel.checkpoint()
                if muxer.stats.writer == "gathering":
                    break
            assert muxer.stats.writer == "gathering"
            sent = b"first", b"second"
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.send_all(b"cancelled")
        assert scope.cancelled_caught
        await stream.send_all(b"after")
        await stream.send_eof()
        frames = await peer.receive_frames(len(sent) + 3)
        assert [(f.flag, f.data) for f in frames] == [
            (Flag.NEW_STREAM, b"0"),
            *((Flag.MESSAGE_INITIATOR, data) for data in sent),
            (Flag.MESSAGE_INITIATOR, b"after"),
            (Flag.CLOSE_INITIATOR, b""),
        ]


async def test_over_the_socket_path_input_sends_what_a_gathering_writer_holds(
    mock_clock: trio.testing.MockClock,
) -> None:
    """While the program stays busy the writer gathers until it idles; over the socket
    path input from the peer ends that wait, so answers to earlier input leave while
    the program works on the new one (the peer is not left idle meanwhile)."""
    ours, theirs = await tcp_streams()
    # The clock is frozen and a task keeps the program busy: neither the delay bound
    # nor idleness can end the writer's wait here.
    config = mplex.Config(max_flush_delay=60)
    async with mplex.open_muxer(ours, config) as muxer, trio.open_nursery() as nursery:
        assert muxer.uses_socket_fast_path
        peer = RawPeer(theirs)
        stream = await muxer.open_stream()
        await settle()
        spinning = True

        async def keep_busy() -> None:
            while spinning:
                await trio.lowlevel.checkpoint()

        nursery.start_soon(keep_busy)
        sent = 0
        for _ in range(200):  # until frames pile up during a write, and the writer gathers
            stream.send_nowait(b"m")
            sent += 1
            await trio.lowlevel.checkpoint()
            if muxer.stats.writer == "gathering":
                break
        for _ in range(50):
            await trio.lowlevel.checkpoint()
        assert muxer.stats.writer == "gathering"
        await peer.send(frame(7, Flag.NEW_STREAM, b"in"))
        for _ in range(200):
            await trio.lowlevel.checkpoint()
            if muxer.stats.writer != "gathering":
                break
        assert muxer.stats.writer != "gathering", "the input did not end the writer's wait"
        spinning = False
        frames = await peer.receive_frames(1 + sent)
        assert [(f.flag, f.data) for f in frames] == [(Flag.NEW_STREAM, b"0")] + [
            (Flag.MESSAGE_INITIATOR, b"m")
        ] * sent
    await theirs.aclose()


class TestBulkOverTls:
    """Over TLS each record costs the receiver a read, however short: a bulk sender's
    batches end on whole 16 KiB records while more is waiting to be queued."""

    async def test_a_bulk_transfer_sends_whole_records_but_the_last(self) -> None:
        client, server = await tls_streams()
        chunk = os.urandom(64 * 1024 + 7)  # frames of odd lengths: batches rarely align
        count = 128
        short = 0
        reads = 0
        received = 0

        async def send() -> None:
            async with mplex.open_muxer(client) as muxer:
                stream = await muxer.open_stream()
                for _ in range(count):
                    await stream.send_all(chunk)
                with pytest.raises(mplex.ConnectionLost):
                    await stream.receive_some()  # the peer hangs up once it read all

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                decoder = mplex.Decoder()
                while received < count * len(chunk):
                    data = await server.receive_some(1 << 20)  # one record at most
                    reads += 1
                    short += len(data) < 16 * 1024
                    received += sum(len(f.data) for f in decoder.feed(data))
                await server.aclose()
        # One short record per batch would make at least count / 4 of them (a batch
        # holds at most the 256 KiB high-water mark and a frame); whole records leave
        # only the few at the start and end of the transfer.
        assert reads > count * 4
        assert short <= 3, f"{short} short records in {reads}"


@over_every_transport
async def test_stream_openings_reach_the_peer_while_the_program_stays_busy(
    transport: Callable[[], Any], mock_clock: trio.testing.MockClock
) -> None:
    """A control frame does not wait for the program to idle: with many tasks running
    (a stream per request), a writer that waited for idleness would leave the peer
    idle, waiting on the openings and closes it has to act on."""
    # The opening loop never lets the program idle, and the clock moves only when it
    # does: neither the delay bound nor idleness can end the writer's wait here.
    config = mplex.Config(max_flush_delay=60)
    async with (
        transport() as (a, b),
        mplex.open_muxer(a, config) as left,
        mplex.open_muxer(b, config) as right,
        trio.open_nursery() as nursery,
    ):
        accepted = 0

        async def accept() -> None:
            nonlocal accepted
            async for _ in right:
                accepted += 1

        nursery.start_soon(accept)
        await settle()
        mock_clock.autojump_threshold = 0  # time moves only when every task is blocked
        opened = 0
        # Each opening yields, so the loop never idles; it stays below max_outbound_streams.
        while accepted < 50 and opened < 1000:
            await left.open_stream()
            opened += 1
        assert accepted >= 50, f"the peer accepted {accepted} of {opened} streams"
        nursery.cancel_scope.cancel()


async def reply_and_close(stream: mplex.MplexStream) -> None:
    """A request/response handler: the request to its end, the reply, then close."""
    request = await read_all(stream)
    await stream.send_all(b"re:" + request)
    await stream.aclose()


class TestRequestsAndRepliesLeaveWhole:
    """A request's NewStream, Message and Close leave in one write, and so do a reply's
    Message and Close: the task that queued them writes them as it ends its sending or
    waits for the peer, and the writer lets a quiet connection's frames settle first."""

    @over_every_transport
    async def test_a_request_and_its_reply_take_one_write_each(self, transport: Any) -> None:
        async with muxer_pair(transport) as (client, server), trio.open_nursery() as nursery:

            async def serve() -> None:
                async for stream in server:
                    nursery.start_soon(reply_and_close, stream)

            nursery.start_soon(serve)
            await settle()
            before = client.stats.writes, server.stats.writes
            await ask(client, 20)
            await settle()
            assert (client.stats.writes - before[0], server.stats.writes - before[1]) == (20, 20)
            nursery.cancel_scope.cancel()

    @over_every_transport
    async def test_a_served_reply_closed_by_serve_connection_takes_one_write(self, transport: Any) -> None:
        async with transport() as (a, b), trio.open_nursery() as nursery:
            served: list[mplex.Muxer | None] = []

            async def serve() -> None:
                served.append(await mplex.serve_connection(reply_and_return, b))

            nursery.start_soon(serve)
            async with mplex.open_muxer(a) as client:
                await ask(client, 20)
                await settle()
                writes = client.stats.writes
        (server,) = served
        assert server is not None
        # Each reply in one write (the connection's close adds none: the client closed it).
        assert (writes, server.stats.writes) == (20, 20)

    @over_every_transport
    async def test_frames_nobody_writes_leave_on_their_own(
        self, transport: Any, mock_clock: trio.testing.MockClock
    ) -> None:
        # A task that queues frames and then waits on something else entirely: the
        # writer sends them after letting them settle, with no timer (a frozen clock).
        async with trio.open_nursery() as nursery:

            async def converse_then_stop_watching() -> None:
                await converse_with_frames_nobody_writes(transport)
                nursery.cancel_scope.cancel()

            nursery.start_soon(converse_then_stop_watching)
            # Reached only if every task waits before the conversation ends: frames
            # nobody writes stayed queued.
            await trio.testing.wait_all_tasks_blocked()
            pytest.fail("queued frames never left")

    @over_every_transport
    async def test_frames_nobody_writes_leave_before_the_program_sleeps(self, transport: Any) -> None:
        # The same with the real clock and a deadline (this test's own): trio would
        # sleep until it, and the frames must leave as the program goes idle.
        with trio.fail_after(10):
            await converse_with_frames_nobody_writes(transport)


async def converse_with_frames_nobody_writes(transport: Any) -> None:
    """Each side queues frames and then waits on something else entirely (the other
    side): only the writer can send them."""
    async with muxer_pair(transport) as (client, server):
        stream = await client.open_stream()
        accepted = await server.accept_stream()
        await stream.send_all(b"question")
        await stream.send_eof()
        assert await read_all(accepted) == b"question"
        await accepted.send_all(b"answer, and no close")
        assert await stream.receive_some() == b"answer, and no close"


@pytest.mark.parametrize("attempt", range(20))
async def test_a_large_send_behind_queued_frames_is_woken_when_another_task_writes_them(
    attempt: int,
) -> None:
    # A small reply (to a peer that has finished sending) waits a pass to settle; a
    # large send on another stream finds it queued and waits for the queue to empty;
    # the replying task then waits for the peer on a third stream, and so writes
    # what is queued from its own task.  The large send must be woken by that write:
    # the writer task finds nothing left to write.  Whether the large send comes
    # first in its scheduler pass is trio's random choice, so the case runs a number
    # of times.
    async with muxer_pair(tcp_transport) as (left, right):
        answering = await left.open_stream()
        await answering.send_eof()
        answered = await right.accept_stream()
        assert await answered.receive_some() == b""
        asking = await left.open_stream()
        await asking.send_all(b"?")
        listening = await right.accept_stream()
        assert await listening.receive_some() == b"?"
        large = await right.open_stream()
        far_end = await left.accept_stream()
        payload = bytes(range(256)) * 1000
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def reply_then_listen() -> None:
                    await answered.send_all(b"reply")
                    assert await listening.receive_some() == b"go on"
                    await answered.send_eof()

                async def send_large() -> None:
                    await large.send_all(payload)
                    await large.send_eof()

                nursery.start_soon(reply_then_listen)
                nursery.start_soon(send_large)
                assert await read_all(far_end) == payload
                await asking.send_all(b"go on")
                assert await read_all(answering) == b"reply"
