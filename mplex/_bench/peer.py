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
What the server does with each stream: ``mplex._bench.server``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from typing import Any

import trio
import trio.testing

import mplex

from . import many_peer
from .channel import current_rss, emit, read_to_eof, receive_exactly, secured, tls_context
from .server import MANY_STREAMS, serve, serve_stream


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
    prefix = mplex.Encoder().prefix(0, mplex.Flag.MESSAGE_INITIATOR, size)
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

    start, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(args.streams):
            nursery.start_soon(worker)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "requests": args.streams * args.count,
        "cpu_seconds": time.process_time() - cpu,
    }


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
    parser.add_argument("--impl", choices=["mplex", "raw", "floor", "floor-api"], default="mplex")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--case", choices=sorted([*CASES, *many_peer.CASES]), default="small")
    parser.add_argument("--api", choices=["nowait", "sendall"], default="sendall")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--per-request", type=int, default=0, help="reqresp over raw TCP: a connection each")
    parser.add_argument("--frame-size", type=int, default=0, help="Config.max_send_frame_size (0: default)")
    parser.add_argument("--tls", type=int, default=0, help="1: TLS 1.3 over every TCP connection")
    parser.add_argument("--fast-path", type=int, default=1, help="0: Config(socket_fast_path=False)")
    parser.add_argument("--conns", type=int, default=0, help="the many-connections family: connections")
    parser.add_argument("--seconds", type=float, default=2.0, help="conns: the timed phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="conns: the phase before it")
    parser.add_argument("--server-pid", type=int, default=0, help="conns: the server's CPU and RSS")
    parser.add_argument("--log-level", help="configure logging at this level (cost of tracing checks)")
    args = parser.parse_args(argv)
    if args.log_level:
        logging.basicConfig(level=args.log_level, stream=sys.stderr)
    if args.role == "server" and args.conns:
        trio.run(many_peer.serve_many, args.impl, bool(args.tls), bool(args.fast_path))
    elif args.role == "server":
        trio.run(serve, args.impl, bool(args.tls), bool(args.fast_path))
    elif args.case in many_peer.CASES:
        trio.run(many_peer.run_client, args)
    elif args.role == "memory":
        trio.run(memory_case, args)
    else:
        trio.run(run_client, args)


if __name__ == "__main__":
    main()
