"""trio's generic stream checks, run on pairs of MplexStreams."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

import mplex
from tests.helpers import memory_streams, tcp_streams

Maker = Callable[[], Awaitable[tuple[mplex.MplexStream, mplex.MplexStream]]]

# Small buffers so that a "clogged" stream is reached quickly: the receiver's reader
# blocks (policy "block"), TCP fills up, and then our send buffer fills up.
CLOG_CONFIG = mplex.Config(
    send_high_water=64 * 1024, max_stream_buffer=64 * 1024, max_connection_buffer=64 * 1024
)


def stream_maker(nursery: trio.Nursery, transport: Any, config: mplex.Config | None = None) -> Maker:
    async def make() -> tuple[mplex.MplexStream, mplex.MplexStream]:
        # The muxers run in the test's nursery, which outlives every stream pair.
        a, b = await transport()
        left, right = mplex.Muxer(a, config), mplex.Muxer(b, config)
        await nursery.start(left.run)
        await nursery.start(right.run)
        stream = await left.open_stream()
        return stream, await right.accept_stream()

    return make


def clogged_maker(make: Maker) -> Maker:
    async def make_clogged() -> tuple[mplex.MplexStream, mplex.MplexStream]:
        s, r = await make()
        # Clog both directions (trio also runs the checks on the flipped pair): nobody
        # reads, so the receiving reader blocks, TCP fills, and our send buffer fills.
        # Top up with send_nowait until WouldBlock, let everything settle (the cushion
        # lets the writers, which wait for idleness with no cushion, do all they can),
        # and repeat until the buffer is still full afterwards.
        for stream in (s, r):
            while True:
                try:
                    stream.send_nowait(b"x" * 10_000)
                except trio.WouldBlock:
                    await trio.testing.wait_all_tasks_blocked(0.05)
                    try:
                        stream.send_nowait(b"")
                    except trio.WouldBlock:
                        break
        return s, r

    return make_clogged


async def test_memory_transport_passes_check_half_closeable_stream(nursery: trio.Nursery) -> None:
    await trio.testing.check_half_closeable_stream(stream_maker(nursery, memory_streams), None)


async def test_tcp_transport_passes_check_half_closeable_stream(nursery: trio.Nursery) -> None:
    make = stream_maker(nursery, tcp_streams)
    small = functools.partial(tcp_streams, buffer_size=16 * 1024)
    clogged = clogged_maker(stream_maker(nursery, small, CLOG_CONFIG))
    await trio.testing.check_half_closeable_stream(make, clogged)


async def test_streams_are_half_closeable_streams(nursery: trio.Nursery) -> None:
    s, r = await stream_maker(nursery, memory_streams)()
    assert isinstance(s, trio.abc.HalfCloseableStream)
    assert isinstance(r, trio.abc.HalfCloseableStream)
