"""Soak: many streams with random sizes, slow readers and half-closes over TCP, under
the "block" policy: every byte arrives (checked by hash), what the muxers hold stays
within their budgets, no stream object outlives its stream, and memory levels off.

3 seconds in `make test`; `MPLEX_FULL=1` runs the 30-second version.
"""

from __future__ import annotations

import gc
import hashlib
import os
import random

import trio

import mplex
from mplex._bench.channel import current_rss
from mplex._engine.wire import MAX_PREFIX_BYTES
from mplex._trio.transport import READ_SIZE
from tests.helpers import muxer_pair, read_all, tcp_transport

DURATION = 30.0 if os.environ.get("MPLEX_FULL") else 3.0
STREAMS = 200


async def test_soak_delivers_every_byte_with_flat_memory() -> None:
    rng = random.Random(2026)
    config = mplex.Config(max_stream_buffer=64 * 1024, max_connection_buffer=2 * 1024 * 1024)
    checked = 0
    rss: list[int] = []
    held: list[tuple[int, int]] = []  # (unread, queued) bytes of either muxer, sampled
    async with muxer_pair(tcp_transport, config=config) as (left, right):
        deadline = trio.current_time() + DURATION

        async def echo_slowly(stream: mplex.MplexStream, seed: int) -> None:
            pace = random.Random(seed)
            async with stream:
                while data := await stream.receive_some(pace.choice([512, 4096, 65536])):
                    if pace.random() < 0.2:
                        await trio.sleep(pace.random() * 0.01)  # a slow reader
                    await stream.send_all(data)

        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                async for stream in right:
                    nursery.start_soon(echo_slowly, stream, rng.random())

        async def worker(seed: int) -> None:
            nonlocal checked
            pace = random.Random(seed)
            while trio.current_time() < deadline:
                payload = pace.randbytes(pace.choice([0, 1, 100, 5000, pace.randrange(400_000)]))
                stream = await left.open_stream()
                async with trio.open_nursery() as nursery:

                    async def send(stream: mplex.MplexStream = stream, payload: bytes = payload) -> None:
                        for start in range(0, len(payload), 32_768):
                            await stream.send_all(payload[start : start + 32_768])
                        await stream.send_eof()  # half-close; the echo keeps coming back

                    nursery.start_soon(send)
                    echoed = await read_all(stream)
                assert hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest()
                await stream.aclose()
                checked += 1

        async def sample_memory() -> None:
            while trio.current_time() < deadline:
                rss.append(current_rss())
                held.extend((m.stats.unread_bytes, m.stats.queued_bytes) for m in (left, right))
                await trio.sleep(DURATION / 100)

        with trio.fail_after(DURATION + 120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                nursery.start_soon(sample_memory)
                async with trio.open_nursery() as workers:
                    for seed in range(STREAMS):
                        workers.start_soon(worker, seed)
                nursery.cancel_scope.cancel()
        assert left.stats.live_streams == right.stats.live_streams == 0
    print(f"\n{checked} streams checked; RSS MiB over time: {[r >> 20 for r in rss]}")  # pytest -s
    print(f"most unread, queued: {max(u for u, _ in held)}, {max(q for _, q in held)}")
    assert checked >= STREAMS
    # What the muxers hold stays within the configured budgets, however long it runs:
    # unread data within max_connection_buffer plus the one transport read that took it
    # over (the reader then stops); queued data within send_high_water plus the one frame
    # that crossed it (a send below the mark appends a whole frame: the echoes send up to
    # 64 KiB at once, a full max_send_frame_size) and a few bytes of control frames per
    # stream.
    assert max(unread for unread, _ in held) <= config.max_connection_buffer + READ_SIZE
    crossing_frame = config.max_send_frame_size + MAX_PREFIX_BYTES
    assert max(queued for _, queued in held) <= config.send_high_water + crossing_frame + 16 * STREAMS
    # Nothing is kept once the streams are done: no stream object survives them.
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, mplex.MplexStream)]
    # And the process's memory levels off: the test's own payloads (up to 200 of up to
    # 400 KB, each with its echo) set the level, which rises while larger payloads
    # happen to coincide, but by less than 16 MiB over the second half of the run.
    # (Only growth counts: RSS can start high, and shrink, after earlier tests in the process.)
    half = len(rss) // 2
    assert max(rss[half:]) - max(rss[:half]) < 16 * 1024 * 1024, [r // 1024 for r in rss]
