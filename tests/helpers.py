"""Shared test helpers: transports, muxer pairs, a raw-frame peer, readers."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio
import trio.testing

import mplex
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
async def tcp_transport() -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    a, b = await tcp_streams()
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


@contextlib.asynccontextmanager
async def muxer_pair(
    transport: Callable[[], Any] = memory_transport,
    config: mplex.Config | None = None,
    server_config: mplex.Config | None = None,
) -> AsyncIterator[tuple[mplex.Muxer, mplex.Muxer]]:
    """Two running muxers connected to each other."""
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


class CountingStream(trio.abc.Stream):
    """Wraps a transport and counts its ``send_all`` calls: how well writes coalesce."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.writes: list[int] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(len(data))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def settle() -> None:
    """Wait until everything, including the muxers' flushes, has happened.

    The muxer's writer flushes at the moment every task is blocked, using trio's
    idle detection with no cushion, so a bare ``wait_all_tasks_blocked()`` can wake
    in the same scheduler pass as the writer and observe the moment before the
    flush.  A small cushion lets the flush and its delivery finish first.
    """
    await trio.testing.wait_all_tasks_blocked(0.01)
