"""A model of both peers: random sequences of open, accept, send, half-close, reset and
read, on both sides of a live connection, checked operation by operation.

The model predicts every outcome: which bytes each end reads (always a prefix of what
its peer sent), when it reads EOF, when it gets StreamReset, and which local calls must
fail with ClosedResourceError.
"""

from __future__ import annotations

import dataclasses

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mplex
from tests.helpers import TRANSPORTS


@dataclasses.dataclass
class End:
    stream: mplex.MplexStream | None = None
    sent: bytearray = dataclasses.field(default_factory=bytearray)
    received: bytearray = dataclasses.field(default_factory=bytearray)
    eof_sent: bool = False
    closed_here: bool = False  # reset() was called on this end: local calls say closed
    reset_sent: bool = False  # ...and it reached the wire (the stream was not finished)


@dataclasses.dataclass
class Pair:
    """One logical stream: end 0 on the left muxer, end 1 on the right one."""

    ends: tuple[End, End] = dataclasses.field(default_factory=lambda: (End(), End()))


OPS = st.lists(
    st.tuples(
        st.sampled_from(["open", "accept", "send", "eof", "reset", "read", "read"]),
        st.integers(0, 1),  # side
        st.integers(0, 7),  # which stream
        st.integers(0, 70_000),  # how many bytes to send
    ),
    max_size=40,
)


async def settle() -> None:
    # The writer flushes when every task is blocked, and the peer's reader then runs:
    # a few idle points let every queued frame be delivered.  Over loopback TCP (and
    # TLS over it) this holds too: the kernel has the bytes when the write returns, so
    # trio sees them ready before it declares the program idle.
    for _ in range(6):
        await trio.testing.wait_all_tasks_blocked()


async def run_model(ops: list[tuple[str, int, int, int]], transport: str = "memory") -> None:
    pairs: list[Pair] = []
    pending: tuple[list[Pair], list[Pair]] = ([], [])  # opened by the other side, not accepted
    counter = 0
    async with TRANSPORTS[transport]() as (a, b), mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
        muxers = (left, right)
        for op, side, which, size in ops:
            # Every step is bounded: a frame lost on the way makes a read wait forever.
            with trio.fail_after(20):
                other = 1 - side
                if op == "open":
                    pair = Pair()
                    pair.ends[side].stream = await muxers[side].open_stream()
                    pairs.append(pair)
                    pending[other].append(pair)
                elif op == "accept":
                    if pending[side]:
                        pair = pending[side].pop(0)
                        pair.ends[side].stream = await muxers[side].accept_stream()
                        assert pair.ends[side].stream.id == pair.ends[other].stream.id  # type: ignore[union-attr]
                else:
                    usable = [p for p in pairs if p.ends[side].stream is not None]
                    if not usable:
                        continue
                    pair = usable[which % len(usable)]
                    me, peer = pair.ends[side], pair.ends[other]
                    stream = me.stream
                    assert stream is not None
                    if op == "send":
                        counter += 1
                        data = bytes([counter % 256]) * size
                        if me.closed_here or me.eof_sent:
                            with pytest.raises(trio.ClosedResourceError):
                                await stream.send_all(data)
                        elif peer.reset_sent:
                            with pytest.raises(mplex.StreamReset):
                                await stream.send_all(data)
                        else:
                            await stream.send_all(data)
                            me.sent += data
                    elif op == "eof":
                        if me.closed_here:
                            with pytest.raises(trio.ClosedResourceError):
                                await stream.send_eof()
                        elif peer.reset_sent and not me.eof_sent:
                            with pytest.raises(mplex.StreamReset):
                                await stream.send_eof()
                        else:
                            await stream.send_eof()
                            me.eof_sent = True
                    elif op == "reset":
                        stream.reset()
                        me.closed_here = True
                        if not (me.eof_sent and peer.eof_sent) and not me.reset_sent:
                            me.reset_sent = True  # a finished stream has nothing to reset
                    elif op == "read":
                        await settle()
                        unread = peer.sent[len(me.received) :]
                        if me.closed_here:
                            with pytest.raises(trio.ClosedResourceError):
                                await stream.receive_some()
                        elif unread:
                            data = await stream.receive_some()
                            assert data and unread.startswith(data)
                            me.received += data
                        elif peer.eof_sent:
                            assert await stream.receive_some() == b""
                        elif peer.reset_sent:
                            with pytest.raises(mplex.StreamReset):
                                await stream.receive_some()
            await settle()
        assert not left.closed and not right.closed


# Found by this model: our EOF, then the peer's reset, then a send must say "closed".
REGRESSION = [
    ("open", 0, 0, 0), ("open", 1, 0, 0), ("accept", 1, 0, 0), ("accept", 0, 0, 0),
    ("send", 0, 0, 5000), ("send", 1, 1, 100), ("read", 1, 0, 0), ("read", 1, 0, 0),
    ("eof", 0, 0, 0), ("read", 1, 0, 0), ("send", 1, 0, 70000), ("reset", 1, 0, 0),
    ("read", 0, 0, 0), ("read", 0, 0, 0), ("send", 0, 0, 10), ("eof", 0, 0, 0), ("read", 0, 1, 0),
]  # fmt: skip


@example(REGRESSION)
@given(OPS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_both_peers_agree_with_the_model(ops: list[tuple[str, int, int, int]]) -> None:
    trio.run(run_model, ops)


@pytest.mark.parametrize("transport", [name for name in TRANSPORTS if name != "memory"])
@example(REGRESSION)
@given(ops=OPS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_both_peers_agree_with_the_model_over_real_transports(
    transport: str, ops: list[tuple[str, int, int, int]]
) -> None:
    """The same model over TCP (with and without the socket path) and TLS: fewer
    examples, since each one opens a real connection."""
    trio.run(run_model, ops, transport)
