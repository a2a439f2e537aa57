"""A frame trace shows the program that runs: turning DEBUG logging on changes what is
logged, never what is sent or how."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
import trio

import mplex
from mplex import Decoder

from .helpers import over_every_transport, tcp_transport

#: A traced frame's log line: direction, stream, opener or acceptor, flag, body size.
_TRACED = re.compile(r"\] send stream (\d+) \((opener|acceptor)\) (\w+) (\d+) bytes$")
_LARGE = 3 * 1024 * 1024 + 7  # several frames, and over TCP a write from the caller's buffer


async def _send_and_capture(
    transport: Callable[[], Any], caplog: pytest.LogCaptureFixture, level: int
) -> tuple[bytes, list[tuple[int, str, int]], mplex.MuxerStats]:
    """One muxer sends the same frames (small ones, a large send, a close) to a far end
    that reads raw bytes; what the far end got, the frames traced, and the stats."""
    caplog.set_level(level, logger="mplex")
    caplog.clear()
    received = bytearray()
    async with transport() as (near, far):

        async def drain() -> None:
            try:
                while data := await far.receive_some():
                    received.extend(data)
            except trio.BrokenResourceError:
                pass  # TLS: the muxer closed the transport without close_notify

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            async with mplex.open_muxer(near) as muxer:
                stream = await muxer.open_stream("traced")
                for number in range(100):
                    stream.send_nowait(bytes([number]) * 32)
                await stream.send_all(b"L" * _LARGE)
                await stream.send_all(b"tail")
                await stream.send_eof()
            stats = muxer.stats
    traced = [
        (int(match[1]), match[3], int(match[4]))
        for record in caplog.records
        if record.name == "mplex" and (match := _TRACED.search(record.getMessage()))
    ]
    return bytes(received), traced, stats


@over_every_transport
async def test_a_trace_with_debug_on_matches_the_bytes_sent_with_it_off(
    transport: Callable[[], Any], caplog: pytest.LogCaptureFixture
) -> None:
    quiet, untraced, _ = await _send_and_capture(transport, caplog, logging.INFO)
    loud, traced, _ = await _send_and_capture(transport, caplog, logging.DEBUG)
    assert untraced == []
    assert loud == quiet  # the same bytes leave, DEBUG or not
    sent = [(f.stream_id, f.flag.name, len(f.data)) for f in Decoder(mplex.MAX_MESSAGE_SIZE).feed(loud)]
    assert traced == sent  # and the trace names each of them, once, whole
    assert sum(size for _, flag, size in sent if flag == "MESSAGE_INITIATOR") == 100 * 32 + _LARGE + 4


async def test_debug_logging_keeps_large_sends_straight_to_the_socket(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over the socket fast path a large send goes to the kernel from the caller's
    buffer whether or not frames are traced."""
    for level in (logging.INFO, logging.DEBUG):
        _, _, stats = await _send_and_capture(tcp_transport, caplog, level)
        assert stats.bytes_sent_without_copy > 0, logging.getLevelName(level)
