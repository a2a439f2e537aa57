"""Shared test helpers: transports, muxer pairs, a raw-frame peer, readers."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import pathlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
import trio.testing
import trustme

import mplex
import mplex.testing
from mplex import Decoder, Encoder, Flag, Frame

SPEC = pathlib.Path(__file__).resolve().parent.parent / "spec"
ENCODER = Encoder()


def load_vectors() -> list[dict[str, Any]]:
    return json.loads((SPEC / "vectors.json").read_text())["cases"]  # type: ignore[no-any-return]


def frame(stream_id: int, flag: Flag, data: bytes = b"") -> bytes:
    return ENCODER.frame(stream_id, flag, data)


TransportPair = Callable[
    [], "contextlib.AbstractAsyncContextManager[tuple[trio.abc.Stream, trio.abc.Stream]]"
]


async def memory_streams() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    return trio.testing.memory_stream_pair()


async def tcp_streams(buffer_size: int | None = None) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """Both ends of a real loopback TCP connection (127.0.0.1 only).

    ``buffer_size`` fixes the kernel's socket buffers, which also turns off Linux's
    buffer autotuning: a connection that nobody reads then stays full instead of
    opening more window later.
    """
    listener = trio.socket.socket()
    client = trio.socket.socket()
    try:
        for sock in (listener, client):
            if buffer_size is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_size)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_size)
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with trio.fail_after(10):
            await client.connect(listener.getsockname())
            server, _ = await listener.accept()
    finally:
        listener.close()
    return trio.SocketStream(client), trio.SocketStream(server)


@contextlib.asynccontextmanager
async def memory_transport() -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    yield await memory_streams()


@contextlib.asynccontextmanager
async def _closing_pair(
    make: Callable[[], Awaitable[tuple[trio.abc.Stream, trio.abc.Stream]]],
) -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    """Both ends from ``make()``, closed on exit."""
    a, b = await make()
    try:
        yield a, b
    finally:
        await trio.aclose_forcefully(a)
        await trio.aclose_forcefully(b)


def tcp_transport() -> contextlib.AbstractAsyncContextManager[tuple[trio.abc.Stream, trio.abc.Stream]]:
    return _closing_pair(tcp_streams)


class PlainStream(trio.abc.Stream):
    """A pass-through wrapper: the muxer sees a generic ``trio.abc.Stream``, so over TCP
    it takes the generic path instead of the socket fast path."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def tcp_generic_transport() -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    async with tcp_transport() as (a, b):
        yield PlainStream(a), PlainStream(b)


@functools.cache
def tls_contexts(name: str = "127.0.0.1") -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(client, server) contexts with a throwaway test CA, the server's certificate
    issued for ``name`` (the address the tests dial, unless a test wants a mismatch)."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return client, server


async def tls_over(
    a: trio.abc.Stream, b: trio.abc.Stream
) -> tuple[trio.SSLStream[trio.abc.Stream], trio.SSLStream[trio.abc.Stream]]:
    """TLS over both ends of one connection (``a`` the client), handshaken together:
    a muxer does its handshake as it starts, and tests start both ends in one task,
    where the first would wait for ever for the second."""
    client_context, server_context = tls_contexts()
    client = trio.SSLStream(a, client_context, server_hostname="127.0.0.1")
    server = trio.SSLStream(b, server_context, server_side=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.do_handshake)
            nursery.start_soon(server.do_handshake)
    return client, server


async def tls_streams() -> tuple[trio.SSLStream[trio.abc.Stream], trio.SSLStream[trio.abc.Stream]]:
    """Both ends of a TLS connection over loopback TCP, handshaken (``tls_over``)."""
    return await tls_over(*await tcp_streams())


def tls_transport() -> contextlib.AbstractAsyncContextManager[tuple[trio.abc.Stream, trio.abc.Stream]]:
    return _closing_pair(tls_streams)


async def generic_tls_streams() -> tuple[trio.SSLStream[trio.abc.Stream], trio.SSLStream[trio.abc.Stream]]:
    """TLS over loopback TCP that the muxer reaches only through ``trio.SSLStream``'s
    own methods (its socket hidden in a ``PlainStream``): the generic path."""
    a, b = await tcp_streams()
    return await tls_over(PlainStream(a), PlainStream(b))


def tls_generic_transport() -> contextlib.AbstractAsyncContextManager[
    tuple[trio.abc.Stream, trio.abc.Stream]
]:
    return _closing_pair(generic_tls_streams)


#: Every transport the behaviour tests claim: name -> a context manager of both ends.
TRANSPORTS: dict[str, Callable[[], Any]] = {
    "memory": memory_transport,
    "tcp": tcp_transport,
    "tcp-generic": tcp_generic_transport,
    "tls": tls_transport,
    "tls-generic": tls_generic_transport,
}
#: ``@over_every_transport`` parametrizes a test's ``transport`` argument over TRANSPORTS.
over_every_transport = pytest.mark.parametrize("transport", list(TRANSPORTS.values()), ids=list(TRANSPORTS))


@contextlib.asynccontextmanager
async def muxer_pair(
    transport: Callable[[], Any] = memory_transport,
    config: mplex.Config | None = None,
    server_config: mplex.Config | None = None,
) -> AsyncIterator[tuple[mplex.Muxer, mplex.Muxer]]:
    """Two running muxers connected to each other (over memory with one config:
    ``mplex.testing.open_muxer_pair``, the helper users get)."""
    if transport is memory_transport and server_config is None:
        async with mplex.testing.open_muxer_pair(config) as pair:
            yield pair
        return
    async with (
        transport() as (a, b),
        mplex.open_muxer(a, config) as left,
        mplex.open_muxer(b, server_config or config) as right,
    ):
        yield left, right


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while data := await stream.receive_some():
        chunks.append(data)
    return b"".join(chunks)


async def reply_and_return(stream: mplex.MplexStream) -> None:
    """A request/response handler for ``serve_connection`` (which closes the stream):
    the request to its end, then ``re:`` and the request."""
    await stream.send_all(b"re:" + await read_all(stream))


async def ask(client: mplex.Muxer, requests: int) -> None:
    """``requests`` requests to ``reply_and_return``, one after another, a stream each."""
    for index in range(requests):
        stream = await client.open_stream()
        await stream.send_all(b"%d" % index)
        await stream.send_eof()
        assert await read_all(stream) == b"re:%d" % index
        await stream.aclose()


class RawPeer:
    """The far end of a muxer, speaking raw frames: for tests of exact wire behaviour."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = Decoder()
        self.frames: list[Frame] = []

    async def send(self, *frames: bytes) -> None:
        await self.stream.send_all(b"".join(frames))

    async def receive_frames(self, count: int) -> list[Frame]:
        """Wait until ``count`` more frames arrived; return them."""
        with trio.fail_after(10):
            while len(self.frames) < count:
                data = await self.stream.receive_some()
                if not data:
                    raise EOFError(f"peer closed after {self.frames}")
                self.frames += self.decoder.feed(data)
        got, self.frames = self.frames[:count], self.frames[count:]
        return got

    async def expect_eof(self) -> None:
        with trio.fail_after(10):
            while data := await self.stream.receive_some():
                self.frames += self.decoder.feed(data)


@contextlib.asynccontextmanager
async def raw_pair(
    config: mplex.Config | None = None,
) -> AsyncIterator[tuple[mplex.Muxer, RawPeer]]:
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a, config) as muxer:
        yield muxer, RawPeer(b)


class CountingStream(PlainStream):
    """Wraps a transport and counts its ``send_all`` calls: how well writes coalesce."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.writes: list[int] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(len(data))
        await self.inner.send_all(data)


async def settle() -> None:
    """Wait until everything, including the muxers' flushes, has happened.

    The muxer's writer flushes at the moment every task is blocked, using trio's
    idle detection with no cushion, so a bare ``wait_all_tasks_blocked()`` can wake
    in the same scheduler pass as the writer and observe the moment before the
    flush.  A small cushion lets the flush and its delivery finish first.
    """
    await trio.testing.wait_all_tasks_blocked(0.01)


class TaskSteps(trio.abc.Instrument):
    """Counts the scheduler steps of one of a muxer's tasks, found by its documented
    name: for the ``reader``, the task running ``Muxer.run``, which ``open_muxer``
    names ``mplex <name>``; ``mplex writer <name>`` for the ``writer``."""

    def __init__(self, muxer: mplex.Muxer, task: str) -> None:
        self.name = f"mplex writer {muxer.name}" if task == "writer" else f"mplex {muxer.name}"
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cycle collector off for the block (after one collection): what is freed
    then was freed by reference counting."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_MPLEX_DIR = str(pathlib.Path(mplex.__file__).parent)
#: Where a coroutine, a frame and a function keep their code.
_CODE_OF = ("cr_code", "f_code", "__code__")


def cyclic_garbage_of_ours() -> list[str]:
    """What of the library only the cycle collector would free now: objects of its
    classes, and coroutines, frames and functions of its code (trio's own cycles, and
    the tests', are not ours).  Use with the collector off (``no_cyclic_gc``)."""

    def ours(thing: object) -> str | None:
        kind = type(thing)
        if kind.__module__.split(".")[0] == "mplex":
            return kind.__qualname__
        code = next((getattr(thing, name) for name in _CODE_OF if hasattr(thing, name)), None)
        if code is not None and code.co_filename.startswith(_MPLEX_DIR):
            return f"{kind.__name__} {code.co_qualname}"
        if kind.__name__ == "method":
            return ours(thing.__self__)  # type: ignore[attr-defined]
        return None

    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sorted({name for thing in gc.garbage if (name := ours(thing)) is not None})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
