"""Nothing outlives its connection: once a connection has ended and the program drops
the muxer and its streams, reference counting alone frees them and the data they
held (the cyclic garbage collector is switched off for these tests)."""

from __future__ import annotations

import contextlib
import socket
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import (
    TRANSPORTS,
    PlainStream,
    RawPeer,
    cyclic_garbage_of_ours,
    frame,
    no_cyclic_gc,
    over_every_transport,
    read_all,
    settle,
)

ENDINGS = ["aclose", "cancelled run", "peer hang-up", "protocol error", "failed write"]


def fail_writes(transport: trio.abc.Stream) -> None:
    """From now on, writes to ``transport`` fail, and reads from it go on."""
    if isinstance(transport, trio.StapledStream):
        transport.send_stream.close()  # type: ignore[attr-defined]
    elif isinstance(transport, trio.SocketStream):
        transport.socket.shutdown(socket.SHUT_WR)
    else:
        fail_writes(getattr(transport, "transport_stream", None) or transport.inner)  # type: ignore[attr-defined]


async def ended_connection(transport: Callable[[], Any], ending: str, unread: int) -> list[weakref.ref[Any]]:
    """Run a muxer until it ends as ``ending``, with an inbound stream holding
    ``unread`` bytes nobody read and an outbound one; return weak references to the
    muxer and the streams (every strong one dies with this frame)."""
    async with transport() as (a, b):
        peer = RawPeer(b)
        async with trio.open_nursery() as nursery:
            # Room for what the test leaves unread on one stream.
            muxer = mplex.Muxer(a, mplex.Config(max_stream_buffer=8 * 1024 * 1024))
            await nursery.start(muxer.run)
            outbound = await muxer.open_stream()
            await outbound.send_all(b"request")
            await peer.send(frame(0, Flag.NEW_STREAM))
            data = b"u" * 65536
            for _ in range(unread // len(data)):
                await peer.send(frame(0, Flag.MESSAGE_INITIATOR, data))
            inbound = await muxer.accept_stream()
            while inbound.unread_bytes < unread:
                await trio.testing.wait_all_tasks_blocked()
            if ending == "aclose":
                await muxer.aclose()
            elif ending == "cancelled run":
                nursery.cancel_scope.cancel()
            elif ending == "failed write":
                fail_writes(a)
                await outbound.send_all(b"lost")  # fails in the writer, or in this task
                await trio.testing.wait_all_tasks_blocked()
                await b.aclose()
            elif ending == "peer hang-up":
                await b.aclose()
            else:
                await peer.send(b"\x07\x00")  # flag 7: no such frame
        assert muxer.closed and inbound.unread_bytes == unread  # still readable
        if ending == "failed write":
            assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
        # The error it ended with too: whatever of the connection outlived it holds it.
        return [weakref.ref(muxer), weakref.ref(outbound), weakref.ref(inbound), weakref.ref(muxer.end_error)]


@over_every_transport
@pytest.mark.parametrize("ending", ENDINGS)
async def test_an_ended_connection_is_freed_by_reference_counting(
    transport: Callable[[], Any], ending: str
) -> None:
    with no_cyclic_gc():
        refs = await ended_connection(transport, ending, unread=4 * 65536)
        # trio's run loop keeps what resumed the last task step until the next step:
        # after a cancellation that is the Cancelled, whose traceback's frames (on
        # CPython 3.12 and later with their callers) reach ended_connection's.  One
        # checkpoint lets it go; nothing of the connection may outlive that.
        await trio.lowlevel.checkpoint()
        assert [ref() for ref in refs] == [None, None, None, None]
        assert cyclic_garbage_of_ours() == []


#: Where ``serve_connection`` runs its handlers: a nursery of its own, or one it is lent.
over_both_nurseries = pytest.mark.parametrize("lend", [False, True], ids=["own nursery", "lent nursery"])


@over_both_nurseries
@over_every_transport
async def test_a_served_connection_and_its_streams_are_freed_by_reference_counting(
    transport: Callable[[], Any], lend: bool
) -> None:
    """A stream both sides have closed is freed while its connection goes on, and the
    connection once it has ended: serve_connection's handler tasks, busy or waiting
    for the next stream, hold on to neither (in a lent nursery either)."""
    streams: list[weakref.ref[Any]] = []
    muxers: list[weakref.ref[Any]] = []

    async def echo(stream: mplex.MplexStream) -> None:
        streams.append(weakref.ref(stream))
        await stream.send_all(await read_all(stream))

    async def serve(server_end: trio.abc.Stream, nursery: trio.Nursery) -> None:
        lent = nursery if lend else None
        muxers.append(weakref.ref(await mplex.serve_connection(echo, server_end, handler_nursery=lent)))

    async def request(client: mplex.Muxer) -> None:
        async with await client.open_stream() as stream:
            await stream.send_all(b"request")
            await stream.send_eof()
            assert await read_all(stream) == b"request"

    with no_cyclic_gc(), trio.fail_after(30):
        async with transport() as (a, b), trio.open_nursery() as nursery:
            nursery.start_soon(serve, a, nursery)
            async with mplex.open_muxer(b) as client:
                for _ in range(10):
                    await request(client)
                async with trio.open_nursery() as requests:
                    for _ in range(10):
                        requests.start_soon(request, client)
                await settle()
                assert len(streams) == 20
                assert [ref() for ref in streams] == [None] * 20
        await trio.lowlevel.checkpoint()  # as above
        assert len(muxers) == 1
        assert muxers[0]() is None
        assert cyclic_garbage_of_ours() == []


@pytest.mark.parametrize("ending", ENDINGS)
async def test_memory_returns_to_its_baseline_after_connections_end(ending: str) -> None:
    with no_cyclic_gc():
        tracemalloc.start()
        try:
            await ended_connection(TRANSPORTS_MEMORY, ending, unread=65536)  # warm up
            baseline = tracemalloc.get_traced_memory()[0]
            for _ in range(13):
                await ended_connection(TRANSPORTS_MEMORY, ending, unread=4 * 1024 * 1024)
            held = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
    assert held < 1024 * 1024, f"{held / 2**20:.1f} MiB still held after 13 connections of 4 MiB"


def TRANSPORTS_MEMORY() -> contextlib.AbstractAsyncContextManager[tuple[trio.abc.Stream, trio.abc.Stream]]:
    @contextlib.asynccontextmanager
    async def pair() -> Any:
        yield trio.testing.memory_stream_pair()

    return pair()


class CloseFails(PlainStream):
    """A transport whose ``aclose`` fails as trio's own streams translate errors: the
    exception raised from a context manager's frame, which holds it (a cycle)."""

    async def aclose(self) -> None:
        self.inner.send_stream.close()  # type: ignore[attr-defined]
        self.inner.receive_stream.close()  # type: ignore[attr-defined]
        with _translated():
            raise OSError("the close failed")


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise trio.BrokenResourceError("closing failed") from exc


async def test_a_connection_whose_transport_fails_to_close_is_freed_by_reference_counting() -> None:
    with no_cyclic_gc():

        async def ended() -> list[weakref.ref[Any]]:
            a, b = trio.testing.memory_stream_pair()
            async with mplex.open_muxer(CloseFails(a)) as muxer:
                stream = await muxer.open_stream()
            await b.aclose()
            assert isinstance(muxer.end_error, mplex.MuxerClosed)
            assert isinstance(muxer.end_error.__context__, trio.BrokenResourceError)  # the close's
            return [weakref.ref(muxer), weakref.ref(stream), weakref.ref(muxer.end_error)]

        refs = await ended()
        await trio.lowlevel.checkpoint()  # as above
        assert [ref() for ref in refs] == [None, None, None]


@over_both_nurseries
@pytest.mark.parametrize("name", ["tcp", "tcp-generic"])
async def test_a_served_connection_cancelled_while_it_runs_is_freed_by_reference_counting(
    name: str, lend: bool
) -> None:
    """A server that shuts down cancels serve_connection mid-connection: its muxer,
    handler tasks and streams are freed all the same, and with them the transport the
    muxer held.  Over TCP only: trio's memory streams hold each other in cycles, and a
    ``trio.SSLStream`` holds itself in one (its handshake's ``_Once`` holds a bound
    method of the stream), so neither is ever freed by reference counting alone."""
    streams: list[weakref.ref[Any]] = []

    async def hold(stream: mplex.MplexStream) -> None:
        streams.append(weakref.ref(stream))
        await stream.receive_some()  # (the peer never sends again)

    with no_cyclic_gc(), trio.fail_after(30):
        async with TRANSPORTS[name]() as (a, b):
            server_end = weakref.ref(a)
            async with trio.open_nursery() as server:
                lent = server if lend else None
                server.start_soon(partial(mplex.serve_connection, hold, a, handler_nursery=lent))
                del a
                async with mplex.open_muxer(b) as client:
                    for _ in range(3):
                        await (await client.open_stream()).send_all(b"x")
                    while len(streams) < 3:
                        await trio.testing.wait_all_tasks_blocked()
                    server.cancel_scope.cancel()
        await trio.lowlevel.checkpoint()  # as above
        assert [ref() for ref in streams] == [None] * 3
        assert server_end() is None
