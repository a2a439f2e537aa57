"""The floors of the many-connections family (``mplex._bench.many_peer`` runs them).

The ``floor`` impl is what any mplex on trio must at least do, and nothing more: one
task per connection on each side, speaking mplex frames by hand.  A request is one
write of NewStream, Message and Close; the server answers each Close with one write of
its Message and Close.  No muxer can be cheaper on trio: it adds concurrent streams,
limits and a reader task of its own.  The ``floor-api`` impl adds the scheduler
passes of a trio-style stream API (``API_CHECKPOINTS``): the least any mplex offering
trio's stream API can do.

The idle floor (the ``idle-conns`` case's ``floor`` impl) holds what any mplex on trio
must hold for an idle connection with one open stream, and nothing more: a raw
connection that echoed a byte, and one task more on each side.  On the client, a task
waiting to read the connection (a muxer must read it all the time: the peer may open
or reset a stream at any moment); on the server, beside the connection's own task
(which reads it, as raw's does), a task parked as an open stream's handler waits
(trio's least wait).  No stream state, tables or buffers.
"""

from __future__ import annotations

import contextlib

import trio

import mplex

from .server import serve_stream

#: The ``floor-api`` impl: the floor, and the scheduler passes trio's conventions add to a
#: request through a stream API like trio's, where every async call is a checkpoint.  A
#: client's request makes six calls (``open_stream``, ``send_all``, ``send_eof``, two
#: ``receive_some``, ``aclose``), of which the floor already yields in two (its write
#: and its read).  A server's handler is a task of its own, woken by the connection's
#: reader (a pass), and makes four calls, of which its write yields already and its
#: first read is the wake-up: ``receive_some`` to EOF and ``aclose`` are two more.
API_CHECKPOINTS = {"client": 4, "server": 3}
#: What one request carries (after the echo mode byte) and gets back.
REQUEST = b"q" * 32


async def serve_idle_floor(conn: trio.abc.Stream, nursery: trio.Nursery) -> None:
    """The idle floor's server: a raw echo connection, and a task parked (in the
    server's nursery, not one of the connection's own) until the connection ends."""
    parked: list[trio.lowlevel.Task] = []
    await nursery.start(_park, parked)
    try:
        await serve_stream(conn)
    finally:
        if parked:  # (not if it was cancelled: it has left already)
            trio.lowlevel.reschedule(parked.pop())


async def _park(parked: list[trio.lowlevel.Task], task_status: trio.TaskStatus[None]) -> None:
    """Park until rescheduled: the least a waiting handler holds."""
    parked.append(trio.lowlevel.current_task())

    def abort(_: object) -> trio.lowlevel.Abort:
        parked.clear()
        return trio.lowlevel.Abort.SUCCEEDED

    task_status.started()
    await trio.lowlevel.wait_task_rescheduled(abort)


async def wait_to_read(conn: trio.SocketStream) -> None:
    """The idle floor's client reader: a task waiting to read the connection, until
    it is readable or closed."""
    with contextlib.suppress(trio.ClosedResourceError):
        await trio.lowlevel.wait_readable(conn.socket)


def parse_frames(buffer: bytearray) -> tuple[list[tuple[int, int, bytes]], int]:
    """The whole frames at the start of ``buffer`` as (stream id, flag, body), and
    how many bytes they took: two varints, then the body."""
    frames: list[tuple[int, int, bytes]] = []
    pos, end = 0, len(buffer)
    while True:
        fields: list[int] = []
        at = pos
        for _ in range(2):
            value = shift = 0
            while at < end:
                byte = buffer[at]
                at += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            else:
                return frames, pos
            fields.append(value)
        header, size = fields
        if at + size > end:
            return frames, pos
        frames.append((header >> 3, header & 7, bytes(buffer[at : at + size])))
        pos = at + size


async def serve_floor(conn: trio.abc.Stream, checkpoints: int = 0) -> None:
    """The floor's server: echo each stream's request (less its mode byte) when its
    Close arrives, Message and Close in one write, after ``checkpoints`` checkpoints
    (``API_CHECKPOINTS``)."""
    prefix = mplex.Encoder().prefix
    bodies: dict[int, bytes] = {}
    buffer = bytearray()
    while data := await conn.receive_some():
        buffer += data
        frames, used = parse_frames(buffer)
        del buffer[:used]
        for stream_id, flag, body in frames:
            if flag == mplex.Flag.MESSAGE_INITIATOR:
                bodies[stream_id] = bodies.get(stream_id, b"") + body
            elif flag == mplex.Flag.CLOSE_INITIATOR:
                for _ in range(checkpoints):
                    await trio.lowlevel.checkpoint()
                reply = bodies.pop(stream_id, b"")[1:]
                await conn.send_all(
                    prefix(stream_id, mplex.Flag.MESSAGE_RECEIVER, len(reply))
                    + reply
                    + prefix(stream_id, mplex.Flag.CLOSE_RECEIVER, 0)
                )


class FloorConnection:
    """The floor's client: one connection, one request at a time, each after
    ``checkpoints`` checkpoints (``API_CHECKPOINTS``)."""

    def __init__(self, conn: trio.abc.Stream, checkpoints: int = 0) -> None:
        self.conn = conn
        self.checkpoints = checkpoints
        self.next_id = 0
        self.buffer = bytearray()
        self.prefix = mplex.Encoder().prefix

    async def request(self) -> None:
        stream_id, prefix, flag = self.next_id, self.prefix, mplex.Flag
        self.next_id += 1
        for _ in range(self.checkpoints):
            await trio.lowlevel.checkpoint()
        body = b"E" + REQUEST
        await self.conn.send_all(
            prefix(stream_id, flag.NEW_STREAM, 0)
            + prefix(stream_id, flag.MESSAGE_INITIATOR, len(body))
            + body
            + prefix(stream_id, flag.CLOSE_INITIATOR, 0)
        )
        reply = b""
        while True:
            frames, used = parse_frames(self.buffer)
            del self.buffer[:used]
            for _, kind, data in frames:
                if kind == flag.MESSAGE_RECEIVER:
                    reply += data
                elif kind == flag.CLOSE_RECEIVER:
                    if len(reply) != len(REQUEST):
                        raise RuntimeError("short reply")
                    return
            got = await self.conn.receive_some()
            if not got:
                raise RuntimeError("the server hung up")
            self.buffer += got

    async def aclose(self) -> None:
        await self.conn.aclose()
