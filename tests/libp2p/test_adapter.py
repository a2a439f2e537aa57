"""``mplex.libp2p`` over fake secured connections: py-libp2p's own ``SecureSession``
and ``InsecureSession`` classes over in-memory pipes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing
from libp2p.io.exceptions import ConnectionClosedError, IncompleteReadError
from libp2p.network.connection.exceptions import RawConnError
from libp2p.stream_muxer.exceptions import (
    MuxedConnUnavailable,
    MuxedStreamClosed,
    MuxedStreamEOF,
    MuxedStreamReset,
)

import mplex
import mplex.libp2p
from mplex.libp2p import MAX_SECURE_MESSAGE, MplexMuxedConn, SecuredConnectionStream
from tests.libp2p.fakes import plaintext_session_pair, secure_session_pair

SESSION_PAIRS = pytest.mark.parametrize(
    "session_pair", [secure_session_pair, plaintext_session_pair], ids=["secure", "plaintext"]
)


@contextlib.asynccontextmanager
async def stalled_stream(config: mplex.Config) -> AsyncIterator[tuple[MplexMuxedConn, Any]]:
    """A started connection and a stream of it whose writes never complete from now on
    (a peer that stopped reading), with a 1 s write deadline."""
    dialer, _, pipe, _ = secure_session_pair()
    conn = MplexMuxedConn.configured(config)(dialer, dialer.remote_peer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.start)
        await conn.event_started.wait()
        stream = await conn.open_stream()
        pipe.stalled = True
        stream.set_write_deadline(1)
        yield conn, stream


class TestTheSecuredConnectionAsATrioStream:
    async def test_a_secure_session_is_read_a_message_at_a_time(self) -> None:
        session, _, _, peer = secure_session_pair()
        stream = SecuredConnectionStream(session)
        await peer.write_msg(b"first")
        await peer.write_msg(b"second")
        assert await stream.receive_some() == b"first"
        assert await stream.receive_some(2) == b"se"
        assert await stream.receive_some(100) == b"cond"

    async def test_a_plaintext_session_is_read_up_to_max_bytes(self) -> None:
        session, _, _, peer = plaintext_session_pair()
        stream = SecuredConnectionStream(session)
        await peer.write(b"0123456789")
        assert await stream.receive_some(4) == b"0123"
        assert await stream.receive_some() == b"456789"

    @pytest.mark.parametrize(
        "end", [ConnectionClosedError("closed"), IncompleteReadError("short"), EOFError()], ids=type
    )
    async def test_every_end_of_secure_input_is_an_empty_read(self, end: BaseException) -> None:
        session, _, pipe, peer = secure_session_pair()
        pipe.end_error = end
        stream = SecuredConnectionStream(session)
        await peer.write_msg(b"last")
        await peer.close()
        assert await stream.receive_some() == b"last"
        assert await stream.receive_some() == b""

    async def test_the_end_of_plaintext_input_is_an_empty_read(self) -> None:
        session, _, _, peer = plaintext_session_pair()
        stream = SecuredConnectionStream(session)
        await peer.close()
        assert await stream.receive_some() == b""

    @SESSION_PAIRS
    @pytest.mark.parametrize("error", [RawConnError("reset by peer"), RuntimeError("a bug below")], ids=type)
    async def test_other_failures_are_broken_resource_errors_with_the_cause(
        self, session_pair: Callable[[], Any], error: BaseException
    ) -> None:
        session, _, pipe, _ = session_pair()
        pipe.fail_with = error
        stream = SecuredConnectionStream(session)
        with pytest.raises(trio.BrokenResourceError) as receiving:
            await stream.receive_some()
        assert receiving.value.__cause__ is error
        with pytest.raises(trio.BrokenResourceError) as sending:
            await stream.send_all(b"x")
        assert sending.value.__cause__ is error

    async def test_writes_are_bytes_of_at_most_one_secure_message(self) -> None:
        session, _, pipe, _ = secure_session_pair()
        stream = SecuredConnectionStream(session)
        data = bytearray(range(256)) * 800  # 204,800 bytes: more than three messages
        await stream.send_all(data)
        await stream.send_all(memoryview(b"tail"))
        assert all(type(message) is bytes for message in pipe.written)
        assert max(map(len, pipe.written)) <= MAX_SECURE_MESSAGE
        assert b"".join(pipe.written) == bytes(data) + b"tail"

    async def test_a_closed_stream_raises_closed_resource_error(self) -> None:
        session, _, pipe, _ = secure_session_pair()
        stream = SecuredConnectionStream(session)
        await stream.aclose()
        await stream.aclose()
        assert pipe.closed
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"x")
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some()


@contextlib.asynccontextmanager
async def connected(
    session_pair: Callable[[], Any] = secure_session_pair, conn_class: type[MplexMuxedConn] = MplexMuxedConn
) -> AsyncIterator[tuple[MplexMuxedConn, MplexMuxedConn, list[str]]]:
    """Two started connections over a fake session pair, and a log of on_close calls."""
    dialer, listener, _, _ = session_pair()
    closes: list[str] = []
    a = conn_class(dialer, dialer.remote_peer)
    b = conn_class(listener, listener.remote_peer)

    async def closed(name: str) -> None:
        closes.append(name)

    a.on_close = lambda: closed("a")
    b.on_close = lambda: closed("b")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.start)
        nursery.start_soon(b.start)
        with trio.fail_after(5):
            await a.event_started.wait()
            await b.event_started.wait()
        try:
            yield a, b, closes
        finally:
            with trio.fail_after(10):
                await a.close()
                await b.close()


class TestTheConnection:
    @SESSION_PAIRS
    async def test_streams_carry_data_both_ways(self, session_pair: Callable[[], Any]) -> None:
        async with connected(session_pair) as (a, b, _):
            out = await a.open_stream()
            await out.write(b"ping")
            accepted = await b.accept_stream()
            assert await accepted.read(100) == b"ping"
            await accepted.write(b"pong")
            await accepted.close()
            assert await out.read() == b"pong"
            assert a.is_established and a.is_initiator and not b.is_initiator

    async def test_on_close_is_called_exactly_once_however_it_ends(self) -> None:
        async with connected() as (a, b, closes):
            await a.close()
            with trio.fail_after(5):
                await b.event_closed.wait()
            await a.close()
        assert sorted(closes) == ["a", "b"]
        assert a.is_closed and b.is_closed

    async def test_close_works_before_start(self) -> None:
        dialer, _, pipe, _ = secure_session_pair()
        conn = MplexMuxedConn(dialer, dialer.remote_peer)
        closes: list[int] = []

        async def on_close() -> None:
            closes.append(1)

        conn.on_close = on_close
        with trio.fail_after(5):
            await conn.close()
            await conn.start()  # returns at once: the connection is over
        assert closes == [1] and conn.is_closed and pipe.closed
        with pytest.raises(MuxedConnUnavailable):
            await conn.open_stream()

    @pytest.mark.parametrize(
        "garbage", [b"\xff" * 12, b"GET / HTTP/1.1\r\n\r\n", b"\x0f\x00"], ids=["varint", "http", "flag 7"]
    )
    async def test_no_peer_behaviour_escapes_start(self, garbage: bytes) -> None:
        dialer, _, _, peer = secure_session_pair()
        conn = MplexMuxedConn(dialer, dialer.remote_peer)
        await peer.write_msg(garbage)
        with trio.fail_after(5):
            await conn.start()  # returns: it does not raise
        assert conn.muxer.end_reason is mplex.EndReason.PROTOCOL_ERROR
        with pytest.raises(MuxedConnUnavailable):
            await conn.accept_stream()

    async def test_a_secured_connection_that_breaks_ends_start_quietly(self) -> None:
        dialer, _, pipe, _ = secure_session_pair()
        pipe.fail_with = RuntimeError("a bug in a layer below")
        conn = MplexMuxedConn(dialer, dialer.remote_peer)
        with trio.fail_after(5):
            await conn.start()
        assert conn.muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED

    async def test_open_and_accept_raise_unavailable_once_the_connection_ended(self) -> None:
        async with connected() as (a, b, _):
            await b.close()
            with trio.fail_after(5):
                await a.event_closed.wait()
            for conn in (a, b):
                with pytest.raises(MuxedConnUnavailable):
                    await conn.open_stream()
                with pytest.raises(MuxedConnUnavailable):
                    await conn.accept_stream()

    async def test_close_is_bounded_when_the_peer_stopped_reading(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        config = mplex.Config(close_timeout=2)
        async with stalled_stream(config) as (conn, stream):
            with pytest.raises(TimeoutError):
                while True:
                    await stream.write(b"x" * 65536)
            started = trio.current_time()
            await conn.close()
            assert trio.current_time() - started <= config.close_timeout + 0.5
        assert conn.is_closed

    async def test_configured_binds_a_config(self) -> None:
        config = mplex.Config(max_stream_buffer=12345)
        conn_class = MplexMuxedConn.configured(config)
        assert issubclass(conn_class, MplexMuxedConn) and conn_class.config is config
        async with connected(conn_class=conn_class) as (a, _, _):
            assert a.muxer.config is config
        with pytest.raises(TypeError):
            MplexMuxedConn.configured({"max_stream_buffer": 1})  # type: ignore[arg-type]
        options = mplex.libp2p.muxer_options(config)
        assert list(options) == ["/mplex/6.7.0"]
        assert options["/mplex/6.7.0"].config is config  # type: ignore[attr-defined]
        assert mplex.libp2p.muxer_options()["/mplex/6.7.0"] is MplexMuxedConn


class TestTheStream:
    async def test_a_waiting_read_never_blocks_a_write(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.write(b"open")
            accepted = await b.accept_stream()
            await accepted.read(4)
            async with trio.open_nursery() as nursery:
                got: list[bytes] = []

                async def read() -> None:
                    got.append(await out.read(10))

                nursery.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                await out.write(b"meanwhile")  # while read() waits on the same stream
                assert await accepted.read(100) == b"meanwhile"
                await accepted.write(b"reply")
            assert got == [b"reply"]

    async def test_two_writers_take_turns_and_never_interleave(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            size = 300_000  # many frames each
            async with trio.open_nursery() as nursery:
                nursery.start_soon(out.write, b"a" * size)
                nursery.start_soon(out.write, b"b" * size)
            await out.close()
            accepted = await b.accept_stream()
            data = await accepted.read()
            assert data in (b"a" * size + b"b" * size, b"b" * size + b"a" * size)

    async def test_a_cancelled_write_queues_nothing(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.write(b"first ")  # the next writes are a burst (queued at once)
            with trio.CancelScope() as scope:
                scope.cancel()
                await out.write(b"lost")
            await out.write(b"kept")
            await out.close()
            accepted = await b.accept_stream()
            assert await accepted.read() == b"first kept"

    async def test_a_loop_of_short_writes_lets_other_tasks_run(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.write(b"x" * 32)  # the writes below are a burst (queued at once)
            ran = trio.Event()

            async def other_task() -> None:
                ran.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(other_task)
                # trio may run the writer first in the pass after its first yield, so
                # the other task is sure to have run only after a second yield.
                for _ in range(2 * mplex.libp2p.YIELD_EVERY):
                    await out.write(b"x" * 32)
                assert ran.is_set()
            await out.close()
            accepted = await b.accept_stream()
            assert await accepted.read() == b"x" * 32 * (2 * mplex.libp2p.YIELD_EVERY + 1)

    async def test_long_writes_queue_no_more_than_the_high_water_mark(self) -> None:
        config = mplex.Config(send_high_water=100_000, close_timeout=1)
        async with stalled_stream(config) as (conn, stream):
            with trio.fail_after(5), pytest.raises(TimeoutError):
                await stream.write(b"x" * 4_000_000)
            queued = conn.muxer.stats.queued_bytes
            assert queued <= config.send_high_water + config.max_send_frame_size + 64
            with trio.fail_after(5), pytest.raises(TimeoutError):
                for _ in range(1000):
                    await stream.write(b"y" * mplex.libp2p.QUEUE_AT_ONCE)
            queued = conn.muxer.stats.queued_bytes
            assert queued <= config.send_high_water + mplex.libp2p.QUEUE_AT_ONCE + 64
            await conn.close()

    async def test_a_writer_that_never_waits_cannot_shut_another_out(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            writes = 3 * mplex.libp2p.YIELD_EVERY

            async def writer(byte: bytes) -> None:
                for _ in range(writes):
                    await out.write(byte)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer, b"a")
                nursery.start_soon(writer, b"b")
            await out.close()
            accepted = await b.accept_stream()
            data = await accepted.read()
            assert sorted(data) == sorted(b"ab" * writes)
            # Neither finished all its writes before the other began: they took turns.
            assert data not in (b"a" * writes + b"b" * writes, b"b" * writes + b"a" * writes)

    async def test_the_end_of_the_stream_raises_eof_and_read_none_reads_to_it(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.write(b"one ")
            await out.write(b"two")
            await out.close()
            accepted = await b.accept_stream()
            assert await accepted.read() == b"one two"
            with pytest.raises(MuxedStreamEOF):
                await accepted.read(10)
            with pytest.raises(MuxedStreamEOF):
                await accepted.read()

    async def test_close_is_a_half_close(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.close()
            await out.close()  # idempotent
            with pytest.raises(MuxedStreamClosed):
                await out.write(b"late")
            accepted = await b.accept_stream()
            await accepted.write(b"still flowing")
            await accepted.close()
            assert await out.read() == b"still flowing"

    async def test_a_reset_reaches_both_ends(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.write(b"before")
            accepted = await b.accept_stream()
            assert await accepted.read(6) == b"before"
            await out.reset()
            with pytest.raises(MuxedStreamReset):
                await out.read(1)
            with pytest.raises(MuxedStreamClosed):
                await out.write(b"x")
            with trio.fail_after(5), pytest.raises(MuxedStreamReset):
                await accepted.read(1)
            with pytest.raises(mplex.libp2p.StreamResetWhileWriting) as writing:
                await accepted.write(b"x")
            assert isinstance(writing.value, MuxedStreamClosed)
            assert isinstance(writing.value, MuxedStreamReset)

    @pytest.mark.parametrize("n", [100, None], ids=["read(100)", "read() to the end"])
    async def test_data_that_arrived_before_a_reset_is_read_first(self, n: int | None) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await out.write(b"kept")
            accepted = await b.accept_stream()
            await trio.testing.wait_all_tasks_blocked()
            await out.reset()
            await trio.testing.wait_all_tasks_blocked()
            assert await accepted.read(n) == b"kept"
            with pytest.raises(MuxedStreamReset):
                await accepted.read(100)
            with pytest.raises(MuxedStreamReset):
                await accepted.read()

    async def test_a_reply_to_a_peer_that_stopped_reading_honours_the_write_deadline(self) -> None:
        dialer, _, pipe, _ = secure_session_pair()
        conn = MplexMuxedConn(dialer, dialer.remote_peer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.start)
            await conn.event_started.wait()
            stream = await conn.open_stream()
            # The NewStream frame is out and the link quiet; then the peer stops reading.
            await trio.testing.wait_all_tasks_blocked(0.01)
            await trio.sleep(0.002)
            pipe.stalled = True
            stream.set_write_deadline(0.5)
            ended = trio.Event()

            async def reply() -> None:
                try:
                    with contextlib.suppress(TimeoutError):
                        await stream.write(b"reply")
                finally:
                    ended.set()

            started = trio.current_time()
            nursery.start_soon(reply)
            with trio.move_on_after(10):
                await ended.wait()
            took = trio.current_time() - started
            pipe.unstalled.set()  # a write held past its deadline may end now
            await ended.wait()
            # Queued (the send buffer has room) or timed out: either way, in time.
            assert took < 0.5 + 1.0, f"the write took {took:.1f} s against a 0.5 s deadline"
            await conn.close()

    async def test_a_deadline_bounds_reads_and_writes(self, autojump_clock: trio.testing.MockClock) -> None:
        async with connected() as (a, _, _):
            out = await a.open_stream()
            with pytest.raises(ValueError):
                out.set_deadline(-1)
            out.set_deadline(2)
            started = trio.current_time()
            with pytest.raises(TimeoutError):
                await out.read(1)
            assert trio.current_time() - started == pytest.approx(2)

    async def test_the_connections_end_resets_its_streams(self) -> None:
        async with connected() as (a, b, _):
            out = await a.open_stream()
            await b.close()
            with trio.fail_after(5):
                await a.event_closed.wait()
            with pytest.raises(MuxedStreamReset):
                await out.read(1)
            with pytest.raises(MuxedStreamClosed):
                await out.write(b"x")
