"""Fuzzing a live muxer: whatever a peer sends, only the documented outcomes happen.

Arbitrary bytes and mutated valid frame sequences go to a running muxer in random
chunks, over every transport, then the peer hangs up.  The muxer must end promptly (no stall), ``run`` must
not raise, the connection's reason must be a clean EOF or a ``ProtocolError``, and every
stream it accepted must end with data, EOF or a ``BrokenResourceError``: nothing else.
"""

from __future__ import annotations

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mplex
from mplex import Encoder, Flag

from .helpers import TRANSPORTS

frames = st.lists(
    st.tuples(
        st.integers(0, 40) | st.integers(0, 2**60 - 1), st.sampled_from(list(Flag)), st.binary(max_size=64)
    ),
    max_size=25,
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid frame sequence with a few bytes flipped, dropped or inserted."""
    wire = bytearray(b"".join(Encoder().frame(i, f, b) for i, f, b in draw(frames)))
    for _ in range(draw(st.integers(0, 4))):
        if not wire:
            break
        at = draw(st.integers(0, len(wire) - 1))
        action = draw(st.sampled_from(["flip", "drop", "insert"]))
        if action == "flip":
            wire[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "drop":
            del wire[at]
        else:
            wire.insert(at, draw(st.integers(0, 255)))
    return bytes(wire)


def run_against(wire: bytes, chunk: int, transport: str) -> None:
    config = mplex.Config(max_message_size=1000, accept_backlog=8, max_inbound_streams=8)

    async def main() -> None:
        async with TRANSPORTS[transport]() as (a, b):
            await against(a, b)

    async def against(a: trio.abc.Stream, b: trio.abc.Stream) -> None:
        muxer = mplex.Muxer(a, config)
        outcomes: list[str] = []

        async def drain(stream: mplex.MplexStream) -> None:
            try:
                while await stream.receive_some():
                    pass
                outcomes.append("eof")
            except trio.BrokenResourceError:
                outcomes.append("broken")

        async def accept_all(nursery: trio.Nursery) -> None:
            try:
                async for stream in muxer:
                    nursery.start_soon(drain, stream)
            except mplex.ConnectionLost as exc:
                # A protocol error, or the input ending inside a frame.
                assert isinstance(exc.__cause__, (mplex.ProtocolError, EOFError)), repr(exc.__cause__)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(muxer.run)
                nursery.start_soon(accept_all, nursery)
                for start in range(0, len(wire), chunk):
                    try:
                        await b.send_all(wire[start : start + chunk])
                    except trio.BrokenResourceError:
                        break  # the muxer closed the connection: a protocol error
                await b.aclose()
        assert muxer.closed
        reason = muxer.end_error
        assert isinstance(reason, mplex.ConnectionLost)
        assert reason.__cause__ is None or isinstance(
            reason.__cause__, (mplex.ProtocolError, trio.BrokenResourceError, EOFError)
        )
        # Every accepted stream ended in a documented way (anything else would have
        # escaped its drain task and failed the nursery).
        assert len(outcomes) == muxer.stats.streams_accepted

    trio.run(main)


over_every_transport_name = pytest.mark.parametrize("transport", list(TRANSPORTS))


@over_every_transport_name
@given(wire=st.binary(max_size=400), chunk=st.integers(1, 64))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_bytes(transport: str, wire: bytes, chunk: int) -> None:
    run_against(wire, chunk, transport)


@over_every_transport_name
@given(wire=mutated(), chunk=st.integers(1, 64))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_valid_frames(transport: str, wire: bytes, chunk: int) -> None:
    run_against(wire, chunk, transport)
