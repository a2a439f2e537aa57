"""One side of a benchmark run with py-libp2p's mplex (PyPI ``libp2p``, the ``bench`` extra).

Same protocol as mplex/_bench/peer.py (READY line, S/E first byte, JSON result line).
py-libp2p's ``Mplex`` wants a secured connection; ``BufferedConnection`` stands in for
one over a trio socket: reads are served from a buffer refilled 64 KiB at a time (as
a Noise connection would, so py-libp2p's byte-at-a-time varint reads cost no syscall
each), and writes are serialised by a lock.

    python -m benchmarks.pylibp2p_peer server
    python -m benchmarks.pylibp2p_peer client --port P --size 32 --count N
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.stream_muxer.mplex.exceptions import MplexStreamEOF
from libp2p.stream_muxer.mplex.mplex import Mplex

from mplex._bench.channel import emit, nodelay


class BufferedConnection:
    """The part of py-libp2p's secured-connection interface that Mplex uses."""

    def __init__(self, stream: trio.SocketStream, *, is_initiator: bool) -> None:
        self.stream = stream
        self.is_initiator = is_initiator
        self._buffer = bytearray()
        self._write_lock = trio.Lock()

    async def read(self, n: int | None = None) -> bytes:
        if not self._buffer:
            data = await self.stream.receive_some(65536)
            if not data:
                return b""
            self._buffer += data
        size = len(self._buffer) if n is None else min(n, len(self._buffer))
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            await self.stream.send_all(data)

    async def close(self) -> None:
        await self.stream.aclose()

    def get_remote_address(self) -> tuple[str, int] | None:
        return None

    def get_transport_addresses(self) -> list[Any]:
        return []


async def read_to_eof(stream: Any) -> bytes:
    chunks = []
    while True:
        try:
            data = await stream.read(65536)
        except MplexStreamEOF:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


async def serve_stream(stream: Any) -> None:
    count = len(await read_to_eof(stream)) - 1  # the first byte is the mode
    await stream.write(count.to_bytes(8, "big"))
    await stream.close()


async def server() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(f"READY {listeners[0].socket.getsockname()[1]}", flush=True)
    conn = await listeners[0].accept()
    nodelay(conn)
    mplex = Mplex(BufferedConnection(conn, is_initiator=False), ID(b"bench-server"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mplex.start)
        stream = await mplex.accept_stream()
        await serve_stream(stream)
        with trio.move_on_after(5):
            await mplex.event_closed.wait()  # the client hangs up when it has the answer
        nursery.cancel_scope.cancel()
    emit(role="server")


async def client(port: int, size: int, count: int) -> None:
    conn = await trio.open_tcp_stream("127.0.0.1", port)
    nodelay(conn)
    mplex = Mplex(BufferedConnection(conn, is_initiator=True), ID(b"bench-client"))
    chunk = b"x" * size
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mplex.start)
        stream = await mplex.open_stream()
        start = time.perf_counter()
        await stream.write(b"S")
        for _ in range(count):
            await stream.write(chunk)
        await stream.close()
        counted = int.from_bytes(await read_to_eof(stream), "big")
        seconds = time.perf_counter() - start
        if counted != size * count:
            raise RuntimeError(f"server counted {counted}, expected {size * count}")
        # Stop its read loop before closing the socket: py-libp2p 0.8's loop raises
        # ClosedResourceError when the connection is closed under it.
        nursery.cancel_scope.cancel()
    await conn.aclose()
    emit(role="client", seconds=seconds, bytes=size * count)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pylibp2p_peer")
    parser.add_argument("role", choices=["server", "client"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--case", default="small")
    args = parser.parse_args()
    if args.role == "server":
        trio.run(server)
    else:
        trio.run(client, args.port, args.size, args.count)


if __name__ == "__main__":
    main()
