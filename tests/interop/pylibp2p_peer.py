"""The py-libp2p side of the interop tests: PyPI ``libp2p`` 0.8's ``Mplex`` (and, with
``--negotiate``, its multiselect) over one TCP connection.

Speaks the protocol of tests/interop/README.md, like peer.mjs.  Runs in the separate
``.venv-bench`` (py-libp2p's dependencies would clash with our type checking)::

    python tests/interop/pylibp2p_peer.py listen [--negotiate]     # prints "READY <port>"
    python tests/interop/pylibp2p_peer.py dial --port P [--negotiate]

Worked around, for py-libp2p 0.8.1's defects: a pending ``read()`` blocks ``write()``
on the same stream, so the echo client sends everything before it reads; an unaccepted
stream blocks its read loop, so streams are accepted by a dedicated task; a reset can
read as EOF (the stream's channel is closed before the reset is flagged), so
``read_all`` waits for the flag.
"""

from __future__ import annotations

import argparse
import json
import socket
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.protocol_muxer.multiselect import Multiselect
from libp2p.protocol_muxer.multiselect_client import MultiselectClient
from libp2p.protocol_muxer.multiselect_communicator import MultiselectCommunicator
from libp2p.stream_muxer.mplex.exceptions import MplexStreamEOF, MplexStreamReset
from libp2p.stream_muxer.mplex.mplex import Mplex

# The benchmark's connection adapter: buffered reads, locked writes over a trio socket.
from benchmarks.pylibp2p_peer import BufferedConnection as Connection

MPLEX = "/mplex/6.7.0"
APP = "/interop/1.0.0"


_CYCLE = bytes((i * 31 + 7) & 0xFF for i in range(256))


def pattern(size: int) -> bytes:
    """Byte i is (31 i + 7) mod 256: both sides compute it, so only sizes cross."""
    return (_CYCLE * (size // 256 + 1))[:size]


class Peer:
    def __init__(self, conn: Connection, mplex: Mplex, negotiate: bool) -> None:
        self.conn = conn
        self.mplex = mplex
        self.negotiate = negotiate
        self.events: list[dict[str, Any]] = []
        self.event_added = trio.Event()

    def add_event(self, **event: Any) -> None:
        self.events.append(event)
        self.event_added.set()
        self.event_added = trio.Event()

    async def read_all(self, stream: Any) -> tuple[bytes, str]:
        """Read to the end; return the bytes and how the stream ended."""
        chunks = []
        while True:
            try:
                data = await stream.read(65536)
            except MplexStreamReset:
                return b"".join(chunks), "reset"
            except MplexStreamEOF:
                data = b""
            if not data:
                # py-libp2p closes the stream's channel before it flags a reset, so a
                # reset can surface as EOF: wait until it has recorded which it was.
                await stream.event_remote_closed.wait()
                return b"".join(chunks), "reset" if stream.event_reset.is_set() else "eof"
            chunks.append(data)

    async def answer(self, stream: Any, obj: object) -> None:
        await stream.write(json.dumps(obj).encode())
        await stream.close()

    async def open_stream(self, mode: bytes) -> Any:
        stream = await self.mplex.open_stream()
        if self.negotiate:
            await MultiselectClient().select_one_of([APP], MultiselectCommunicator(stream))
        await stream.write(mode)
        return stream

    # --- streams the Python side opens: the first byte chooses the behaviour --------

    async def serve_stream(self, stream: Any) -> None:
        if self.negotiate:
            await Multiselect({APP: None}).negotiate(MultiselectCommunicator(stream))  # type: ignore[dict-item]
        mode = await stream.read(1)
        if mode == b"E":
            while True:
                try:
                    data = await stream.read(65536)
                except MplexStreamEOF:
                    break
                await stream.write(data)
            await stream.close()
        elif mode == b"S":
            data, _ = await self.read_all(stream)
            await stream.write(len(data).to_bytes(8, "big"))
            await stream.close()
        elif mode == b"R":
            size = int.from_bytes(await self.read_exactly(stream, 4), "big")
            for start in range(0, size, 65536):
                await stream.write(pattern(size)[start : start + 65536])
            await stream.reset()
        elif mode == b"W":
            data, end = await self.read_all(stream)
            self.add_event(stream="W", bytes=len(data), intact=data == pattern(len(data)), end=end)
        elif mode == b"N":
            await self.answer(stream, {"name": stream.name, "id": stream.stream_id.channel_id})
        elif mode == b"L":  # the event log, once it holds the number of events asked for
            data, _ = await self.read_all(stream)
            while len(self.events) < int(data or b"0"):
                await self.event_added.wait()
            await self.answer(stream, {"events": self.events})
        elif mode == b"X":
            await self.conn.stream.aclose()
        elif mode == b"C":
            data, _ = await self.read_all(stream)
            await self.answer(stream, await self.command(json.loads(data)))
        else:
            await stream.reset()

    @staticmethod
    async def read_exactly(stream: Any, n: int) -> bytes:
        out = b""
        while len(out) < n:
            out += await stream.read(n - len(out))
        return out

    # --- commands: py-libp2p opens streams to the Python side -----------------------

    async def command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        try:
            if cmd["do"] == "echo":
                results: list[str] = []
                async with trio.open_nursery() as nursery:
                    for size in cmd["sizes"]:
                        nursery.start_soon(self.echo_one, size, results)
                return {"results": results}
            if cmd["do"] == "reset":
                stream = await self.open_stream(b"T")
                await stream.write(pattern(cmd["size"]))
                await stream.reset()
                return {"sent": cmd["size"]}
            if cmd["do"] == "await_reset":
                stream = await self.open_stream(b"R")
                await stream.write(cmd["size"].to_bytes(4, "big"))
                data, end = await self.read_all(stream)
                return {"bytes": len(data), "intact": data == pattern(len(data)), "end": end}
            if cmd["do"] == "name":
                stream = await self.open_stream(b"N")
                await stream.close()
                data, _ = await self.read_all(stream)
                return {"id": stream.name, "answer": data.decode()}
            if cmd["do"] == "select":
                stream = await self.mplex.open_stream()
                try:
                    selected = await MultiselectClient().select_one_of(
                        cmd["protocols"], MultiselectCommunicator(stream)
                    )
                except Exception as exc:
                    await stream.reset()
                    return {"error": type(exc).__name__, "message": str(exc)}
                await stream.close()
                return {"selected": selected}
            return {"error": f"unknown command {cmd['do']}"}
        except Exception as exc:
            return {"error": type(exc).__name__, "message": str(exc)}

    async def echo_one(self, size: int, results: list[str]) -> None:
        # Send everything, then read: a pending read() would block write() here.
        stream = await self.open_stream(b"E")
        data = pattern(size)
        for start in range(0, size, 65536):
            await stream.write(data[start : start + 65536])
        await stream.close()
        echoed, _ = await self.read_all(stream)
        results.append("ok" if echoed == data else f"echo of {size} bytes came back as {len(echoed)} bytes")

    async def run(self, greet: bool) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.mplex.start)

            async def accept_all() -> None:
                while True:
                    try:
                        stream = await self.mplex.accept_stream()
                    except Exception:
                        return
                    nursery.start_soon(self.serve_guarded, stream)

            nursery.start_soon(accept_all)
            if greet:
                nursery.start_soon(self.greet)
            await self.mplex.event_closed.wait()
            nursery.cancel_scope.cancel()

    async def serve_guarded(self, stream: Any) -> None:
        try:
            await self.serve_stream(stream)
        except Exception as exc:
            self.add_event(error=type(exc).__name__, message=str(exc))
            await stream.reset()  # as an application would: the other side must not wait

    async def greet(self) -> None:
        stream = await self.open_stream(b"G")
        await stream.write(f"hello from {stream.name}".encode())
        await stream.close()


async def main_async(args: argparse.Namespace) -> None:
    if args.role == "listen":
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        print(f"READY {listeners[0].socket.getsockname()[1]}", flush=True)
        transport = await listeners[0].accept()
        await listeners[0].aclose()
    else:
        transport = await trio.open_tcp_stream("127.0.0.1", args.port)
    transport.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection(transport, is_initiator=args.role == "dial")
    if args.negotiate:
        communicator = MultiselectCommunicator(conn)  # type: ignore[arg-type]
        if args.role == "dial":
            await MultiselectClient().select_one_of([MPLEX], communicator)  # type: ignore[list-item]
        else:
            await Multiselect({MPLEX: None}).negotiate(communicator)  # type: ignore[dict-item]
    peer = Peer(conn, Mplex(conn, ID(b"interop-" + args.role.encode())), args.negotiate)  # type: ignore[arg-type]
    await peer.run(args.greet)
    print(json.dumps({"events": peer.events}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="pylibp2p_peer.py")
    parser.add_argument("role", choices=["listen", "dial"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--negotiate", action="store_true")
    parser.add_argument("--greet", action="store_true")
    args = parser.parse_args()
    trio.run(main_async, args)


if __name__ == "__main__":
    main()
