"""Muxer lifecycle: start, close, cancellation, and a transport that fails."""

from __future__ import annotations

import contextlib
import contextvars
import ssl
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import (
    RawPeer,
    frame,
    muxer_pair,
    over_every_transport,
    raw_pair,
    read_all,
    settle,
    tcp_streams,
    tls_contexts,
)

#: Set differently by the task that runs a connection and by one that sends on it.
WHOSE = contextvars.ContextVar("WHOSE", default="unset")


class TestStartAndClose:
    async def test_the_writer_task_runs_in_the_context_of_the_task_that_runs_the_connection(
        self, nursery: trio.Nursery
    ) -> None:
        """What the writer task does (its writes here, its log records in a program)
        sees the context variables of the task that runs the connection, not those
        of whichever task's frames made it start."""
        a, b = trio.testing.memory_stream_pair()
        seen: list[str] = []

        pump = a.send_stream.send_all_hook  # what moves the bytes to ``b``
        assert pump is not None

        async def note_whose() -> None:  # runs in the task that writes to the transport
            seen.append(WHOSE.get())
            await pump()

        a.send_stream.send_all_hook = note_whose
        left, right = mplex.Muxer(a), mplex.Muxer(b)

        async def run_left(task_status: trio.TaskStatus[None]) -> None:
            WHOSE.set("the connection's")
            await left.run(task_status=task_status)

        await nursery.start(run_left)
        await nursery.start(right.run)
        WHOSE.set("the sender's")
        stream = await left.open_stream()
        await stream.send_all(b"hi")
        assert await (await right.accept_stream()).receive_some() == b"hi"
        assert seen
        assert set(seen) == {"the connection's"}
        await left.aclose()
        await right.aclose()

    async def test_run_in_the_callers_nursery(self, nursery: trio.Nursery) -> None:
        a, b = trio.testing.memory_stream_pair()
        left, right = mplex.Muxer(a), mplex.Muxer(b)
        await nursery.start(left.run)
        await nursery.start(right.run)
        stream = await left.open_stream()
        await stream.send_all(b"hi")
        assert await (await right.accept_stream()).receive_some() == b"hi"
        await left.aclose()
        await right.aclose()

    async def test_run_twice_is_an_error(self, nursery: trio.Nursery) -> None:
        muxer = mplex.Muxer(trio.testing.memory_stream_pair()[0])
        await nursery.start(muxer.run)
        with pytest.raises(RuntimeError):
            await muxer.run()
        await muxer.aclose()

    async def test_aclose_flushes_what_was_queued(self) -> None:
        a, b = trio.testing.memory_stream_pair()
        async with mplex.open_muxer(a) as muxer:
            stream = await muxer.open_stream()
            for _ in range(1000):
                stream.send_nowait(b"0123456789")
            await muxer.aclose()
        frames = mplex.Decoder().feed(await read_all(b))
        assert sum(len(f.data) for f in frames if f.flag == Flag.MESSAGE_INITIATOR) == 10_000

    async def test_after_aclose_everything_says_closed_or_lost(self) -> None:
        async with muxer_pair() as (left, _right):
            stream = await left.open_stream()
            await left.aclose()
            await left.aclose()  # idempotent
            with pytest.raises(trio.ClosedResourceError):
                await left.open_stream()
            with pytest.raises(trio.ClosedResourceError):
                await left.accept_stream()
            # A local close is not a broken resource: trio's ClosedResourceError.
            with pytest.raises(mplex.MuxerClosed) as send_error:
                await stream.send_all(b"x")
            with pytest.raises(mplex.MuxerClosed):
                await stream.receive_some()
            assert isinstance(send_error.value, trio.ClosedResourceError)
            assert send_error.value.reason is mplex.EndReason.CLOSED
            assert left.end_reason is mplex.EndReason.CLOSED
            assert [s async for s in left] == []

    async def test_a_cancelled_aclose_still_closes(self) -> None:
        a, b = trio.testing.memory_stream_pair()
        async with mplex.open_muxer(a) as muxer:
            stream = await muxer.open_stream()
            with trio.CancelScope() as scope:
                scope.cancel()
                await stream.aclose()
            with pytest.raises(trio.ClosedResourceError):
                await stream.send_all(b"x")
            with trio.CancelScope() as scope:
                scope.cancel()
                await muxer.aclose()
            assert muxer.closed
        assert await read_all(b) is not None  # the transport was closed: EOF, no hang

    async def test_cancelling_run_ends_every_stream(self) -> None:
        a, b = trio.testing.memory_stream_pair()
        muxer = mplex.Muxer(a)
        async with trio.open_nursery() as nursery:
            await nursery.start(muxer.run)
            stream = await muxer.open_stream()
            nursery.cancel_scope.cancel()
        assert muxer.closed
        with pytest.raises(mplex.MuxerClosed, match="cancelled"):
            await stream.receive_some()
        assert muxer.end_reason is mplex.EndReason.CLOSED
        await read_all(b)  # the transport was closed


class TestTransportEnds:
    async def test_peer_eof_wakes_every_waiting_task_with_an_error(self) -> None:
        async with raw_pair(mplex.Config(max_outbound_streams=1)) as (muxer, peer):
            await peer.send(frame(0, Flag.NEW_STREAM), frame(0, Flag.MESSAGE_INITIATOR, b"buffered"))
            inbound = await muxer.accept_stream()
            outbound = await muxer.open_stream()
            errors: list[str] = []

            async def expect_lost(name: str, fn: object) -> None:
                try:
                    await fn()  # type: ignore[operator]
                except trio.BrokenResourceError as exc:
                    errors.append(f"{name}: {type(exc).__name__}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(expect_lost, "receive", outbound.receive_some)
                nursery.start_soon(expect_lost, "accept", muxer.accept_stream)
                nursery.start_soon(expect_lost, "open", muxer.open_stream)
                await settle()
                await peer.stream.aclose()
            assert sorted(errors) == [
                "accept: ConnectionLost",
                "open: ConnectionLost",
                "receive: ConnectionLost",
            ]
            assert await inbound.receive_some() == b"buffered"  # data first, then the error
            with pytest.raises(mplex.ConnectionLost, match="peer closed"):
                await inbound.receive_some()
            assert [s async for s in muxer] == []  # a peer's EOF is a clean end

    @over_every_transport
    async def test_the_transport_ending_mid_frame_keeps_earlier_data_and_is_a_failure(
        self, transport: Callable[[], Any]
    ) -> None:
        async with transport() as (a, b), mplex.open_muxer(a) as muxer:
            peer = RawPeer(b)
            whole = frame(0, Flag.NEW_STREAM) + frame(0, Flag.MESSAGE_INITIATOR, b"complete")
            await peer.send(whole + frame(0, Flag.MESSAGE_INITIATOR, b"cut short")[:5])
            stream = await muxer.accept_stream()
            await peer.stream.aclose()
            assert await stream.receive_some() == b"complete"
            with pytest.raises(mplex.ConnectionLost, match="middle of a frame") as info:
                await stream.receive_some()
            assert info.value.reason is mplex.EndReason.TRANSPORT_FAILED
            assert isinstance(info.value.__cause__, EOFError)
            assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED

    async def test_a_sender_blocked_on_a_full_buffer_wakes_when_the_transport_breaks(self) -> None:
        a, b = trio.testing.lockstep_stream_pair()  # send_all blocks until the peer reads
        config = mplex.Config(send_high_water=1000, max_send_frame_size=100)
        async with mplex.open_muxer(a, config) as muxer:
            stream = await muxer.open_stream()
            errors: list[BaseException] = []

            async def send() -> None:
                try:
                    await stream.send_all(b"x" * 100_000)
                except mplex.ConnectionLost as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await settle()
                await b.aclose()
            assert len(errors) == 1
            # Whichever loop noticed first: the reader (EOF) or the writer (broken pipe).
            assert "peer closed the connection" in str(errors[0]) or isinstance(
                errors[0].__cause__, trio.BrokenResourceError
            )


class FaultyTransport(trio.abc.Stream):
    """A custom transport that raises what no trio stream would (a bug below us)."""

    def __init__(
        self,
        *,
        on_receive: BaseException | None = None,
        on_send: BaseException | None = None,
        on_close: BaseException | None = None,
    ):
        self.on_receive, self.on_send, self.on_close = on_receive, on_send, on_close

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if self.on_send is not None:
            raise self.on_send

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        if self.on_receive is not None:
            raise self.on_receive
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        if self.on_close is not None:  # before any checkpoint: even a forceful close sees it
            raise self.on_close
        await trio.lowlevel.checkpoint()


class TestAnyTransportFailureIsALostConnection:
    """Whatever a custom transport raises ends the connection; it never reaches the
    caller's nursery."""

    async def test_an_exception_from_receive_ends_the_connection(self) -> None:
        bug = KeyError("a bug in the layer below")
        muxer = mplex.Muxer(FaultyTransport(on_receive=bug))
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(muxer.run)
        assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
        assert muxer.end_error is not None and muxer.end_error.__cause__ is bug

    @pytest.mark.parametrize("ending", ["peer hang-up", "aclose", "cancelled run"])
    async def test_an_exception_from_the_transports_aclose_is_kept_not_raised(self, ending: str) -> None:
        hang_up = trio.BrokenResourceError("the peer hung up")
        failure = OSError("closing failed too")
        receive_error = hang_up if ending == "peer hang-up" else None
        transport = FaultyTransport(on_receive=receive_error, on_close=failure)
        muxer = mplex.Muxer(transport)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                await nursery.start(muxer.run)
                if ending == "aclose":
                    await muxer.aclose()  # does not raise either
                elif ending == "cancelled run":
                    nursery.cancel_scope.cancel()
        assert muxer.closed
        assert muxer.end_error is not None and muxer.end_error.__context__ is failure

    async def test_an_exception_from_send_ends_the_send_side_with_its_cause(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        bug = ValueError("a bug in the layer below")
        muxer = mplex.Muxer(FaultyTransport(on_send=bug))
        async with trio.open_nursery() as nursery:
            await nursery.start(muxer.run)
            stream = await muxer.open_stream()
            with pytest.raises(mplex.ConnectionLost) as info:
                while True:
                    await stream.send_all(b"x")
            assert info.value.__cause__ is bug
        assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED


class TestCancellation:
    async def test_a_cancelled_send_all_leaves_only_whole_frames(self) -> None:
        a, b = trio.testing.lockstep_stream_pair()
        config = mplex.Config(send_high_water=1000, max_send_frame_size=100)
        data = bytes(range(100)) * 1000
        async with mplex.open_muxer(a, config) as muxer:
            stream = await muxer.open_stream()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def cancel_when_blocked() -> None:
                        await settle()
                        scope.cancel()

                    nursery.start_soon(cancel_when_blocked)
                    await stream.send_all(data)
            received: list[bytes] = []

            async def read_peer() -> None:
                received.append(await read_all(b))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_peer)  # lockstep: the writer needs a reader
                await stream.send_all(b"after")  # the stream is still usable
                await stream.send_eof()
                await muxer.aclose()
            wire = received[0]
        decoder = mplex.Decoder()
        frames = decoder.feed(wire)
        assert decoder.buffered == 0  # no partial frame
        sent = b"".join(f.data for f in frames if f.flag == Flag.MESSAGE_INITIATOR)
        assert sent.endswith(b"after")
        prefix = sent[: -len(b"after")]
        assert 0 < len(prefix) < len(data)
        assert prefix == data[: len(prefix)]
        assert len(prefix) % 100 == 0
        assert frames[-1].flag == Flag.CLOSE_INITIATOR

    async def test_a_cancelled_receive_loses_nothing(self) -> None:
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"")
            peer = await right.accept_stream()
            with trio.move_on_after(0.01):
                await peer.receive_some()
            await stream.send_all(b"still here")
            assert await peer.receive_some() == b"still here"


class TestLogging:
    async def test_frames_are_traced_at_debug_on_the_mplex_logger(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level("DEBUG", logger="mplex")
        async with muxer_pair() as (left, right):
            stream = await left.open_stream("traced")
            await stream.send_all(b"hi")
            assert await (await right.accept_stream()).receive_some() == b"hi"
        messages = [r.getMessage() for r in caplog.records if r.name == "mplex"]
        # Each line names its connection, and the logger's name is not repeated in it.
        assert f"[{left.name}] send stream 0 (opener) NEW_STREAM 6 bytes" in messages
        assert f"[{right.name}] recv stream 0 (opener) MESSAGE_INITIATOR 2 bytes" in messages
        assert left.name != right.name
        assert not [m for m in messages if "mplex:" in m]

    async def test_nothing_is_logged_below_debug(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level("INFO", logger="mplex")
        async with muxer_pair() as (left, right):
            stream = await left.open_stream()
            await stream.send_all(b"quiet")
            assert await (await right.accept_stream()).receive_some() == b"quiet"
        assert [r for r in caplog.records if r.name == "mplex"] == []

    async def test_a_tls_failure_is_logged_by_its_cause(self, caplog: pytest.LogCaptureFixture) -> None:
        # A client that does not trust the server's certificate authority.
        caplog.set_level("INFO", logger="mplex")
        a, b = await tcp_streams()
        _, server_context = tls_contexts()
        untrusting = trio.SSLStream(a, ssl.create_default_context(), server_hostname="127.0.0.1")
        server = trio.SSLStream(b, server_context, server_side=True)

        async def serve() -> None:
            with contextlib.suppress(trio.BrokenResourceError):
                await server.do_handshake()  # the client refuses it
            await trio.aclose_forcefully(server)

        muxer = mplex.Muxer(untrusting)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            with trio.fail_after(10), pytest.raises(mplex.ConnectionLost):
                async with muxer:
                    pass
        assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
        [line] = [r.getMessage() for r in caplog.records if "connection ended" in r.getMessage()]
        assert "the TLS handshake failed: TLS: certificate verify failed (" in line
        assert "BrokenResourceError" not in line
