"""A task waiting in ``receive_some`` on a stream that has received before reads the
transport itself (it borrows the read turn), over the socket path and the generic path
over trio's own streams; over TLS and over streams not known to be cancel-safe the
reader task alone reads, and so it does for a stream's first receive.

The arrival of the data then wakes the task that wants it, not the muxer's reader task,
which would have to wake it in a second scheduler pass.  These tests pin what that must
keep: frames for other streams still reach them, a local close or a cancellation still
wakes or ends the waiting task at once, the reader task takes over whenever nobody
borrows the turn, and the writer is not disturbed.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import TRANSPORTS, RawPeer, TaskSteps, frame, read_all, tcp_streams

#: Transports over which receiving tasks borrow the read turn: the socket path (TLS over
#: a socket too), and the generic path over trio's own plain streams (whose cancelled
#: receive_some loses nothing).  Over TLS on the generic path the turn is not lent
#: (see mplex._trio.transport.generic).
LENDING = {
    "memory": ("memory", mplex.Config()),
    "tcp": ("tcp", mplex.Config()),
    "tcp-generic-path": ("tcp", mplex.Config(socket_fast_path=False)),
    "tls": ("tls", mplex.Config()),
}
EVERY = {**LENDING, "tls-generic-path": ("tls", mplex.Config(socket_fast_path=False))}
over_lending_transports = pytest.mark.parametrize("transport", list(LENDING))
over_every_transport = pytest.mark.parametrize("transport", list(EVERY))


#: Every test here runs on a frozen trio clock (pytest-trio's ``mock_clock`` argument):
#: a connection stops lending after a lent read waited long on trio's clock, and a
#: loaded machine must not turn lending off under a test that asserts it.
Clock = trio.testing.MockClock


@contextlib.asynccontextmanager
async def muxer_with_raw_peer(
    transport: str = "tcp", buffer_size: int | None = None, config: mplex.Config | None = None
) -> AsyncIterator[tuple[mplex.Muxer, RawPeer]]:
    """A running muxer over ``transport`` (or over loopback TCP with small kernel
    buffers), its far end a raw-frame peer."""
    name, default = EVERY.get(transport, (transport, mplex.Config()))
    config = config or default
    if buffer_size is None:
        pair: contextlib.AbstractAsyncContextManager[tuple[trio.abc.Stream, trio.abc.Stream]]
        pair = TRANSPORTS[name]()
    else:
        pair = contextlib.nullcontext(await tcp_streams(buffer_size))  # type: ignore[arg-type]
    async with pair as (ours, theirs):
        async with mplex.open_muxer(ours, config) as muxer:
            yield muxer, RawPeer(theirs)
        await theirs.aclose()


async def received_while_waiting(stream: mplex.MplexStream, send: Callable[[], Awaitable[object]]) -> bytes:
    """What ``stream.receive_some()`` returns, started first, ``send()`` run once every
    task waits."""
    got: list[bytes] = []

    async def receive() -> None:
        got.append(await stream.receive_some())

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            await send()
    return got[0]


async def peer_opened_stream(muxer: mplex.Muxer, peer: RawPeer, stream_id: int) -> mplex.MplexStream:
    """A stream the peer opened, whose next receive borrows the turn: it has received
    once already (a stream's first receive never borrows the turn), and once more
    while the reader waited (over the socket path the first ask is refused: see the
    first test)."""
    greeting = b"opened %d" % stream_id
    await peer.send(
        frame(stream_id, Flag.NEW_STREAM, str(stream_id).encode()),
        frame(stream_id, Flag.MESSAGE_INITIATOR, greeting),
    )
    with trio.fail_after(10):
        stream = await muxer.accept_stream()
        assert await stream.receive_some() == greeting
    if muxer.uses_socket_fast_path:
        again = frame(stream_id, Flag.MESSAGE_INITIATOR, b"again")
        assert await received_while_waiting(stream, lambda: peer.send(again)) == b"again"
    return stream


@pytest.mark.parametrize("opened_by", ["us", "the peer"])
@over_lending_transports
async def test_a_streams_first_receive_waits_for_the_reader_task_and_later_ones_borrow_the_turn(
    transport: str, opened_by: str, mock_clock: Clock
) -> None:
    """The first receive of a stream waits mostly for a reply the peer has still to
    make, which the reader task's wake-up does not delay; moving the reader aside and
    back would cost CPU on every request of a stream per request.

    Over the socket path the reader task waits on the socket itself until the turn is
    first asked for, and that first ask is refused: a wake-up call raised in the
    reader's own frame would make it hold an object as large as itself for the rest
    of the connection (``Transport.waits_directly``)."""
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        if opened_by == "us":
            stream = await muxer.open_stream()
            flag = Flag.MESSAGE_RECEIVER
        else:
            await peer.send(frame(0, Flag.NEW_STREAM, b"0"))
            with trio.fail_after(10):
                stream = await muxer.accept_stream()
            flag = Flag.MESSAGE_INITIATOR
        lent_to = []

        async def receive(expected: bytes) -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream.receive_some)
                await trio.testing.wait_all_tasks_blocked()
                lent_to.append(muxer.stats.reader_lent_to)
                await peer.send(frame(stream.id, flag, expected))

        with trio.fail_after(10):
            await receive(b"first")
            await receive(b"second")
            await receive(b"third")
        refused = muxer.uses_socket_fast_path  # (TCP and TLS here; see the docstring)
        assert lent_to == [None, None if refused else stream.key, stream.key]


async def error_of_waiting_receive(
    muxer: mplex.Muxer, stream: mplex.MplexStream, act: Callable[[], Awaitable[object]]
) -> Exception:
    """Start ``stream.receive_some()``, wait until its task waits on the transport
    itself, run ``act()``; return what the receive raised (it must raise, and promptly)."""
    raised: list[Exception] = []

    async def receive() -> None:
        try:
            await stream.receive_some()
        except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
            raised.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert muxer.stats.reader_lent_to == stream.key
            await act()
    assert len(raised) == 1
    return raised[0]


@over_lending_transports
async def test_the_waiting_receiver_is_woken_by_the_transport_not_by_the_reader_task(
    transport: str, mock_clock: Clock
) -> None:
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        stream = await peer_opened_stream(muxer, peer, 0)
        steps = TaskSteps(muxer, "reader")
        got = []

        async def receive() -> None:
            got.append(await stream.receive_some())
            got.append(steps.steps)  # reader steps up to the moment the data arrived

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.add_instrument(steps)
            await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"request"))
        assert got == [b"request", 0]
        # The count is real: with nobody waiting in receive_some, the reader task
        # itself reads the next frame.
        await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"unread"))
        with trio.fail_after(10):
            while not steps.steps:
                await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.remove_instrument(steps)


async def test_the_part_of_a_borrowed_read_left_for_later_is_dispatched_by_the_reader_task(
    mock_clock: Clock,
) -> None:
    """A read can hold more frames than one step dispatches (``frames_per_yield``).
    When a receiving task made that read, the rest is the reader task's to dispatch,
    even though nothing more arrives and the reader task was waiting on the socket."""
    config = mplex.Config(frames_per_yield=8)
    async with muxer_with_raw_peer("tcp", config=config) as (muxer, peer):
        streams = [await peer_opened_stream(muxer, peer, i) for i in range(2)]
        await trio.testing.wait_all_tasks_blocked()  # the reader task waits on the socket
        assert muxer.stats.reader == "waiting"
        # Frames for two streams, alternating (so that none are merged on receipt),
        # straight into the kernel: the reader task cannot see them before the next
        # scheduler pass, so this task's receive_some borrows the turn and reads them.
        frames = [frame(i % 2, Flag.MESSAGE_INITIATOR, bytes([i // 2])) for i in range(200)]
        os.write(peer.stream.socket.fileno(), b"".join(frames))  # type: ignore[attr-defined]
        with trio.fail_after(10):
            for stream in streams:
                got = b""
                while len(got) < 100:
                    got += await stream.receive_some()
                assert got == bytes(range(100))


@over_lending_transports
async def test_frames_a_receiver_reads_for_other_streams_reach_them(
    transport: str, mock_clock: Clock
) -> None:
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        a = await peer_opened_stream(muxer, peer, 0)
        b = await peer_opened_stream(muxer, peer, 1)
        got: dict[str, bytes] = {}

        async def receive(name: str, stream: mplex.MplexStream) -> None:
            got[name] = await stream.receive_some()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive, "a", a)
            await trio.testing.wait_all_tasks_blocked()
            assert muxer.stats.reader_lent_to == a.key  # a's task waits on the socket
            nursery.start_soon(receive, "b", b)
            await trio.testing.wait_all_tasks_blocked()
            # a's task reads this, hands it to b, and waits for the reader task.
            await peer.send(frame(1, Flag.MESSAGE_INITIATOR, b"for b"))
            await trio.testing.wait_all_tasks_blocked()
            assert got == {"b": b"for b"}
            await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"for a"))
        assert got == {"a": b"for a", "b": b"for b"}


@over_lending_transports
async def test_closing_a_stream_wakes_its_receiver_from_the_transport_and_the_connection_lives_on(
    transport: str, mock_clock: Clock
) -> None:
    name, config = LENDING[transport]
    async with (
        TRANSPORTS[name]() as (ours, theirs),
        mplex.open_muxer(ours, config) as left,
        mplex.open_muxer(theirs, config) as right,
    ):
        # One exchange first: the connection is fully up.
        warm_up = await left.open_stream()
        await warm_up.send_all(b"hello")
        with trio.fail_after(10):
            await (await right.accept_stream()).send_all(b"hi")
            assert await warm_up.receive_some() == b"hi"
        for close in ("aclose", "reset"):
            stream = await left.open_stream()
            await stream.send_all(b"open")
            with trio.fail_after(10):
                accepted = await right.accept_stream()
                await accepted.send_all(b"opened")
                assert await stream.receive_some() == b"opened"  # (see peer_opened_stream)
            if left.uses_socket_fast_path:
                again = functools.partial(accepted.send_all, b"again")
                assert await received_while_waiting(stream, again) == b"again"

            async def act(stream: mplex.MplexStream = stream, close: str = close) -> None:
                if close == "aclose":
                    await stream.aclose()
                else:
                    stream.reset()

            error = await error_of_waiting_receive(left, stream, act)
            assert isinstance(error, trio.ClosedResourceError)
        # The wake-up left the socket usable: a new stream still carries data both ways.
        stream = await left.open_stream()
        await stream.send_all(b"still here")
        await stream.send_eof()
        with trio.fail_after(10):
            accepted = await right.accept_stream()
            assert await read_all(accepted) == b"still here"
            await accepted.send_all(b"and back")
            await accepted.send_eof()
            assert await read_all(stream) == b"and back"


@over_every_transport
async def test_a_cancelled_receive_on_the_transport_loses_nothing(transport: str, mock_clock: Clock) -> None:
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        stream = await peer_opened_stream(muxer, peer, 0)
        with trio.CancelScope() as scope:
            scope.deadline = trio.current_time()  # cancelled while it waits, or before
            await stream.receive_some()
        assert scope.cancelled_caught
        assert muxer.stats.reader_lent_to is None
        await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"after"), frame(0, Flag.CLOSE_INITIATOR))
        with trio.fail_after(10):
            assert await read_all(stream) == b"after"


@pytest.mark.parametrize(
    ("who_ends_it", "error_type", "reason"),
    [
        ("the peer", mplex.ConnectionLost, mplex.EndReason.PEER_CLOSED),
        ("we", mplex.MuxerClosed, mplex.EndReason.CLOSED),
    ],
)
@over_lending_transports
async def test_the_end_of_the_connection_reaches_a_receiver_waiting_on_the_transport(
    transport: str, who_ends_it: str, error_type: type[Exception], reason: mplex.EndReason, mock_clock: Clock
) -> None:
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        stream = await peer_opened_stream(muxer, peer, 0)
        end = peer.stream.aclose if who_ends_it == "the peer" else muxer.aclose
        error = await error_of_waiting_receive(muxer, stream, end)
        assert isinstance(error, error_type)  # as for every stream still open
        assert error.reason is reason  # type: ignore[attr-defined]
        assert muxer.end_reason is reason


async def test_a_writer_waiting_for_room_is_not_disturbed_when_a_receiver_moves_the_reader(
    mock_clock: Clock,
) -> None:
    # Small kernel buffers and a far end that does not read yet: the writer waits for
    # room on the socket and the reader waits for input.  Then a receive begins and
    # wakes every waiter on the socket to move the reader aside: the writer must
    # carry on where it was.
    payload = bytes(range(256)) * 2000  # 512,000 bytes: far more than the buffers
    async with muxer_with_raw_peer(buffer_size=4096) as (muxer, peer):
        sender = await muxer.open_stream()
        receiver = await muxer.open_stream()
        await peer.send(frame(receiver.id, Flag.MESSAGE_RECEIVER, b"first"))
        with trio.fail_after(10):
            assert await receiver.receive_some() == b"first"  # (see peer_opened_stream)
        again = frame(receiver.id, Flag.MESSAGE_RECEIVER, b"again")
        assert await received_while_waiting(receiver, lambda: peer.send(again)) == b"again"
        got: list[bytes] = []

        async def receive() -> None:
            got.append(await receiver.receive_some())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender.send_all, payload)
            await trio.testing.wait_all_tasks_blocked()
            assert (muxer.stats.writer, muxer.stats.reader) == ("writing", "waiting")
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert (muxer.stats.reader, muxer.stats.reader_lent_to) == ("lent", receiver.key)
            assert muxer.stats.writer == "writing" and not muxer.closed
            received = bytearray()
            while len(received) < len(payload):
                (wire_frame,) = await peer.receive_frames(1)
                if wire_frame.flag is Flag.MESSAGE_INITIATOR:
                    assert wire_frame.stream_id == sender.id
                    received += wire_frame.data
            assert received == payload
            await peer.send(frame(receiver.id, Flag.MESSAGE_RECEIVER, b"reply"))
        assert got == [b"reply"]


@over_lending_transports
async def test_while_any_stream_has_unread_data_receivers_leave_reading_to_the_reader(
    transport: str, mock_clock: Clock
) -> None:
    # Otherwise every waiting receiver would read a chunk of its own in one scheduler
    # pass, and a hundred of them would fill the buffers faster than they are read.
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        unread = await peer_opened_stream(muxer, peer, 0)
        waiting = await peer_opened_stream(muxer, peer, 1)
        await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"not read yet"))
        with trio.fail_after(10):
            while not muxer.stats.unread_bytes:
                await trio.testing.wait_all_tasks_blocked()
        got = []

        async def receive() -> None:
            got.append(await waiting.receive_some())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert muxer.stats.reader_lent_to is None
            await peer.send(frame(1, Flag.MESSAGE_INITIATOR, b"for the waiting one"))
        assert got == [b"for the waiting one"]
        assert await unread.receive_some() == b"not read yet"


@pytest.mark.parametrize(
    "transport",
    [
        # tcp-generic wraps the socket in a stream of its own: nothing says that
        # cancelling its receive_some loses nothing, so nobody may be moved out of one.
        "tcp-generic",
        # TLS through SSLStream's methods: safe once the handshake is done, but lending
        # does not pay there.
        "tls-generic-path",
    ],
)
async def test_where_the_turn_is_not_lent_the_reader_task_alone_reads(
    transport: str, mock_clock: Clock
) -> None:
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        stream = await peer_opened_stream(muxer, peer, 0)  # (a TLS handshake is done)
        got = []

        async def receive() -> None:
            got.append(await stream.receive_some())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert (muxer.stats.reader, muxer.stats.reader_lent_to) == ("waiting", None)
            await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"via the reader"))
        assert got == [b"via the reader"]


@over_lending_transports
async def test_a_connection_whose_lent_read_waited_long_leaves_the_next_reads_to_the_reader(
    transport: str, mock_clock: trio.testing.MockClock
) -> None:
    """A slow reply (a busy program or peer) means the reader task's hand-off would not
    have delayed it, and lending costs CPU: the next receives wait for the reader task
    (``mplex._trio.reader.LENDS_SKIPPED`` of them); then receives borrow the turn again."""
    async with muxer_with_raw_peer(transport) as (muxer, peer):
        stream = await peer_opened_stream(muxer, peer, 0)

        async def exchange(wait: float) -> bool:
            """One receive that waits ``wait`` seconds; whether it borrowed the turn."""
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream.receive_some)
                await trio.testing.wait_all_tasks_blocked()
                lent = muxer.stats.reader_lent_to == stream.key
                mock_clock.jump(wait)
                await peer.send(frame(0, Flag.MESSAGE_INITIATOR, b"reply"))
            return lent

        assert await exchange(0)  # a quick reply: the next receive borrows again
        assert await exchange(0)
        assert await exchange(1.0)  # borrowed, and waited long
        lent = [await exchange(0) for _ in range(100)]
        assert not lent[0]
        assert lent[-1]
        assert lent == sorted(lent)  # lending resumes once, for good
