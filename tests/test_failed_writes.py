"""A failed write ends only the send side: the writer task, the only one that writes,
reports it with the transport's error as the cause, and the reader still delivers what
the peer had sent before it hung up, then the reason."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from tests.helpers import (
    PlainStream,
    RawPeer,
    frame,
    memory_transport,
    read_all,
    tcp_streams,
    tls_over,
)


@contextlib.asynccontextmanager
async def sockets_with_room() -> Any:
    """Loopback TCP whose kernel buffers hold a whole test payload, so that what one
    end sent before it hung up is all in the other end's kernel."""
    a, b = await tcp_streams(buffer_size=1 << 20)
    try:
        yield a, b
    finally:
        await trio.aclose_forcefully(a)
        await trio.aclose_forcefully(b)


@contextlib.asynccontextmanager
async def generic_sockets_with_room() -> Any:
    async with sockets_with_room() as (a, b):
        yield PlainStream(a), PlainStream(b)


@contextlib.asynccontextmanager
async def tls_with_room() -> Any:
    async with sockets_with_room() as (a, b):
        yield await tls_over(a, b)


@contextlib.asynccontextmanager
async def generic_tls_with_room() -> Any:
    """TLS over sockets the muxer reaches only through ``trio.SSLStream``'s methods."""
    async with sockets_with_room() as (a, b):
        yield await tls_over(PlainStream(a), PlainStream(b))


@contextlib.asynccontextmanager
async def hung_up_after_sending(
    transport: Callable[[], Any], payload: bytes
) -> AsyncIterator[tuple[mplex.Muxer, mplex.MplexStream]]:
    """Yield (a server muxer, its stream) after the client sent ``payload`` and EOF on
    the stream and hung up.  The server has read the first 1000 bytes and holds
    little, so most of the payload is still in the transport."""
    holds_little = mplex.Config(max_stream_buffer=32768, max_connection_buffer=65536)
    async with transport() as (a, b), mplex.open_muxer(b, holds_little) as server:
        async with mplex.open_muxer(a) as client:
            out = await client.open_stream()
            await out.send_all(payload[:1000])
            stream = await server.accept_stream()
            assert await stream.receive_some(1000) == payload[:1000]
            await out.send_all(payload[1000:])
            await out.send_eof()
        yield server, stream


async def reply_until_it_fails(stream: mplex.MplexStream) -> mplex.ConnectionLost:
    with trio.fail_after(10), pytest.raises(mplex.ConnectionLost) as sending:
        while True:
            await stream.send_all(b"reply")
            await trio.lowlevel.checkpoint()
    return sending.value


class TestAFailedWriteEndsOnlyTheSendSide:
    """ "Send everything, then hang up": the far end's replies fail, yet everything the
    transport still delivers reaches its streams, and then the reason."""

    @pytest.mark.parametrize(
        "transport",
        [memory_transport, sockets_with_room, generic_sockets_with_room, tls_with_room],
        ids=["memory", "tcp", "tcp-generic", "tls"],
    )
    async def test_what_the_peer_sent_before_hanging_up_is_delivered(
        self, transport: Callable[[], Any]
    ) -> None:
        payload = bytes(range(256)) * 2048  # 512 KiB
        async with hung_up_after_sending(transport, payload) as (server, stream):
            error = await reply_until_it_fails(stream)
            assert error.reason is mplex.EndReason.TRANSPORT_FAILED
            with trio.fail_after(10):
                assert await read_all(stream) == payload[1000:]
                async for _ in server:
                    pass
            assert server.end_reason is mplex.EndReason.TRANSPORT_FAILED
            assert "sending" in str(server.end_error)

    async def test_a_program_that_reads_slowly_after_a_failed_write_still_gets_everything(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0
        payload = bytes(range(256)) * 2048
        async with hung_up_after_sending(memory_transport, payload) as (server, stream):
            await reply_until_it_fails(stream)
            # Our own full buffers hold the reader up: that wait is not the input's silence.
            await trio.sleep(3 * server.config.close_timeout)
            assert await read_all(stream) == payload[1000:]
            async for _ in server:
                pass
            assert server.end_reason is mplex.EndReason.TRANSPORT_FAILED

    async def test_over_generic_tls_what_the_transport_still_delivers_arrives_then_the_reason(
        self,
    ) -> None:
        # trio's SSLStream breaks both directions on any failure, so less may arrive.
        payload = bytes(range(256)) * 2048
        async with hung_up_after_sending(generic_tls_with_room, payload) as (server, stream):
            await reply_until_it_fails(stream)
            received = bytearray()
            with trio.fail_after(10), pytest.raises(mplex.ConnectionLost):
                while data := await stream.receive_some():
                    received += data
            assert payload[1000:].startswith(bytes(received))
            assert server.end_reason is mplex.EndReason.TRANSPORT_FAILED

    async def test_a_transport_that_fails_writes_and_never_ends_input_is_ended_after_close_timeout(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0
        a, _b = trio.testing.memory_stream_pair()

        async def fail() -> None:
            raise trio.BrokenResourceError("cable cut")

        a.send_stream.send_all_hook = fail
        async with mplex.open_muxer(a, mplex.Config(close_timeout=3)) as muxer:
            stream = await muxer.open_stream()
            await stream.send_all(b"x")
            started = trio.current_time()
            with pytest.raises(mplex.ConnectionLost) as info:
                await stream.receive_some()
            assert str(info.value.__cause__) == "cable cut"
            assert 3 <= trio.current_time() - started < 4


class FailingStream(PlainStream):
    """A transport whose writes fail once ``failure`` is set."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.failure: Exception | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.failure is not None:
            await trio.lowlevel.checkpoint()
            raise self.failure
        await self.inner.send_all(data)


@contextlib.asynccontextmanager
async def failing(failure: Exception) -> AsyncIterator[tuple[FailingStream, mplex.Muxer, mplex.MplexStream]]:
    """A muxer over a transport whose writes fail with ``failure`` once its stream's
    NewStream has left: (the transport, the muxer, the stream)."""
    a, b = trio.testing.memory_stream_pair()
    transport = FailingStream(a)
    async with mplex.open_muxer(transport) as muxer:
        stream = await muxer.open_stream()
        assert len(await RawPeer(b).receive_frames(1)) == 1
        transport.failure = failure
        yield transport, muxer, stream


async def test_a_failed_write_ends_the_send_side_with_its_cause() -> None:
    async with failing(OSError("the wire is cut")) as (transport, muxer, stream):
        await stream.send_all(b"lost")  # queued, and written by the writer: it fails
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(mplex.ConnectionLost) as info:
            await stream.send_all(b"after")
        assert info.value.__cause__ is transport.failure
        with pytest.raises(mplex.ConnectionLost):
            await muxer.open_stream()


@pytest.mark.parametrize("failure", [OSError("the wire is cut"), ValueError("a buggy transport")])
async def test_a_failed_write_stays_the_end_reason_when_the_program_closes_afterwards(
    failure: Exception,
) -> None:
    """Leaving the block right after a write failed (before the input ended) still
    reports the broken transport, not a clean local close."""
    async with failing(failure) as (_, muxer, stream):
        await stream.send_all(b"lost")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(mplex.ConnectionLost):
            await stream.send_all(b"after")
        assert muxer.end_reason is None  # lingering on input: not ended yet
    assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
    assert isinstance(muxer.end_error, mplex.ConnectionLost)
    assert muxer.end_error.__cause__ is failure
    with pytest.raises(mplex.ConnectionLost):  # the stream says the same
        await stream.receive_some()


class TestALastFlushThatFails:
    """What the block queued last and the closing flush could not write is never lost
    unseen: the program's data lost raises once, from the block's end or ``aclose``;
    control frames alone (both ends closing at once) raise nothing.  Either way the end
    reason is the failed write, and closing is prompt."""

    async def test_leaving_the_block_raises_it(self) -> None:
        # Promptly: the flush stops waiting once the failed write dropped the queue
        # (not after Config.close_timeout, 5 s).
        with trio.fail_after(1), pytest.raises(mplex.ConnectionLost) as caught:
            async with failing(OSError("the wire is cut")) as (transport, muxer, stream):
                stream.send_nowait(b"the last words")  # queued; the writer has not run yet
        assert caught.value.__cause__ is transport.failure
        assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
        assert isinstance(muxer.end_error, mplex.ConnectionLost)
        assert muxer.end_error.__cause__ is transport.failure

    async def test_aclose_raises_it_once(self) -> None:
        a, b = trio.testing.memory_stream_pair()
        transport = FailingStream(a)
        muxer = mplex.Muxer(transport)
        async with trio.open_nursery() as nursery:
            await nursery.start(muxer.run)
            stream = await muxer.open_stream()
            assert len(await RawPeer(b).receive_frames(1)) == 1
            transport.failure = OSError("the wire is cut")
            stream.send_nowait(b"the last words")
            with pytest.raises(mplex.ConnectionLost):
                await muxer.aclose()
            await muxer.aclose()  # closed, and already told

    async def test_the_blocks_own_error_comes_first(self) -> None:
        with pytest.raises(KeyError):
            async with failing(OSError("the wire is cut")) as (transport, muxer, stream):
                stream.send_nowait(b"the last words")
                raise KeyError("the block's own")
        assert isinstance(muxer.end_error, mplex.ConnectionLost)
        assert muxer.end_error.__cause__ is transport.failure

    async def test_lost_control_frames_alone_raise_nothing(self) -> None:
        async with failing(OSError("the wire is cut")) as (transport, muxer, stream):
            stream.close()  # a Close frame, to a peer that hung up
        assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
        assert muxer.end_error is not None and muxer.end_error.__cause__ is transport.failure


async def _writes_fail_on(path: str) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """(the peer's end, the server's end) of a connection over ``path`` where every
    write of the server fails while what the peer sends still arrives."""
    if path == "memory":
        peer_end, server_end = trio.testing.memory_stream_pair()

        async def cut() -> None:
            raise trio.BrokenResourceError("cable cut")

        server_end.send_stream.send_all_hook = cut
        return peer_end, server_end
    peer_end, server_end = await tcp_streams()
    if path.startswith("TLS"):
        peer_end, server_end = await tls_over(peer_end, server_end)
        server_end.transport_stream.socket.shutdown(socket.SHUT_WR)  # type: ignore[attr-defined]
    else:
        server_end.socket.shutdown(socket.SHUT_WR)  # type: ignore[attr-defined]
    return peer_end, PlainStream(server_end) if path.endswith("generic") else server_end


@pytest.mark.parametrize("path", ["memory", "TCP", "TCP generic", "TLS", "TLS generic"])
async def test_a_served_connection_whose_writes_fail_ends_after_close_timeout_of_silent_input(
    path: str, mock_clock: trio.testing.MockClock
) -> None:
    """The connection ends with its transport still open (the peer is silent, and
    never hangs up): the reader stops all the same, so ``serve_connection`` returns,
    on the socket path, where it waits on the socket itself, as on the others."""
    mock_clock.autojump_threshold = 0
    peer_end, server_end = await _writes_fail_on(path)

    async def reply_then_wait(stream: mplex.MplexStream) -> None:
        await stream.send_all(b"reply")  # the write that fails
        await stream.receive_some()  # raises why the connection ended

    ask = frame(0, mplex.Flag.NEW_STREAM, b"0") + frame(0, mplex.Flag.MESSAGE_INITIATOR, b"ask")
    await RawPeer(peer_end).send(ask)
    started = trio.current_time()
    with trio.fail_after(30):
        config = mplex.Config(close_timeout=3)
        muxer = await mplex.serve_connection(reply_then_wait, server_end, config=config)
    assert muxer is not None and muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
    assert 3 <= trio.current_time() - started < 4
    await trio.aclose_forcefully(peer_end)
