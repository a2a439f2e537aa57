"""The boundary a new user meets: wrong arguments, unstarted muxers, ends of connections.

A wrong argument raises before anything reaches the wire; the muxer says why a
connection ended; streams nobody accepted never stall the streams a program uses.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import logging
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
    settle,
    tcp_transport,
    tls_transport,
)

SMALL_FRAMES = mplex.Config(max_send_frame_size=16)


class TestNothingHalfMadeReachesTheWire:
    @over_every_transport
    @pytest.mark.parametrize("wrong", ["text", 42, None, ["a list"]], ids=["str", "int", "None", "list"])
    @pytest.mark.parametrize(
        "path", ["send_all", "send_nowait", "send_all-repeated-size", "send_nowait-repeated-size"]
    )
    async def test_a_wrong_argument_raises_and_queues_nothing(
        self, transport: Callable[[], Any], wrong: object, path: str
    ) -> None:
        async with muxer_pair(transport, SMALL_FRAMES) as (left, right):
            stream = await left.open_stream()
            method = path.split("-", maxsplit=1)[0]
            if path.endswith("repeated-size"):  # the cached-prefix hot path for len 4
                await stream.send_all(b"four")
            with pytest.raises(TypeError, match="bytes-like"):
                if method == "send_all":
                    await stream.send_all(wrong)  # type: ignore[arg-type]
                else:
                    stream.send_nowait(wrong)  # type: ignore[arg-type]
            await stream.send_all(b"ok")
            await stream.send_eof()
            peer = await right.accept_stream()
            expected = b"fourok" if path.endswith("repeated-size") else b"ok"
            assert await read_all(peer) == expected
            assert not left.closed and not right.closed

    @over_every_transport
    async def test_a_wrong_argument_longer_than_a_frame_queues_nothing(
        self, transport: Callable[[], Any]
    ) -> None:
        async with muxer_pair(transport, SMALL_FRAMES) as (left, right):
            stream = await left.open_stream()
            with pytest.raises(TypeError):
                await stream.send_all("much longer than one sixteen-byte frame")  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                stream.send_nowait("much longer than one sixteen-byte frame")  # type: ignore[arg-type]
            await stream.send_all(b"ok")
            await stream.send_eof()
            assert await read_all(await right.accept_stream()) == b"ok"

    @over_every_transport
    @pytest.mark.parametrize("method", ["send_all", "send_nowait"])
    @pytest.mark.parametrize(
        "make",
        [
            lambda: memoryview(array.array("H", [1, 2, 3])),
            lambda: array.array("H", [1, 2, 3]),
            lambda: array.array("d", [0.5] * 40),  # 320 bytes: longer than a frame
            lambda: memoryview(bytes(range(24))).cast("B", (4, 6)),  # 2-D
            lambda: memoryview(bytes(range(40)))[::3],  # not contiguous
            lambda: bytearray(b"plain bytearray"),
        ],
        ids=["memoryview-H", "array-H", "array-d-long", "2d", "strided", "bytearray"],
    )
    async def test_any_buffer_sends_its_bytes(
        self, transport: Callable[[], Any], method: str, make: Callable[[], Any]
    ) -> None:
        async with muxer_pair(transport, mplex.Config(max_send_frame_size=64)) as (left, right):
            stream = await left.open_stream()
            # Prime the repeated-size path with the buffer's len() (not its byte count).
            await stream.send_all(b"x" * len(make()))
            data = make()
            if method == "send_all":
                await stream.send_all(data)
            else:
                stream.send_nowait(data)
            await stream.send_eof()
            assert (
                await read_all(await right.accept_stream())
                == b"x" * len(make()) + memoryview(make()).tobytes()
            )


class TestUnstartedMuxer:
    async def test_using_a_muxer_that_is_not_running_is_a_clear_error(self) -> None:
        muxer = mplex.Muxer(trio.testing.memory_stream_pair()[0])
        with pytest.raises(RuntimeError, match="not running"):
            await muxer.open_stream()
        with pytest.raises(RuntimeError, match="not running"):
            await muxer.accept_stream()
        await muxer.aclose()

    async def test_async_with_a_muxer_runs_it_for_the_block(self) -> None:
        a, b = trio.testing.memory_stream_pair()
        async with mplex.Muxer(a) as left, mplex.Muxer(b) as right:
            stream = await left.open_stream()
            await stream.send_all(b"it runs")
            await stream.send_eof()
            assert await read_all(await right.accept_stream()) == b"it runs"
        assert left.closed and right.closed
        assert right.end_reason is mplex.EndReason.CLOSED  # closed first, by its block


class TestArgumentTypes:
    @pytest.mark.parametrize(
        ("field", "value", "error"),
        [
            ("max_message_size", "big", TypeError),
            ("max_inbound_streams", 1.5, TypeError),
            ("max_outbound_streams", True, TypeError),
            ("send_high_water", None, TypeError),
            ("slow_reader_timeout", "5", TypeError),
            ("slow_reader_timeout", float("nan"), ValueError),
            ("abuse_window", float("inf"), ValueError),
            ("max_stream_buffer", -1, ValueError),
            ("slow_reader_policy", "drop", ValueError),
            ("socket_fast_path", 1, TypeError),
            ("prime_allocator", None, TypeError),
        ],
    )
    def test_config_names_the_field_and_takes_the_right_type(
        self, field: str, value: object, error: type[Exception]
    ) -> None:
        with pytest.raises(error, match=f"Config.{field}"):
            mplex.Config(**{field: value})  # type: ignore[arg-type]

    def test_config_takes_ints_for_seconds(self) -> None:
        assert mplex.Config(slow_reader_timeout=2).slow_reader_timeout == 2

    @pytest.mark.parametrize("name", [42, 4.2, bytearray(b"x"), ["x"]])
    async def test_a_stream_name_is_str_bytes_or_none(self, name: object) -> None:
        async with raw_pair() as (muxer, peer):
            with pytest.raises(TypeError, match="stream name"):
                await muxer.open_stream(name)  # type: ignore[arg-type]
            await muxer.open_stream("next")
            assert await peer.receive_frames(1) == [mplex.Frame(0, Flag.NEW_STREAM, b"next")]

    @pytest.mark.parametrize(
        ("config", "length"),
        [
            (mplex.Config(), 1025),  # over max_stream_name_size
            (mplex.Config(), 5_000),
            (mplex.Config(max_stream_name_size=1_000_000), 64 * 1024 + 1),  # over one frame
            (mplex.Config(max_stream_name_size=1_000_000), 1024 * 1024),
        ],
    )
    async def test_a_name_over_the_limit_is_refused_before_anything_is_taken(
        self, config: mplex.Config, length: int
    ) -> None:
        config = dataclasses.replace(config, max_outbound_streams=2)
        async with raw_pair(config) as (muxer, peer):
            for _ in range(3):  # more refusals than there are outbound slots
                with pytest.raises(ValueError, match="max_stream_name_size"):
                    await muxer.open_stream(b"n" * length)
            assert muxer.stats.outbound_streams == 0 and muxer.stats.live_streams == 0
            limit = min(config.max_stream_name_size, config.max_send_frame_size)
            first = await muxer.open_stream(b"n" * limit)  # the longest allowed
            second = await muxer.open_stream()
            assert (first.id, second.id) == (0, 1)  # no id was taken by a refusal
            frames = await peer.receive_frames(2)
            assert frames == [
                mplex.Frame(0, Flag.NEW_STREAM, b"n" * limit),
                mplex.Frame(1, Flag.NEW_STREAM, b"1"),
            ]

    async def test_one_protocol_id_as_a_str_is_one_id(self) -> None:
        async with muxer_pair() as (left, right):
            outbound = await left.open_stream()
            async with trio.open_nursery() as nursery:

                async def listen() -> None:
                    inbound = await right.accept_stream()
                    assert await mplex.accept_protocol(inbound, "/echo/1.0.0") == "/echo/1.0.0"

                nursery.start_soon(listen)
                assert await mplex.select_protocol(outbound, "/echo/1.0.0") == "/echo/1.0.0"

    def test_a_str_id_is_never_split_into_characters(self) -> None:
        assert mplex.DialerNegotiation("/echo/1.0.0").protocols == ["/echo/1.0.0"]
        listener = mplex.ListenerNegotiation("/e")
        assert listener.protocols == ["/e"]
        listener.receive_data(mplex.DialerNegotiation("/").data_to_send())
        assert listener.selected is None  # "/" is not one of our ids

    @pytest.mark.parametrize("ids", [[b"/echo/1.0.0"], [42]])
    def test_protocol_ids_are_str(self, ids: list[object]) -> None:
        with pytest.raises(TypeError, match="protocol id"):
            mplex.DialerNegotiation(ids)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="protocol id"):
            mplex.ListenerNegotiation(ids)  # type: ignore[arg-type]


class TestHowAConnectionEnds:
    @over_every_transport
    async def test_after_our_aclose_streams_raise_muxer_closed(self, transport: Callable[[], Any]) -> None:
        async with muxer_pair(transport) as (left, _right):
            stream = await left.open_stream()
            await left.aclose()
            for attempt in (stream.send_all(b"x"), stream.receive_some(), left.open_stream()):
                with pytest.raises(trio.ClosedResourceError) as info:
                    await attempt
                assert isinstance(info.value, mplex.MuxerClosed)
                assert info.value.reason is mplex.EndReason.CLOSED
            assert left.end_reason is mplex.EndReason.CLOSED

    @over_every_transport
    async def test_a_clean_end_of_input_has_its_reason(self, transport: Callable[[], Any]) -> None:
        async with transport() as (a, b), mplex.open_muxer(a) as muxer:
            await trio.aclose_forcefully(b)
            assert [s async for s in muxer] == []  # async for ends
            assert muxer.end_reason in {mplex.EndReason.PEER_CLOSED, mplex.EndReason.TRANSPORT_FAILED}
            error = muxer.end_error
            assert isinstance(error, mplex.ConnectionLost)
            assert error.reason is muxer.end_reason

    async def test_the_peer_closing_is_peer_closed_with_no_cause(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(0, Flag.NEW_STREAM))
            stream = await muxer.accept_stream()
            await peer.stream.aclose()
            with pytest.raises(mplex.ConnectionLost) as info:
                await stream.receive_some()
            assert info.value.reason is mplex.EndReason.PEER_CLOSED
            assert info.value.__cause__ is None
            assert muxer.end_reason is mplex.EndReason.PEER_CLOSED


class TestOutboundSlots:
    async def test_our_own_close_frees_the_slot_without_waiting_for_the_peer(self) -> None:
        async with raw_pair(mplex.Config(max_outbound_streams=1)) as (muxer, _peer):
            first = await muxer.open_stream()
            await first.aclose()  # the peer never closes its side
            with trio.fail_after(5):
                second = await muxer.open_stream()
            second.reset()
            with trio.fail_after(5):
                await muxer.open_stream()
            assert muxer.stats.outbound_streams == 1


class TestPublicFace:
    def test_public_classes_show_as_mplex_names(self) -> None:
        for name in mplex.__all__:
            value = getattr(mplex, name)
            if isinstance(value, type):
                assert value.__module__ == "mplex", name
        assert repr(mplex.StreamReset) == "<class 'mplex.StreamReset'>"

    async def test_stats_is_a_read_only_snapshot(self) -> None:
        async with muxer_pair() as (left, _right):
            before = left.stats
            with pytest.raises(dataclasses.FrozenInstanceError):
                before.bytes_sent = 5  # type: ignore[misc]
            stream = await left.open_stream()
            await stream.send_all(b"counted")
            await settle()
            assert before.streams_opened == 0  # a snapshot does not move
            assert left.stats.streams_opened == 1
            assert left.stats.bytes_sent > 0


class TestStreamsNobodyAccepts:
    @over_every_transport
    async def test_a_dialing_program_keeps_flowing_while_the_peer_floods_an_unaccepted_stream(
        self, transport: Callable[[], Any]
    ) -> None:
        small = mplex.Config(max_stream_buffer=64 * 1024, max_connection_buffer=256 * 1024)
        async with muxer_pair(transport, small) as (dialer, peer):
            flooding = trio.Event()
            flood_over = trio.Event()

            async def flood() -> None:
                pushed = await peer.open_stream("gossip")  # never accepted by the dialer
                with contextlib.suppress(mplex.StreamReset):  # it may learn of the reset
                    for n in range(200):  # 3.2 MiB, 50x the stream's limit
                        await pushed.send_all(b"g" * 16384)
                        if n == 5:
                            flooding.set()  # over the limit, and queued before the reply
                # The dialer's policy resets the stream nobody accepted, and the flooder
                # hears of it (over TCP the flood cannot even finish before that; over
                # a memory stream, which has no buffer limit, it can).
                with pytest.raises(mplex.StreamReset):
                    await pushed.receive_some()  # the dialer never sends on it
                flood_over.set()

            async def echo_server() -> None:
                stream = await peer.accept_stream()
                request = await read_all(stream)
                await flooding.wait()
                await stream.send_all(request)
                await stream.aclose()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                nursery.start_soon(echo_server)
                with trio.fail_after(10):
                    request = await dialer.open_stream("request")
                    await request.send_all(b"my own request")
                    await request.send_eof()
                    assert await read_all(request) == b"my own request"
                    await flood_over.wait()
                stats = dialer.stats
                nursery.cancel_scope.cancel()
            assert stats.streams_reset_by_policy == 1  # the flood was behind the reply
            assert stats.streams_waiting == 0  # the reset stream left the backlog
            assert stats.unread_bytes <= small.max_stream_buffer
            assert stats.reader_blocked_seconds < 1  # about Config.accept_grace

    async def test_many_small_unaccepted_streams_hold_the_reader_only_for_the_grace(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0
        # Each stays under max_stream_buffer; together they pass max_connection_buffer.
        config = mplex.Config(max_stream_buffer=32 * 1024, max_connection_buffer=64 * 1024)
        async with raw_pair(config) as (muxer, peer):
            for n in range(10):
                await peer.send(frame(n, Flag.NEW_STREAM), frame(n, Flag.MESSAGE_INITIATOR, b"u" * 20_000))
            await peer.send(frame(99, Flag.NEW_STREAM))
            resets = [f for f in await peer.receive_frames(7) if f.flag == Flag.RESET_RECEIVER]
            assert len(resets) == 7  # shed, largest first, until under the budget
            await settle()
            stats = muxer.stats
            assert stats.unread_bytes <= config.max_connection_buffer
            # Each read that leaves the reader stalled by them costs one grace period.
            assert config.accept_grace <= stats.reader_blocked_seconds <= 10 * config.accept_grace
            ids = [(await muxer.accept_stream()).id for _ in range(stats.streams_waiting)]
            assert ids[-1] == 99  # the reader went on reading

    async def test_an_accept_loop_never_loses_a_stream_that_arrives_with_a_burst(self) -> None:
        # The NewStream and far more than max_stream_buffer arrive in one read, before
        # the accept loop has run: the stream is held, not reset, until it is accepted.
        config = mplex.Config(max_stream_buffer=1024, max_connection_buffer=4096, accept_grace=0.001)
        async with raw_pair(config) as (muxer, peer):
            received: list[int] = []
            all_read = trio.Event()

            async def handle(stream: mplex.MplexStream) -> None:
                received.append(len(await stream.receive_some()))
                if len(received) == 3:
                    all_read.set()

            async def accept_loop(nursery: trio.Nursery) -> None:
                async for stream in muxer:
                    nursery.start_soon(handle, stream)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(accept_loop, nursery)
                await trio.testing.wait_all_tasks_blocked()
                for n in range(3):
                    await peer.send(frame(n, Flag.NEW_STREAM), frame(n, Flag.MESSAGE_INITIATOR, bytes(3000)))
                with trio.fail_after(10):
                    await all_read.wait()
                assert received == [3000, 3000, 3000]
                assert muxer.stats.streams_reset_by_policy == 0
                nursery.cancel_scope.cancel()

    async def test_max_inbound_streams_zero_refuses_every_inbound_stream(self) -> None:
        async with raw_pair(mplex.Config(max_inbound_streams=0)) as (muxer, peer):
            await peer.send(frame(0, Flag.NEW_STREAM), frame(0, Flag.MESSAGE_INITIATOR, b"unwanted"))
            assert await peer.receive_frames(1) == [mplex.Frame(0, Flag.RESET_RECEIVER, b"")]
            assert muxer.stats.streams_refused == 1
            ours = await muxer.open_stream()  # dialing still works
            assert ours.is_initiator

    async def test_reader_blocked_seconds_counts_a_stall_while_it_lasts(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0
        config = mplex.Config(max_stream_buffer=1024, max_connection_buffer=1024)
        async with raw_pair(config) as (muxer, peer):
            await peer.send(frame(0, Flag.NEW_STREAM))
            stream = await muxer.accept_stream()  # accepted, never read: "block" stalls
            await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"b" * 2048))
            await trio.testing.wait_all_tasks_blocked()
            first = muxer.stats.reader_blocked_seconds
            await trio.sleep(30)
            during = muxer.stats.reader_blocked_seconds
            assert during - first >= 30  # counted while the stall goes on
            assert len(await stream.receive_some()) == 2048
            await trio.testing.wait_all_tasks_blocked()
            after = muxer.stats.reader_blocked_seconds
            await trio.sleep(30)
            assert muxer.stats.reader_blocked_seconds == after  # and no longer once it ended


class TestLogging:
    async def test_remote_input_never_logs_at_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.DEBUG, logger="mplex")
        for attack in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" * 20, b"\x07\x00"):
            async with raw_pair() as (muxer, peer):
                await peer.send(attack)
                assert [s async for s in muxer] == []
        records = [r for r in caplog.records if r.name == "mplex"]
        assert records
        assert max(r.levelno for r in records) < logging.WARNING
        assert any(r.levelno == logging.INFO and "protocol" in r.getMessage() for r in records)

    @over_every_transport
    async def test_every_line_names_its_connection(
        self, transport: Callable[[], Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG, logger="mplex")
        async with muxer_pair(transport) as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"named")
            await stream.send_eof()
            assert await read_all(await right.accept_stream()) == b"named"
        messages = [r.getMessage() for r in caplog.records if r.name == "mplex"]
        assert messages
        labels = {f"[{left.name}] ", f"[{right.name}] "}
        assert all(any(m.startswith(label) for label in labels) for m in messages), messages
        if transport in (tcp_transport, tls_transport):  # a socket underneath: the peer's address
            assert "127.0.0.1:" in left.name
