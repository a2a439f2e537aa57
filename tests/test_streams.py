"""Stream semantics between two muxers: identity, half-close, reset, splitting."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from tests.helpers import memory_transport, muxer_pair, over_every_transport, read_all, settle


class TestIdentity:
    async def test_each_side_counts_ids_from_zero(self) -> None:
        async with muxer_pair() as (left, right):
            a0, a1 = await left.open_stream(), await left.open_stream()
            b0 = await right.open_stream()
            assert (a0.id, a1.id, b0.id) == (0, 1, 0)
            assert a0.is_initiator and b0.is_initiator

    async def test_id_zero_from_each_side_are_different_streams(self) -> None:
        async with muxer_pair() as (left, right):
            mine, theirs = await left.open_stream(), await right.open_stream()
            await mine.send_all(b"from left")
            await mine.send_eof()
            await theirs.send_all(b"from right")
            await theirs.send_eof()
            got_left = await left.accept_stream()
            got_right = await right.accept_stream()
            assert (got_left.id, got_right.id) == (0, 0)
            assert not got_left.is_initiator
            assert await read_all(got_right) == b"from left"
            assert await read_all(got_left) == b"from right"

    @pytest.mark.parametrize(("name", "sent"), [(None, "0"), ("chat", "chat"), (b"raw", "raw"), ("é", "é")])
    async def test_names_reach_the_peer(self, name: str | bytes | None, sent: str) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream(name)
            accepted = await right.accept_stream()
            assert accepted.name == stream.name == sent

    async def test_a_name_that_is_not_utf8_is_kept_raw_and_shown_replaced(self) -> None:
        async with muxer_pair() as (left, right):
            await left.open_stream(b"\xff\xfe")
            accepted = await right.accept_stream()
            assert accepted.name_bytes == b"\xff\xfe"
            assert accepted.name == "\ufffd\ufffd"

    async def test_long_names_are_cut_to_the_configured_size(self) -> None:
        config = mplex.Config(max_stream_name_size=8)
        async with muxer_pair(server_config=config) as (left, right):
            await left.open_stream("x" * 100)
            assert (await right.accept_stream()).name == "x" * 8


class TestHalfClose:
    async def test_send_eof_delivers_everything_then_eof_and_keeps_the_other_direction(
        self,
    ) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"request")
            await stream.send_eof()
            peer = await right.accept_stream()
            assert await read_all(peer) == b"request"
            assert await peer.receive_some() == b""  # EOF stays EOF
            await peer.send_all(b"response")
            await peer.send_eof()
            assert await read_all(stream) == b"response"

    async def test_sending_after_send_eof_is_a_closed_resource_error(self) -> None:
        async with muxer_pair() as (left, _right):
            stream = await left.open_stream()
            await stream.send_eof()
            with pytest.raises(trio.ClosedResourceError):
                await stream.send_all(b"late")
            with pytest.raises(trio.ClosedResourceError):
                stream.send_nowait(b"late")
            await stream.send_eof()  # repeating it is fine

    async def test_aclose_ends_both_directions_and_the_peer_sees_eof(self) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"bye")
            await stream.aclose()
            peer = await right.accept_stream()
            assert await read_all(peer) == b"bye"
            with pytest.raises(trio.ClosedResourceError):
                await stream.receive_some()

    async def test_writing_to_a_stream_the_peer_closed_ends_in_a_reset(self) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            peer = await right.accept_stream()
            await peer.aclose()
            with pytest.raises(mplex.StreamReset) as info, trio.fail_after(10):
                while True:
                    await stream.send_all(b"x" * 100)
            assert info.value.by_peer
            assert isinstance(info.value, trio.BrokenResourceError)


class TestReset:
    async def test_remote_reset_drains_buffered_data_then_raises(self) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"before the reset")
            stream.reset()
            peer = await right.accept_stream()
            with trio.fail_after(10):
                while right.stats.resets_received == 0:
                    await settle()
            assert await peer.receive_some() == b"before the reset"
            with pytest.raises(mplex.StreamReset):
                await peer.receive_some()
            with pytest.raises(mplex.StreamReset):
                await peer.receive_some()  # it stays reset
            with pytest.raises(mplex.StreamReset):
                await peer.send_all(b"x")
            with pytest.raises(mplex.StreamReset):
                await peer.send_eof()

    async def test_local_reset_is_idempotent_and_later_calls_say_closed(self) -> None:
        async with muxer_pair() as (left, _right):
            stream = await left.open_stream()
            stream.reset()
            stream.reset()
            with pytest.raises(trio.ClosedResourceError):
                await stream.send_all(b"x")
            with pytest.raises(trio.ClosedResourceError):
                await stream.receive_some()
            await stream.aclose()

    async def test_reset_wakes_a_blocked_reader(self) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"")
            peer = await right.accept_stream()

            async def read() -> None:
                with pytest.raises(mplex.StreamReset):
                    await peer.receive_some()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await settle()
                stream.reset()

    async def test_reset_after_eof_keeps_the_eof(self) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"complete")
            await stream.send_eof()
            peer = await right.accept_stream()
            assert await read_all(peer) == b"complete"
            stream.reset()
            with trio.fail_after(10):
                with pytest.raises(mplex.StreamReset):
                    while True:
                        await peer.send_all(b"x")
            assert await peer.receive_some() == b""


class TestSplitting:
    @pytest.mark.parametrize("frame_size", [1000, 64 * 1024, 1 << 20])
    async def test_large_writes_are_split_into_frames_of_at_most_the_limit(self, frame_size: int) -> None:
        data = bytes(range(256)) * (3 * 4096 + 7)  # just over 3 MiB
        a, b = trio.testing.memory_stream_pair()
        config = mplex.Config(max_send_frame_size=frame_size)
        async with mplex.open_muxer(a, config) as muxer:
            stream = await muxer.open_stream()
            await stream.send_all(data)
            stream.send_nowait(data)
            await muxer.aclose()
        decoder = mplex.Decoder()
        frames = decoder.feed(await read_all(b))
        messages = [f for f in frames if f.flag == mplex.Flag.MESSAGE_INITIATOR]
        assert max(len(f.data) for f in messages) == frame_size
        assert b"".join(f.data for f in messages) == data + data

    async def test_a_peer_sending_frames_of_exactly_one_mebibyte_is_understood(self) -> None:
        config = mplex.Config(max_send_frame_size=1 << 20)
        data = b"\x5a" * (3 << 20)
        async with muxer_pair(config=config, server_config=mplex.Config()) as (left, right):
            stream = await left.open_stream()

            async def send() -> None:
                await stream.send_all(data)
                await stream.send_eof()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                assert await read_all(await right.accept_stream()) == data


class TestManyStreams:
    async def test_a_thousand_concurrent_streams_each_get_exactly_their_bytes(self) -> None:
        rng = __import__("random").Random(1234)
        sizes = [rng.choice([0, 1, 31, 1000, rng.randrange(200_000)]) for _ in range(1000)]
        payloads = [rng.randbytes(n) for n in sizes]
        echoed: dict[int, bytes] = {}
        async with muxer_pair() as (left, right):

            async def echo_server() -> None:
                async with trio.open_nursery() as nursery:
                    for _ in payloads:
                        nursery.start_soon(echo, await right.accept_stream())

            async def echo(stream: mplex.MplexStream) -> None:
                while data := await stream.receive_some(50_000):
                    await stream.send_all(data)
                await stream.aclose()

            async def client(index: int) -> None:
                stream = await left.open_stream(f"s{index}")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send_then_eof, stream, payloads[index])
                    echoed[index] = await read_all(stream)

            async def send_then_eof(stream: mplex.MplexStream, data: bytes) -> None:
                for start in range(0, len(data), 7000):
                    await stream.send_all(data[start : start + 7000])
                await stream.send_eof()

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(echo_server)
                    for index in range(len(payloads)):
                        nursery.start_soon(client, index)
        assert [echoed[i] == payloads[i] for i in range(len(payloads))] == [True] * len(payloads)
        assert left.stats.live_streams == right.stats.live_streams == 0


#: The receiving side holds little, so a large send soon waits for room.
_SMALL_BUFFERS = mplex.Config(
    max_stream_buffer=64 * 1024, max_connection_buffer=64 * 1024, send_high_water=64 * 1024
)


@contextlib.asynccontextmanager
async def _with_backpressure(transport: Any) -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    """``transport``, but in memory a pair whose writes wait for the reader (trio's
    memory pair buffers without limit, so a writer there never waits)."""
    if transport is memory_transport:
        yield trio.testing.lockstep_stream_pair()
    else:
        async with transport() as pair:
            yield pair


@over_every_transport
class TestBusyGuards:
    """One task per direction, as trio's own streams: a second gets BusyResourceError,
    and the guard is free again once the first call has ended, however it ended."""

    async def test_a_second_sender_is_refused_while_a_send_waits(self, transport: Any) -> None:
        async with muxer_pair(lambda: _with_backpressure(transport), _SMALL_BUFFERS) as (left, right):
            stream = await left.open_stream()
            peer = await right.accept_stream()  # not read: the send below cannot finish
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stream.send_all, bytes(64 * 1024 * 1024))
                    await settle()
                    with pytest.raises(trio.BusyResourceError, match="another task is sending"):
                        await stream.send_all(b"x")
                    with pytest.raises(trio.BusyResourceError):
                        stream.send_nowait(b"x")
                    with pytest.raises(trio.BusyResourceError):
                        await stream.wait_send_all_might_not_block()
                    with pytest.raises(trio.BusyResourceError):
                        await stream.send_eof()
                    nursery.cancel_scope.cancel()
                await stream.send_eof()  # the cancelled send let go of the guard
                await peer.aclose()  # drops what arrived, so the muxers close at once

    async def test_a_second_receiver_is_refused_while_a_receive_waits(self, transport: Any) -> None:
        async with muxer_pair(transport) as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"hello")
            peer = await right.accept_stream()
            got: list[bytes] = []
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:

                    async def receive() -> None:
                        got.append(await peer.receive_some())
                        got.append(await peer.receive_some())

                    nursery.start_soon(receive)
                    await settle()
                    assert got == [b"hello"]  # the first call returned; the second waits
                    with pytest.raises(trio.BusyResourceError, match="another task is receiving"):
                        await peer.receive_some()
                    await stream.send_all(b"world")
                await stream.send_all(b"!")
                assert got == [b"hello", b"world"]
                assert await peer.receive_some() == b"!"  # free again

    async def test_a_failed_call_lets_go_of_the_guard(self, transport: Any) -> None:
        async with muxer_pair(transport) as (left, right):
            stream = await left.open_stream()
            with pytest.raises(TypeError):
                await stream.send_all("text")  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                await stream.receive_some(0)
            await stream.send_all(b"ok")
            peer = await right.accept_stream()
            assert await peer.receive_some() == b"ok"


@over_every_transport
class TestClosed:
    """``MplexStream.closed``: True once neither direction can carry more data."""

    async def test_a_stream_is_closed_once_both_sides_closed_it(self, transport: Any) -> None:
        async with transport() as (a, b), mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
            ours = await left.open_stream()
            assert not ours.closed
            await ours.send_eof()
            assert not ours.closed  # the peer may still send
            theirs = await right.accept_stream()
            assert await read_all(theirs) == b""
            assert not theirs.closed  # it may still send
            await theirs.send_eof()
            assert theirs.closed
            assert await read_all(ours) == b""
            assert ours.closed

    async def test_a_reset_closes_both_ends(self, transport: Any) -> None:
        async with transport() as (a, b), mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
            ours = await left.open_stream()
            await ours.send_all(b"x")
            theirs = await right.accept_stream()
            ours.reset()
            assert ours.closed
            with pytest.raises(mplex.StreamReset):
                while True:
                    await theirs.receive_some()
            assert theirs.closed

    async def test_the_connections_end_closes_every_stream(self, transport: Any) -> None:
        async with transport() as (a, _), mplex.open_muxer(a) as left:
            ours = await left.open_stream()
            await left.aclose()
            assert ours.closed


@over_every_transport
class TestWithoutCheckpoints:
    """``Muxer.accept_stream_nowait`` and ``MplexStream.close``: the synchronous forms,
    for a server taking the streams that arrived together, and for code that cannot
    await."""

    async def test_accept_stream_nowait_takes_waiting_streams_in_order_then_would_block(
        self, transport: Any
    ) -> None:
        async with muxer_pair(transport) as (left, right):
            with pytest.raises(trio.WouldBlock):
                right.accept_stream_nowait()
            opened = [await left.open_stream(f"s{i}") for i in range(3)]
            await opened[-1].send_all(b"last")
            await settle()  # all three have arrived
            first = await right.accept_stream()
            rest = [right.accept_stream_nowait(), right.accept_stream_nowait()]
            assert [s.name for s in [first, *rest]] == ["s0", "s1", "s2"]
            with pytest.raises(trio.WouldBlock):
                right.accept_stream_nowait()
            assert await rest[-1].receive_some() == b"last"

    async def test_accept_stream_nowait_after_the_end_raises_why(self, transport: Any) -> None:
        async with muxer_pair(transport) as (left, right):
            await left.open_stream()
            await left.aclose()
            with trio.fail_after(10):
                await right.accept_stream()  # what arrived before the end is handed out
                with pytest.raises(mplex.ConnectionLost):
                    while True:
                        right.accept_stream_nowait()
                        await trio.lowlevel.checkpoint()
            await right.aclose()
            with pytest.raises(mplex.ConnectionLost):
                right.accept_stream_nowait()

    async def test_accept_stream_nowait_on_our_closed_muxer_is_muxer_closed(self, transport: Any) -> None:
        async with muxer_pair(transport) as (_left, right):
            await right.aclose()
            with pytest.raises(mplex.MuxerClosed):
                right.accept_stream_nowait()

    async def test_close_is_aclose_without_a_checkpoint(self, transport: Any) -> None:
        async with muxer_pair(transport) as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"bye")
            stream.close()
            stream.close()  # idempotent
            with pytest.raises(trio.ClosedResourceError):
                stream.send_nowait(b"late")
            with pytest.raises(trio.ClosedResourceError):
                await stream.receive_some()
            peer = await right.accept_stream()
            assert await read_all(peer) == b"bye"
            await peer.aclose()
            await stream.aclose()  # after close: fine


@over_every_transport
async def test_stats_count_the_tasks_waiting_on_the_peer(transport: Any) -> None:
    """``receivers_waiting`` and ``senders_waiting``: what ``idle_timeout`` tells a
    handler waiting on the peer from one at work by."""
    config = mplex.Config(send_high_water=1024)
    async with (
        _with_backpressure(transport) as (a, b),
        mplex.open_muxer(a, config) as muxer,
        mplex.open_muxer(b) as peer,
    ):
        receivers = [await muxer.open_stream() for _ in range(3)]
        sender = await muxer.open_stream()
        for stream in [*receivers, sender]:
            await stream.send_all(b"hello")
            await (await peer.accept_stream()).receive_some()  # and never answers
        assert muxer.stats.receivers_waiting == 0
        async with trio.open_nursery() as nursery:
            for stream in receivers:
                nursery.start_soon(stream.receive_some)
            nursery.start_soon(sender.send_all, b"x" * 2**24)  # more than the peer reads
            await settle()
            stats = muxer.stats
            assert (stats.receivers_waiting, stats.senders_waiting) == (3, 1)
            nursery.cancel_scope.cancel()
        await settle()
        stats = muxer.stats
        assert (stats.receivers_waiting, stats.senders_waiting) == (0, 0)
