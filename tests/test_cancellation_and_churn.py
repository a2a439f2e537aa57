"""Cancellation at random await points, and stream churn leaving nothing behind."""

from __future__ import annotations

import os
import random

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import muxer_pair, read_all


async def cancel_after_checkpoints(scope: trio.CancelScope, steps: int) -> None:
    for _ in range(steps):
        await trio.lowlevel.checkpoint()
    scope.cancel()


@pytest.mark.parametrize("seed", range(8))
async def test_cancelled_sends_leave_whole_frames_and_keep_order(seed: int) -> None:
    rng = random.Random(seed)
    a, b = trio.testing.memory_stream_pair()
    config = mplex.Config(max_send_frame_size=100, send_high_water=300)
    calls: list[tuple[int, bool]] = []  # (length, cancelled)
    async with mplex.open_muxer(a, config) as muxer:
        stream = await muxer.open_stream()
        for index in range(30):
            data = bytes([index]) * rng.randrange(1, 1000)
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_after_checkpoints, scope, rng.randrange(0, 12))
                    await stream.send_all(data)
                    nursery.cancel_scope.cancel()  # finished first: stop the canceller
            calls.append((len(data), scope.cancelled_caught))
        await stream.send_eof()
        async with trio.open_nursery() as nursery:
            received: list[bytes] = []

            async def read_wire() -> None:
                received.append(await read_all(b))

            nursery.start_soon(read_wire)
            await muxer.aclose()
    decoder = mplex.Decoder()
    frames = decoder.feed(received[0])
    assert decoder.buffered == 0  # no half frame on the wire
    sent = b"".join(f.data for f in frames if f.flag == Flag.MESSAGE_INITIATOR)
    assert frames[-1].flag == Flag.CLOSE_INITIATOR
    position = 0
    for index, (length, cancelled) in enumerate(calls):
        run = 0
        while position + run < len(sent) and sent[position + run] == index:
            run += 1
        if cancelled:
            assert run <= length and (run % 100 == 0 or run == length)  # whole frames only
        else:
            assert run == length
        position += run
    assert position == len(sent)  # nothing else, nothing out of order


@pytest.mark.parametrize("seed", range(8))
async def test_cancelled_receives_lose_nothing(seed: int) -> None:
    rng = random.Random(seed)
    payload = rng.randbytes(200_000)
    async with muxer_pair() as (left, right):
        stream = await left.open_stream()

        async def send() -> None:
            for start in range(0, len(payload), 3000):
                await stream.send_all(payload[start : start + 3000])
            await stream.send_eof()

        got = bytearray()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            peer = await right.accept_stream()
            while True:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as cancellers:
                        cancellers.start_soon(cancel_after_checkpoints, scope, rng.randrange(0, 4))
                        data = await peer.receive_some(rng.randrange(1, 20_000))
                        cancellers.cancel_scope.cancel()
                if scope.cancelled_caught:
                    continue
                if not data:
                    break
                got += data
        assert bytes(got) == payload


async def test_stream_churn_leaves_the_tables_empty() -> None:
    count = 100_000 if os.environ.get("MPLEX_FULL") else 10_000
    async with muxer_pair() as (left, right):

        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(count):
                    nursery.start_soon(echo, await right.accept_stream())

        async def echo(stream: mplex.MplexStream) -> None:
            async with stream:
                await stream.send_all(await read_all(stream))

        async def client() -> None:
            for index in range(count):
                async with await left.open_stream() as stream:
                    await stream.send_all(b"%d" % index)
                    await stream.send_eof()
                    assert await read_all(stream) == b"%d" % index

        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                nursery.start_soon(client)
        for muxer in (left, right):
            stats = muxer.stats
            assert (stats.inbound_streams, stats.outbound_streams) == (0, 0)
            assert (stats.streams_waiting, stats.unread_bytes) == (0, 0)
        assert left.stats.streams_opened == right.stats.streams_accepted == count
