"""Which side limits bulk transfers over TLS, and how fast the receiving side runs.

A sender process writes 384 MiB in 64 KiB sends over TLS 1.3 on 127.0.0.1 to this
process, which receives it with a raw ``trio.SSLStream``, through mplex (generic
path), or through the *floor*: the least any muxer with a reader task can do over an
``SSLStream`` (mplex frames from our sender; a reader task that reads each record,
parses each frame's header, joins each body once into one ``bytes`` and hands it to
the receiving task by rescheduling it, nothing more: no stream table, no limits, no
checks).  Each is run three times, in turns.  Prints the receiver's throughput and
how busy its CPU was (near 100%: the receiver is the limit).

    python -m benchmarks.tls_receive
"""

from __future__ import annotations

import os
import sys

import trio

import mplex
from mplex._bench.channel import tls_context
from mplex._trio.transport.base import READ_SIZE

from ._measure import python, spent

SIZE = 64 * 1024
TOTAL = 384 * 1024 * 1024


async def send(port: int, impl: str) -> None:
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    tls = trio.SSLStream(tcp, tls_context(server_side=False))
    await tls.do_handshake()
    data = os.urandom(SIZE)
    if impl == "raw":
        for _ in range(TOTAL // SIZE):
            await tls.send_all(data)
        await tls.receive_some(1)
        return
    async with mplex.open_muxer(tls, mplex.Config(socket_fast_path=False)) as muxer:
        stream = await muxer.open_stream()
        for _ in range(TOTAL // SIZE):
            await stream.send_all(data)
        await stream.receive_some(1)


async def receive_floor(tls: trio.SSLStream[trio.SocketStream]) -> int:
    """The floor's reader and receiving task (see the module docstring)."""
    bodies: list[bytes] = []
    waiting: list[trio.lowlevel.Task] = []
    got = 0

    async def reader() -> None:
        pieces: list[memoryview] = []  # the current body, as views of the records
        need = flag = 0
        head = b""  # a header cut by the end of a record

        def finish() -> None:
            if flag == 2:  # a Message from the stream's initiator: to the receiver
                bodies.append(b"".join(pieces))  # the one copy of the body
                if waiting:
                    trio.lowlevel.reschedule(waiting.pop())
            pieces.clear()

        while True:
            data = await tls.receive_some(READ_SIZE)
            if not data:
                return
            view, pos, end = memoryview(data), 0, len(data)
            while pos < end:
                if need:
                    take = min(need, end - pos)
                    pieces.append(view[pos : pos + take])
                    pos, need = pos + take, need - take
                    if not need:
                        finish()
                    continue
                chunk = head + bytes(view[pos : pos + 20])
                parsed = _header(chunk)
                if parsed is None:
                    head, pos = chunk, min(end, pos + 20)
                    continue
                flag, need, used = parsed
                pos, head = pos + used - len(head), b""
                if not need:
                    finish()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        while got < TOTAL:
            if not bodies:
                waiting.append(trio.lowlevel.current_task())
                await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
            else:
                await trio.lowlevel.checkpoint()  # receive_some is a checkpoint
            got += sum(len(body) for body in bodies)
            bodies.clear()
        nursery.cancel_scope.cancel()
    return got


def _header(chunk: bytes) -> tuple[int, int, int] | None:
    """(flag, body length, header bytes) of the frame header ``chunk`` starts with."""
    header, pos = _uvarint(chunk, 0)
    length, pos = _uvarint(chunk, pos) if header >= 0 else (-1, pos)
    return None if length < 0 else (header & 7, length, pos)


def _uvarint(chunk: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(chunk):
        byte = chunk[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, pos


async def receive(impl: str) -> str:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    sender = python("-m", "benchmarks.tls_receive", "send", impl, str(port))
    tls = trio.SSLStream(await listener.accept(), tls_context(server_side=True), server_side=True)
    await tls.do_handshake()
    got = 0
    with spent() as took:
        if impl == "raw":
            while got < TOTAL:
                got += len(await tls.receive_some(1 << 20))
            await tls.send_all(b"k")
        elif impl == "floor":
            got = await receive_floor(tls)
            await tls.send_all(b"\x01\x01k")  # a Message to the sender's stream 0: "k"
        else:
            async with mplex.open_muxer(tls, mplex.Config(socket_fast_path=False)) as muxer:
                stream = await muxer.accept_stream()
                while got < TOTAL:
                    got += len(await stream.receive_some())
                await stream.send_all(b"k")
    sender.wait()
    return f"{impl:5} receiver {TOTAL / took.wall / 1e6:5.0f} MB/s, its CPU busy {took.cpu / took.wall:4.0%}"


def main() -> None:
    if sys.argv[1:2] == ["send"]:
        trio.run(send, int(sys.argv[3]), sys.argv[2])
        return
    for _ in range(3):
        for impl in ("raw", "floor", "mplex"):
            print(trio.run(receive, impl))


if __name__ == "__main__":
    main()
