"""Shared test helpers: transports, muxer pairs, a raw-frame peer, readers."""

from __future__ import annotations

import contextlib
import json
import pathlib
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


TransportPair = Callable[[], "contextlib.AbstractAsyncContextManager[tuple[trio.abc.Stream, trio.abc.Stream]]"]


@contextlib.asynccontextmanager
async def memory_transport() -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    a, b = trio.testing.memory_stream_pair()
    yield a, b


@contextlib.asynccontextmanager
async def tcp_transport() -> AsyncIterator[tuple[trio.abc.Stream, trio.abc.Stream]]:
    """A real loopback TCP connection (127.0.0.1 only)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    try:
        port = listeners[0].socket.getsockname()[1]
        with trio.fail_after(10):
            client = await trio.open_tcp_stream("127.0.0.1", port)
            server = await listeners[0].accept()
        yield client, server
    finally:
        for listener in listeners:
            await listener.aclose()


@contextlib.asynccontextmanager
async def muxer_pair(
    transport: Callable[[], Any] = memory_transport,
    config: mplex.Config | None = None,
    server_config: mplex.Config | None = None,
) -> AsyncIterator[tuple[mplex.Muxer, mplex.Muxer]]:
    """Two running muxers connected to each other."""
    async with transport() as (a, b):
        async with mplex.open_muxer(a, config) as left, mplex.open_muxer(
            b, server_config or config
        ) as right:
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
async def raw_pair(config: mplex.Config | None = None) -> AsyncIterator[tuple[mplex.Muxer, RawPeer]]:
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a, config) as muxer:
        yield muxer, RawPeer(b)
