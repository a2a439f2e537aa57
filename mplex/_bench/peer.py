"""One side of a benchmark run, as its own process: ``python -m mplex._bench.peer``.

The server accepts one TCP connection on 127.0.0.1 and serves it until the client hangs
up; the client runs one case and prints its measurements as one JSON line.  Both print
their peak RSS.  Implementations ("impls"):

* ``mplex``: this library;
* ``raw``: plain trio sockets, one TCP connection per stream (the transport's ceiling);
* ``floor``: one TCP connection carrying hand-encoded mplex Message frames: cached
  prefix, one bytearray, one ``send_all`` per 64 KiB; the receiver decodes frame by
  frame.  The least any Python mplex must do: the "framing floor".

With ``--tls 1`` every TCP connection carries TLS 1.3 (``trio.SSLStream``; the server's
certificate is made at start-up with trustme), for the mplex and raw impls alike.

Server behaviour per stream (mplex) or per connection (raw): the first byte the client
sends chooses it: ``S`` sink (read to EOF, answer with the byte count, close), ``L``
counted sink (an 8-byte length, then that many bytes, answered with the count: for a
raw TLS connection, which has no half-close) or ``E`` echo (send back whatever arrives,
close at EOF).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import resource
import socket
import ssl
import sys
import time
from typing import Any

import trio
import trio.testing

import mplex

CHUNK_32 = b"x" * 32


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def emit(**fields: Any) -> None:
    fields["peak_rss"] = peak_rss()
    print(json.dumps(fields), flush=True)


def nodelay(stream: trio.SocketStream) -> None:
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)


def tls_context(server_side: bool) -> ssl.SSLContext:
    """TLS 1.3 only.  The server's certificate comes from a throwaway trustme CA; the
    client does not verify it (the benchmark measures the channel, not the PKI)."""
    if server_side:
        import trustme  # noqa: PLC0415  (only the TLS cases need it)

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


async def secured(
    conn: trio.SocketStream, context: ssl.SSLContext | None, server_side: bool
) -> trio.abc.Stream:
    """``conn`` itself, or TLS over it with the handshake done (so no case times it)."""
    nodelay(conn)
    if context is None:
        return conn
    stream = trio.SSLStream(conn, context, server_side=server_side)
    await stream.do_handshake()
    return stream


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        data = await stream.receive_some(size - len(got))
        if not data:
            raise RuntimeError(f"the stream ended after {len(got)} of {size} bytes")
        got += data
    return bytes(got)


# --- servers --------------------------------------------------------------------------


async def serve_stream(stream: trio.abc.Stream) -> None:
    try:
        await serve_stream_modes(stream)
    except trio.BrokenResourceError:
        pass  # the client went away mid-stream: that ends this stream, not the server


async def serve_stream_modes(stream: trio.abc.Stream) -> None:
    mode = await stream.receive_some(1)
    if mode == b"S":
        count = 0
        while data := await stream.receive_some():
            count += len(data)
        await stream.send_all(count.to_bytes(8, "big"))
    elif mode == b"L":
        left = int.from_bytes(await receive_exactly(stream, 8), "big")
        count = 0
        while count < left and (data := await stream.receive_some()):
            count += len(data)
        await stream.send_all(count.to_bytes(8, "big"))
    elif mode == b"E":
        while data := await stream.receive_some():
            await stream.send_all(data)
    await stream.aclose()


#: Stream limits raised for the idle-streams case; every other limit is the default.
MANY_STREAMS = mplex.Config(max_inbound_streams=20_000, max_outbound_streams=20_000, accept_backlog=20_000)


async def serve_mplex(transport: trio.abc.Stream, config: mplex.Config = MANY_STREAMS) -> None:
    async with mplex.open_muxer(transport, config) as muxer, trio.open_nursery() as nursery:
        # A client that hangs up with our last frames unread makes its kernel reset the
        # connection: the case is over by then (the client checks its own results).
        with contextlib.suppress(trio.BrokenResourceError):
            async for stream in muxer:
                nursery.start_soon(serve_stream, stream)


async def serve_floor(transport: trio.abc.Stream) -> None:
    """Decode Message frames one by one; answer with the byte count at EOF."""
    count = 0
    pending: bytes | bytearray = b""
    while data := await transport.receive_some(256 * 1024):
        data = pending + data if pending else data
        pos, end = 0, len(data)
        while True:
            parsed = _frame_at(data, pos, end)
            if parsed is None:
                break
            start, stop = parsed
            count += stop - start
            pos = stop
        pending = data[pos:]
    await transport.send_all(count.to_bytes(8, "big"))


def _frame_at(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int] | None:
    """A plain per-frame decode: two varints, then the body's bounds."""
    values = []
    for _ in range(2):
        value = shift = 0
        while True:
            if pos >= end:
                return None
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        values.append(value)
    stop = pos + values[1]
    return (pos, stop) if stop <= end else None


async def serve(impl: str, tls: bool, fast_path: bool = True) -> None:
    context = tls_context(server_side=True) if tls else None
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    print(f"READY {port}", flush=True)
    async with trio.open_nursery() as nursery:
        if impl == "raw":
            # One connection per client stream; serve until the client says done.
            async def handle(tcp: trio.SocketStream) -> None:
                conn = await secured(tcp, context, server_side=True)
                if await conn.receive_some(1) == b"Q":
                    nursery.cancel_scope.cancel()
                    return
                await serve_stream_raw(conn)

            nursery.start_soon(trio.serve_listeners, handle, listeners)
        else:
            conn = await secured(await listeners[0].accept(), context, server_side=True)
            if impl == "mplex":
                await serve_mplex(conn, dataclasses.replace(MANY_STREAMS, socket_fast_path=fast_path))
            else:
                await serve_floor(conn)
            nursery.cancel_scope.cancel()
    emit(role="server")


async def serve_stream_raw(conn: trio.abc.Stream) -> None:
    """A raw connection: the first byte was consumed by the dispatcher; read the mode."""
    await serve_stream(conn)


# --- clients --------------------------------------------------------------------------


class Client:
    """Opens 'streams' of the chosen impl to the server."""

    def __init__(self, impl: str, port: int, tls: bool = False) -> None:
        self.impl = impl
        self.port = port
        self.muxer: mplex.Muxer | None = None
        self.tls = tls_context(server_side=False) if tls else None

    async def connect(self) -> trio.abc.Stream:
        return await secured(await trio.open_tcp_stream("127.0.0.1", self.port), self.tls, server_side=False)

    async def stream(self, mode: bytes, sink_size: int = 0) -> trio.abc.Stream:
        """A stream in ``mode``; a sink of ``sink_size`` bytes over a connection that
        cannot half-close (raw TLS) is a counted sink instead."""
        if self.impl == "mplex":
            assert self.muxer is not None
            stream: trio.abc.Stream = await self.muxer.open_stream()
        else:
            stream = await self.connect()
            await stream.send_all(b"D")  # "data connection" marker for the dispatcher
        if mode == b"S" and not isinstance(stream, trio.abc.HalfCloseableStream):
            mode = b"L" + sink_size.to_bytes(8, "big")
        await stream.send_all(mode)
        return stream

    async def finish(self) -> None:
        if self.impl == "raw":
            conn = await self.connect()
            await conn.send_all(b"Q")
            await conn.aclose()


async def read_to_eof(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while data := await stream.receive_some():
        chunks.append(data)
    return b"".join(chunks)


async def end_of_requests(stream: trio.abc.Stream) -> None:
    """Half-close, or (a raw TLS connection) close: the server's loop ends either way."""
    if isinstance(stream, trio.abc.HalfCloseableStream):
        await stream.send_eof()
        await read_to_eof(stream)
    else:
        await stream.aclose()


async def sink_ack(stream: trio.abc.Stream, expected: int) -> None:
    if isinstance(stream, trio.abc.HalfCloseableStream):
        await stream.send_eof()
        count = int.from_bytes(await read_to_eof(stream), "big")
    else:  # a counted sink
        count = int.from_bytes(await receive_exactly(stream, 8), "big")
        await stream.aclose()
    if count != expected:
        raise RuntimeError(f"server counted {count} bytes, expected {expected}")


async def case_small(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """``count`` writes of ``size`` bytes on one stream (send_nowait or send_all)."""
    count, size = args.count, args.size
    chunk = b"x" * size
    stream = await client.stream(b"S", count * size)
    start = time.perf_counter()
    if args.api == "nowait":
        assert isinstance(stream, mplex.MplexStream)
        send_nowait, wait = stream.send_nowait, stream.wait_send_all_might_not_block
        for _ in range(count):
            try:
                send_nowait(chunk)
            except trio.WouldBlock:
                await wait()
                send_nowait(chunk)
    else:
        send_all = stream.send_all
        for _ in range(count):
            await send_all(chunk)
    await sink_ack(stream, count * size)
    return {"seconds": time.perf_counter() - start, "bytes": count * size}


async def case_floor(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """The framing floor's sender: cached prefix, one bytearray, a write per 64 KiB."""
    conn = await client.connect()
    assert isinstance(conn, trio.SocketStream)
    count, size = args.count, args.size
    chunk = b"x" * size
    prefix = mplex.encode_uvarint(0 << 3 | 2) + mplex.encode_uvarint(size)
    start = time.perf_counter()
    buf = bytearray()
    for _ in range(count):
        buf += prefix
        buf += chunk
        if len(buf) >= 65536:
            await conn.send_all(buf)
            buf = bytearray()
    if buf:
        await conn.send_all(buf)
    await conn.send_eof()
    counted = int.from_bytes(await read_to_eof(conn), "big")
    if counted != count * size:
        raise RuntimeError(f"floor server counted {counted}")
    return {"seconds": time.perf_counter() - start, "bytes": count * size}


async def case_bulk(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """``count`` sends of ``size`` bytes on one stream."""
    data = os.urandom(args.size)
    stream = await client.stream(b"S", args.count * args.size)
    start = time.perf_counter()
    for _ in range(args.count):
        await stream.send_all(data)
    await sink_ack(stream, args.count * args.size)
    return {"seconds": time.perf_counter() - start, "bytes": args.count * args.size}


async def case_fanout(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """``streams`` streams at once, each ``count`` sends of ``size`` bytes."""
    chunk = b"f" * args.size
    total = args.count * args.size

    async def one() -> None:
        stream = await client.stream(b"S", total)
        for _ in range(args.count):
            await stream.send_all(chunk)
        await sink_ack(stream, total)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(args.streams):
            nursery.start_soon(one)
    return {"seconds": time.perf_counter() - start, "bytes": total * args.streams}


async def case_reqresp(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """``streams`` workers, ``count`` requests each: open, send 32 B, close, read reply."""
    request = b"q" * 32

    async def worker() -> None:
        if client.impl == "raw" and args.per_request:  # the request's own connection
            for _ in range(args.count):
                conn = await client.connect()
                assert isinstance(conn, trio.abc.HalfCloseableStream)
                await conn.send_all(b"DE" + request)  # data connection, echo mode, request
                await conn.send_eof()
                if len(await read_to_eof(conn)) != 32:
                    raise RuntimeError("short reply")
                await conn.aclose()
            return
        if client.impl == "raw":  # one persistent connection per worker
            stream = await client.stream(b"E")
            for _ in range(args.count):
                await stream.send_all(request)
                got = b""
                while len(got) < 32:
                    got += await stream.receive_some(32 - len(got))
            await stream.aclose()
            return
        assert client.muxer is not None
        for _ in range(args.count):
            # The request in one write, the server's mode byte ahead of it (a raw
            # connection sends its mode once, for all its requests).
            stream = await client.muxer.open_stream()
            await stream.send_all(b"E" + request)
            await stream.send_eof()
            if len(await read_to_eof(stream)) != 32:
                raise RuntimeError("short reply")
            await stream.aclose()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(args.streams):
            nursery.start_soon(worker)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "requests": args.streams * args.count}


async def ping_pong(stream: trio.abc.Stream, count: int) -> list[float]:
    ping = b"p" * 32
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await stream.send_all(ping)
        got = 0
        while got < 32:
            got += len(await stream.receive_some(32 - got))
        times.append(time.perf_counter() - start)
    return times


def percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_us": ordered[len(ordered) // 2] * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
    }


async def case_latency(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    stream = await client.stream(b"E")
    times = await ping_pong(stream, args.count)
    await end_of_requests(stream)
    return percentiles(times)


async def case_fairness(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """Ping-pong on one stream while another sends ``count`` x ``size`` bytes."""
    bulk = os.urandom(args.size)
    pings = await client.stream(b"E")
    await ping_pong(pings, 10)  # warm up the path
    times: list[float] = []
    done = trio.Event()

    async def send_bulk() -> None:
        stream = await client.stream(b"S")
        for _ in range(args.count):
            await stream.send_all(bulk)
        await sink_ack(stream, args.count * args.size)
        done.set()

    async def ping_while_bulk() -> None:
        while not done.is_set():
            times.extend(await ping_pong(pings, 1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_bulk)
        nursery.start_soon(ping_while_bulk)
    await end_of_requests(pings)
    return {**percentiles(times), "pings": len(times)}


async def case_idle_streams(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """RSS growth per idle open stream (both ends live in this process's peer)."""
    before = current_rss()
    streams = [await client.stream(b"E") for _ in range(args.streams)]
    after = current_rss()
    for stream in streams:
        await stream.aclose()
    return {"bytes_per_stream": (after - before) / args.streams, "streams": args.streams}


CASES = {
    "small": case_small,
    "floor": case_floor,
    "bulk": case_bulk,
    "fanout": case_fanout,
    "reqresp": case_reqresp,
    "latency": case_latency,
    "fairness": case_fairness,
    "idle": case_idle_streams,
}


async def run_client(args: argparse.Namespace) -> None:
    client = Client(args.impl, args.port, bool(args.tls))
    if args.impl == "mplex":
        transport = await client.connect()
        config = dataclasses.replace(MANY_STREAMS, socket_fast_path=bool(args.fast_path))
        if args.frame_size:
            config = dataclasses.replace(config, max_send_frame_size=args.frame_size)
        async with mplex.open_muxer(transport, config) as muxer:
            client.muxer = muxer
            result = await CASES[args.case](client, args)
    else:
        result = await CASES[args.case](client, args)
        await client.finish()
    emit(role="client", **result)


async def memory_case(args: argparse.Namespace) -> None:
    """The small-writes case with both muxers in this process over a memory stream."""
    a, b = trio.testing.memory_stream_pair()
    async with mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
        client = Client("mplex", 0)
        client.muxer = left
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve_all, right)
            result = await case_small(client, args)
            nursery.cancel_scope.cancel()
    emit(role="client", **result)


async def _serve_all(muxer: mplex.Muxer) -> None:
    async with trio.open_nursery() as nursery:
        async for stream in muxer:
            nursery.start_soon(serve_stream, stream)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mplex._bench.peer")
    parser.add_argument("role", choices=["server", "client", "memory"])
    parser.add_argument("--impl", choices=["mplex", "raw", "floor"], default="mplex")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--case", choices=sorted(CASES), default="small")
    parser.add_argument("--api", choices=["nowait", "sendall"], default="sendall")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--per-request", type=int, default=0, help="reqresp over raw TCP: a connection each")
    parser.add_argument("--frame-size", type=int, default=0, help="Config.max_send_frame_size (0: default)")
    parser.add_argument("--tls", type=int, default=0, help="1: TLS 1.3 over every TCP connection")
    parser.add_argument("--fast-path", type=int, default=1, help="0: Config(socket_fast_path=False)")
    parser.add_argument("--log-level", help="configure logging at this level (cost of tracing checks)")
    args = parser.parse_args(argv)
    if args.log_level:
        logging.basicConfig(level=args.log_level, stream=sys.stderr)
    if args.role == "server":
        trio.run(serve, args.impl, bool(args.tls), bool(args.fast_path))
    elif args.role == "memory":
        trio.run(memory_case, args)
    else:
        trio.run(run_client, args)


if __name__ == "__main__":
    main()
