"""A large frame's body reaches its stream as it arrives, not once the frame is complete.

The far end is a raw peer writing frames itself, so a frame can be left half-sent.
Over every transport: memory, TCP (socket fast path and generic path) and TLS.  Over
TLS a read brings one 16 KiB record, and records are collected until the frame is
complete (one wake-up a frame), so the first test runs where reads are large.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import trio

import mplex
from mplex import Flag, encode_uvarint
from tests.helpers import TRANSPORTS, RawPeer, frame, over_every_transport

MIB = 1 << 20


def message_prefix(stream_id: int, length: int) -> bytes:
    """The header and length of a Message frame from the stream's opener."""
    return encode_uvarint(stream_id << 3 | Flag.MESSAGE_INITIATOR) + encode_uvarint(length)


async def receive_at_least(stream: mplex.MplexStream, size: int) -> bytes:
    got = bytearray()
    with trio.fail_after(10):
        while len(got) < size:
            data = await stream.receive_some()
            assert data, "the stream ended early"
            got += data
    return bytes(got)


#: The transports whose reads bring 64 KiB or more at a time.
LARGE_READS = {name: TRANSPORTS[name] for name in ("memory", "tcp", "tcp-generic")}


@pytest.mark.parametrize("transport", list(LARGE_READS.values()), ids=list(LARGE_READS))
async def test_the_first_half_of_a_frame_is_readable_before_the_second_is_sent(
    transport: Callable[[], Any],
) -> None:
    body = os.urandom(MIB)
    async with transport() as (a, b), mplex.open_muxer(a) as muxer:
        peer = RawPeer(b)
        await peer.send(frame(0, Flag.NEW_STREAM), message_prefix(0, MIB), body[: MIB // 2])
        stream = await muxer.accept_stream()
        first = await receive_at_least(stream, MIB // 4)  # it would hang for the rest
        await peer.send(body[MIB // 2 :])
        rest = await receive_at_least(stream, MIB - len(first))
        assert first + rest == body
        assert muxer.stats.frames_received == 2  # NewStream and the one Message
        assert muxer.stats.frames_dropped == 0


@over_every_transport
class TestALargeFrameKeepsTheRules:
    async def test_a_large_frame_that_nobody_can_receive_is_dropped_once(
        self, transport: Callable[[], Any]
    ) -> None:
        """Data after the peer's Close changes nothing: the frame is counted (and spent
        from the budget of ignored frames) once, however many reads it took."""
        body = os.urandom(MIB)
        async with transport() as (a, b), mplex.open_muxer(a) as muxer:
            peer = RawPeer(b)
            await peer.send(frame(0, Flag.NEW_STREAM), frame(0, Flag.MESSAGE_INITIATOR, b"ok"))
            stream = await muxer.accept_stream()
            assert await receive_at_least(stream, 2) == b"ok"
            await peer.send(frame(0, Flag.CLOSE_INITIATOR), message_prefix(0, MIB))
            for start in range(0, MIB, 100_000):  # many reads' worth
                await peer.send(body[start : start + 100_000])
            await peer.send(frame(1, Flag.NEW_STREAM))
            with trio.fail_after(10):
                assert await stream.receive_some() == b""
                await muxer.accept_stream()  # the frame after it was read
            assert muxer.stats.frames_dropped == 1

    async def test_frames_after_a_large_one_in_the_same_read_keep_their_order(
        self, transport: Callable[[], Any]
    ) -> None:
        body = os.urandom(300_000)
        async with transport() as (a, b), mplex.open_muxer(a) as muxer:
            peer = RawPeer(b)
            wire = frame(0, Flag.NEW_STREAM) + frame(0, Flag.MESSAGE_INITIATOR, body)
            wire += frame(0, Flag.MESSAGE_INITIATOR, b"tail") + frame(0, Flag.CLOSE_INITIATOR)
            await peer.send(wire)
            stream = await muxer.accept_stream()
            with trio.fail_after(10):
                got = bytearray()
                while data := await stream.receive_some():
                    got += data
            assert got == body + b"tail"

    async def test_frames_held_for_the_next_step_still_come_before_a_large_body(
        self, transport: Callable[[], Any]
    ) -> None:
        """One step opens at most 32 streams; what follows them in the read waits for
        the next step, and the rest of a large body read meanwhile goes after it."""
        body = os.urandom(300_000)
        async with transport() as (a, b), mplex.open_muxer(a) as muxer:
            peer = RawPeer(b)
            opens = b"".join(frame(n, Flag.NEW_STREAM) for n in range(40))
            small = frame(0, Flag.MESSAGE_INITIATOR, b"first")
            await peer.send(opens + small + message_prefix(0, len(body)) + body[:100])
            await peer.send(body[100:] + frame(0, Flag.CLOSE_INITIATOR))
            stream = await muxer.accept_stream()
            with trio.fail_after(10):
                got = bytearray()
                while data := await stream.receive_some():
                    got += data
            assert got == b"first" + body
