"""Byte-level interoperability with js-libp2p and py-libp2p, both roles, every scenario.

Each test runs against each peer (js-libp2p's ``@libp2p/mplex`` 12 and py-libp2p 0.8's
``Mplex``), once with us dialing the TCP connection and once with the peer dialing us;
inside a connection both sides open streams, so both flag parities are exercised in
every scenario.  Talking to real peers is what catches symmetric bugs (flag parity,
varint details, Close/Reset ordering) that a test against ourselves cancels out.  A
missing node or py-libp2p fails these tests: ``make test`` installs both.

The README's interop matrix is written from these results (tests/conftest.py):
each test's ``interop`` mark names its scenario.
"""

from __future__ import annotations

import json
import random

import pytest
import trio

import mplex
from tests.helpers import read_all
from tests.peers import PEERS, ROLES, TIMEOUT, Session, connect, pattern, read_exactly, read_to_end

# Needs node, the npm install and py-libp2p's venv: see the README.
pytestmark = pytest.mark.external

MiB = 1 << 20
#: Largest echo per stream that we open (the peer echoes as it reads).
LARGEST = 4 * MiB
#: Largest echo per stream that the peer opens.  py-libp2p 0.8's echo client must send
#: everything before it reads (a pending read blocks its writes), and its read loop
#: stops for the whole connection while one stream's one-message queue is full: with
#: more in flight than the TCP buffers hold, it deadlocks, then resets after 5 s.
THEIR_LARGEST = {"js-libp2p": 4 * MiB, "py-libp2p": 64 * 1024}


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=ROLES)
def role(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def random_sizes(count: int, largest: int, seed: int) -> list[int]:
    """``count`` sizes from 0 to ``largest``, log-uniform (most small, some large),
    always including 0 and ``largest``."""
    rng = random.Random(seed)
    sizes = [int((largest + 1) ** rng.random()) - 1 for _ in range(count)]
    sizes[-1] = largest
    if count > 1:
        sizes[0] = 0
    return sizes


async def echo(session: Session, size: int) -> bytes:
    """Send ``size`` pattern bytes on a new echo stream, half-close, read to EOF."""
    stream = await session.open(b"E")
    data = pattern(size)
    async with trio.open_nursery() as nursery:

        async def send() -> None:
            await stream.send_all(data)
            await stream.send_eof()

        nursery.start_soon(send)
        return await read_all(stream)


async def echo_many(session: Session, sizes: list[int]) -> list[str]:
    """Echo on one stream per size, all at once; a list of failures (empty when fine)."""
    failures: list[str] = []

    async def one(size: int) -> None:
        echoed = await echo(session, size)
        if echoed != pattern(size):
            failures.append(f"{size} bytes came back as {len(echoed)}")

    async with trio.open_nursery() as nursery:
        for size in sizes:
            nursery.start_soon(one, size)
    return failures


async def both_directions_echo(session: Session, count: int, largest: int, seed: int) -> None:
    """``count`` streams of ours echo through them, and as many of theirs through us, at
    the same time, with random sizes up to ``largest`` (less for py-libp2p's own)."""
    our_sizes = random_sizes(count, largest, seed)
    their_sizes = random_sizes(count, min(largest, THEIR_LARGEST[session.peer]), seed + 1)
    async with trio.open_nursery() as nursery:
        ours: list[list[str]] = []

        async def ours_run() -> None:
            ours.append(await echo_many(session, our_sizes))

        nursery.start_soon(ours_run)
        theirs = await session.command(do="echo", sizes=their_sizes)
    assert ours == [[]]
    assert theirs == {"results": ["ok"] * count}


@pytest.mark.interop("echo, 1 stream, half-close")
async def test_echo_one_stream(peer: str, role: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role) as session:
            await both_directions_echo(session, 1, LARGEST, seed=1)


@pytest.mark.interop("echo, 100 concurrent streams, 0 B to 4 MiB")
async def test_echo_100_streams(peer: str, role: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role) as session:
            await both_directions_echo(session, 100, LARGEST, seed=100)


@pytest.mark.interop("echo, 1000 concurrent streams, 0 B to 4 MiB")
async def test_echo_1000_streams(peer: str, role: str) -> None:
    with trio.fail_after(2 * TIMEOUT):
        async with connect(peer, role) as session:
            await both_directions_echo(session, 1000, LARGEST, seed=1000)


@pytest.mark.interop("frames at and over the 1 MiB limit")
async def test_frames_at_and_over_the_limit(peer: str, role: str) -> None:
    """Our 1 MiB + 1 send must leave as two frames (a peer drops the connection on a
    bigger one); frames of exactly 1 MiB must pass both ways."""
    exact = mplex.Config(max_send_frame_size=MiB)
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role, config=exact) as session:
            assert await echo(session, MiB + 1) == pattern(MiB + 1)
            assert await echo(session, 3 * MiB) == pattern(3 * MiB)
            theirs = THEIR_LARGE_SENDS[peer]
            assert await session.command(do="echo", sizes=theirs) == {"results": ["ok"] * len(theirs)}
            assert not session.muxer.closed


#: What each peer sends us in the frame-limit test.  js-libp2p splits at 1 MiB, so
#: these reach us as frames of exactly the limit.  py-libp2p 0.8 splits every write
#: into 4,076-byte frames (it never sends a large frame); see THEIR_LARGEST.
THEIR_LARGE_SENDS = {"js-libp2p": [MiB, MiB + 1, 2 * MiB], "py-libp2p": [THEIR_LARGEST["py-libp2p"]]}


@pytest.mark.interop("their reset reaches us after their data")
async def test_their_reset_reaches_our_reader_after_the_data(peer: str, role: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role) as session:
            # On a stream we opened: they send 100,000 bytes, then reset.
            stream = await session.open(b"R")
            await stream.send_all((100_000).to_bytes(4, "big"))
            data, end = await read_to_end(stream)
            assert (len(data), data == pattern(len(data)), end) == (100_000, True, "reset")
            with pytest.raises(mplex.StreamReset) as info:
                await stream.receive_some()
            assert info.value.by_peer
            # On a stream they opened.
            assert await session.command(do="reset", size=70_000) == {"sent": 70_000}
            [seen] = await session.wait_received(1)
            assert (seen["mode"], seen["bytes"], seen["intact"], seen["end"]) == ("T", 70_000, True, "reset")


@pytest.mark.interop("our reset reaches them after our data")
async def test_our_reset_reaches_them_as_an_abort(peer: str, role: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role) as session:
            # On a stream we opened: 50,000 bytes, then reset().
            stream = await session.open(b"W")
            await stream.send_all(pattern(50_000))
            stream.reset()
            [event] = await session.peer_log(wait_for=1)
            assert event == {"stream": "W", "bytes": 50_000, "intact": True, "end": "reset"}
            # On a stream they opened: we answer 30,000 bytes, then reset().
            assert await session.command(do="await_reset", size=30_000) == {
                "bytes": 30_000,
                "intact": True,
                "end": "reset",
            }


@pytest.mark.interop("stream names both ways")
async def test_stream_names(peer: str, role: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role) as session:
            stream = await session.open(b"N", name="interop/naïve name")
            await stream.send_eof()
            seen = json.loads(await read_all(stream))
            their = await session.command(do="name")
    if peer == "py-libp2p":
        # py-libp2p keeps the name it receives, and names its streams by number.
        assert seen["name"] == "interop/naïve name"
        assert their["answer"] == their["id"] == str(int(their["id"]))
    else:
        # js-libp2p 12 ignores received names (its stream ids are "i<n>"/"r<n>"), and
        # names its own streams "i<n>": that is the name we see.
        assert seen["name"] is None
        assert seen["id"].startswith("r")
        assert their["answer"] == their["id"]
        assert their["id"].startswith("i")


@pytest.mark.interop("both sides open stream 0 at once")
async def test_simultaneous_opens_are_different_streams(peer: str, role: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role, greet=True) as session:
            ours = await session.open(b"E")  # races their greeting stream
            await ours.send_all(b"ours")
            await ours.send_eof()
            assert await read_all(ours) == b"ours"
            [greeting] = await session.wait_received(1)
    assert ours.id == 0 and ours.is_initiator
    assert (greeting["id"], greeting["initiator"], greeting["mode"]) == (0, False, "G")
    assert greeting["text"] == f"hello from {greeting['name']}"


@pytest.mark.interop("connection dropped mid-transfer: every stream errors")
async def test_dropped_connection_fails_every_stream_promptly(peer: str, role: str) -> None:
    outcomes: list[str] = []
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role) as session:
            streams = [await session.open(b"S") for _ in range(10)]

            sending: list[mplex.MplexStream] = []
            all_sending = trio.Event()

            async def keep_sending(stream: mplex.MplexStream) -> None:
                try:
                    while True:
                        await stream.send_all(b"x" * 16384)
                        if stream not in sending:
                            sending.append(stream)
                            if len(sending) == len(streams):
                                all_sending.set()
                except trio.BrokenResourceError as exc:
                    outcomes.append(type(exc).__name__)

            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(keep_sending, stream)
                await all_sending.wait()
                await session.open(b"X")  # the peer drops the TCP connection
                # Promptly: every sender has its error within seconds, not at a timeout.
                nursery.cancel_scope.deadline = trio.current_time() + 5
    assert outcomes == ["ConnectionLost"] * 10


class TestMultistreamSelect:
    """``--negotiate``: /mplex/6.7.0 agreed on the connection, /interop/1.0.0 on each stream."""

    @pytest.mark.interop("multistream-select: mplex, then each stream")
    async def test_negotiated_connection_and_streams(self, peer: str, role: str) -> None:
        with trio.fail_after(TIMEOUT):
            async with connect(peer, role, negotiate=True) as session:
                await both_directions_echo(session, 20, 100_000, seed=20)
                await session.command(do="select", protocols=["/interop/1.0.0"])
                seen = await session.wait_received(21)
        assert {s.get("protocol") for s in seen} == {"/interop/1.0.0"}

    @pytest.mark.interop("multistream-select: refusal (na) both ways")
    async def test_refusal_both_ways(self, peer: str, role: str) -> None:
        with trio.fail_after(TIMEOUT):
            async with connect(peer, role, negotiate=True) as session:
                stream = await session.muxer.open_stream()
                with pytest.raises(mplex.ProtocolNotSupportedError):
                    await mplex.select_protocol(stream, ["/nope/1.0.0", "/nope/2.0.0"])
                stream.reset()
                theirs = await session.command(do="select", protocols=["/nope/1.0.0"])
                [seen] = await session.wait_received(1)
        assert "error" in theirs and "selected" not in theirs
        # They gave up and reset the stream: our listener saw that, with nothing agreed.
        assert isinstance(seen["error"], trio.BrokenResourceError)
        assert "protocol" not in seen

    @pytest.mark.interop("multistream-select: protocol id over the 1024-byte limit")
    async def test_protocol_id_over_the_limit(self, peer: str, role: str) -> None:
        too_long = "/" + "x" * 1100
        with trio.fail_after(TIMEOUT):
            async with connect(peer, role, negotiate=True) as session:
                # Theirs to us: we refuse it as soon as its length is read.
                await session.command(do="select", protocols=[too_long])
                [seen] = await session.wait_received(1)
                assert isinstance(seen["error"], mplex.NegotiationError)
                assert "over the limit of 1024" in str(seen["error"])
                # Ours to them: refused here, before a byte is sent.
                stream = await session.muxer.open_stream()
                with pytest.raises(ValueError, match="over the limit"):
                    await mplex.select_protocol(stream, [too_long])
                # And the raw message, sent anyway, is refused by them.
                await stream.send_all(mplex._engine.multistream.encode_message(mplex.MULTISTREAM_PROTOCOL_ID))
                body = too_long.encode() + b"\n"
                await stream.send_all(mplex.encode_uvarint(len(body)) + body)
                answer = await raw_answer(stream)
        LIMIT_REACTION[peer](answer)


async def raw_answer(stream: mplex.MplexStream) -> bytes | str:
    """What the peer answered to our raw over-long proposal: its bytes, or how it ended."""
    data = b""
    try:
        while len(data) < 20 + 4:  # its header, then an answer such as "na"
            chunk = await stream.receive_some()
            if not chunk:
                return data
            data += chunk
    except mplex.StreamReset:
        return "reset"
    return data


def _js_refuses(answer: bytes | str) -> None:
    # js reads the length, finds it over its 1024 maxDataLength, and resets the stream.
    assert answer == "reset"


def _py_answers_na(answer: bytes | str) -> None:
    # py-libp2p 0.8 has no length limit in multiselect: it reads the id and answers na.
    assert answer == b"\x13/multistream/1.0.0\n\x03na\n"


LIMIT_REACTION = {"js-libp2p": _js_refuses, "py-libp2p": _py_answers_na}


@pytest.mark.interop("js-libp2p defaults: a 6th open within 1 s kills its muxer")
@pytest.mark.parametrize("peer", ["js-libp2p"])
async def test_js_default_open_rate_limit_kills_its_muxer(peer: str, role: str) -> None:
    """What js-libp2p 12 does with its defaults (``disconnectThreshold`` 5): when a
    sixth stream opens within one second, its muxer aborts.  It resets every open
    stream, ignores the new one, and from then on ignores the connection, which it
    leaves open (a full js-libp2p node then closes it).  Our side sees ``StreamReset``
    on the open streams; the sixth never hears back, so an application needs a
    timeout.  The other tests lift the limit, as js-libp2p's own tests do."""
    with trio.fail_after(TIMEOUT):
        async with connect(peer, role, library_defaults=True) as session:
            held = [await session.open(b"E") for _ in range(5)]
            for stream in held:
                await stream.send_all(b"ping")
                assert await read_exactly(stream, 4) == b"ping"  # five opens are fine
            sixth = await session.open(b"E")
            await sixth.send_all(b"ping")
            for stream in held:
                with pytest.raises(mplex.StreamReset) as info:
                    await stream.receive_some()
                assert info.value.by_peer
            with trio.move_on_after(1) as window:  # an observation window, not a wait
                await sixth.receive_some()
            assert window.cancelled_caught, "the sixth stream was answered"
            assert not session.muxer.closed
