"""Both sides of the many-connections family (``mplex._bench.many`` lists its cases).

The client opens ``conns`` TCP connections (TLS 1.3 over each with ``--tls 1``): for
``mplex``, a muxer on each; for ``raw``, plain trio streams.  Every connection starts
with one marker byte the server's dispatcher reads before anything else: ``M`` (an
mplex connection follows), ``F`` (the floor's mplex), ``A`` (the ``floor-api``
impl's), ``I`` (the idle floor's: a raw echo connection and one task more; the floors
are in ``mplex._bench.floor``), ``R`` (a raw connection, served as one echo stream),
``T`` (how many tasks the server holds) or ``Q`` (the run is over: the server exits).

* ``conns`` case: one loop of requests per connection.  An mplex request is a stream
  of its own: open, 33 B (the server's echo mode byte and 32 B), ``send_eof``, the
  32 B reply read to EOF.  A raw loop sends 32 B and reads 32 B back over its one
  persistent connection.  Every loop runs ``warmup`` seconds first, then ``seconds``
  timed: requests per second, p50 and p99 of the timed requests, CPU per request on
  each side (the server's read from ``/proc/<pid>/stat`` around the timed phase, so
  neither start-up nor handshakes count).
* ``idle-conns`` case: every connection holds one open stream that has echoed one
  byte (so the server's handler for it runs), then nothing moves.  Reported per
  connection: RSS growth and trio tasks, on each side.  Its ``floor`` impl is the
  idle floor (``mplex._bench.floor``): what any mplex on trio must hold for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

import mplex

from .channel import (
    current_rss,
    emit,
    process_cpu,
    process_rss,
    read_to_eof,
    receive_exactly,
    secured,
    tls_context,
)
from .floor import API_CHECKPOINTS, REQUEST, FloorConnection, serve_floor, serve_idle_floor, wait_to_read
from .server import MANY_STREAMS, serve_stream, serve_stream_modes

#: Connections set up at once (a burst of thousands would overflow the listen backlog).
CONNECTING_AT_ONCE = 64
#: Seconds the idle cases' connections idle before they are measured.
IDLE_FOR = 3 * mplex.WRITER_IDLES_FOR


def raise_open_files_limit(wanted: int) -> None:
    """Thousands of connections need as many descriptors: raise this process's soft
    limit toward the hard one (the benchmark's own process only)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    goal = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < goal:
        resource.setrlimit(resource.RLIMIT_NOFILE, (goal, hard))


def count_tasks() -> int:
    """Every task in this trio run."""
    count, todo = 0, [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        count += 1
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


# -- the server ------------------------------------------------------------------------------


async def serve_many(impl: str, tls: bool, fast_path: bool) -> None:
    """Serve connections until a ``Q`` connection arrives; then report the server's
    RSS growth and tasks since it started listening, and exit."""
    raise_open_files_limit(30_000)
    context = tls_context(server_side=True) if tls else None
    config = dataclasses.replace(MANY_STREAMS, socket_fast_path=fast_path)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
    port = listeners[0].socket.getsockname()[1]
    base_tasks = count_tasks()
    print(f"READY {port}", flush=True)
    async with trio.open_nursery() as nursery:

        async def handle(tcp: trio.SocketStream) -> None:
            conn = await secured(tcp, context, server_side=True)
            marker = await conn.receive_some(1)
            if marker == b"M":
                # As serve_listeners does: handlers in the server's nursery, not one
                # of each connection's own.
                await mplex.serve_connection(serve_stream_modes, conn, config=config, handler_nursery=nursery)
            elif marker == b"R":
                await serve_stream(conn)
            elif marker == b"F":
                await serve_floor(conn)
            elif marker == b"A":
                await serve_floor(conn, API_CHECKPOINTS["server"])
            elif marker == b"I":
                await serve_idle_floor(conn, nursery)
            elif marker == b"T":  # how much is held now: asked while the connections idle
                held = {"tasks": count_tasks() - base_tasks - 1}  # less this handler's own
                await conn.send_all(json.dumps(held).encode())
                await conn.aclose()
            elif marker == b"Q":
                nursery.cancel_scope.cancel()

        nursery.start_soon(trio.serve_listeners, handle, listeners)
    emit(role="server")


# -- the client ------------------------------------------------------------------------------


class Connections:
    """The client's connections, each opened with its marker byte."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.port: int = args.port
        self.impl: str = args.impl
        self.tls = tls_context(server_side=False) if args.tls else None
        self.config = dataclasses.replace(MANY_STREAMS, socket_fast_path=bool(args.fast_path))

    async def connect(self, marker: bytes) -> trio.abc.Stream:
        tcp = await trio.open_tcp_stream("127.0.0.1", self.port)
        conn = await secured(tcp, self.tls, server_side=False)
        await conn.send_all(marker)
        return conn

    async def open_all(self, count: int, nursery: trio.Nursery, idle: bool = False) -> list[Any]:
        """``count`` muxers (started in ``nursery``) or raw echo connections (``idle``:
        the ``floor`` impl's are the idle floor's, raw echo connections too)."""
        opened: list[Any] = [None] * count
        limit = trio.Semaphore(CONNECTING_AT_ONCE)

        async def one(index: int) -> None:
            async with limit:
                if self.impl == "mplex":
                    muxer = mplex.Muxer(await self.connect(b"M"), self.config)
                    await nursery.start(muxer.run)
                    opened[index] = muxer
                elif self.impl == "floor" and not idle:
                    opened[index] = FloorConnection(await self.connect(b"F"))
                elif self.impl == "floor-api":
                    opened[index] = FloorConnection(await self.connect(b"A"), API_CHECKPOINTS["client"])
                else:
                    conn = await self.connect(b"I" if self.impl == "floor" else b"R")
                    await conn.send_all(b"E")
                    opened[index] = conn

        async with trio.open_nursery() as connecting:
            for index in range(count):
                connecting.start_soon(one, index)
        return opened

    async def ask(self, marker: bytes) -> bytes:
        conn = await self.connect(marker)
        answer = await read_to_eof(conn) if marker == b"T" else b""
        await conn.aclose()
        return answer


async def mplex_request(muxer: mplex.Muxer) -> None:
    stream = await muxer.open_stream()
    await stream.send_all(b"E" + REQUEST)
    await stream.send_eof()
    if len(await read_to_eof(stream)) != len(REQUEST):
        raise RuntimeError("short reply")
    await stream.aclose()


async def raw_request(conn: trio.abc.Stream) -> None:
    await conn.send_all(REQUEST)
    await receive_exactly(conn, len(REQUEST))


async def case_conns(args: argparse.Namespace) -> dict[str, Any]:
    """One loop of requests per connection: warm-up, then the timed phase."""
    connections = Connections(args)
    requests: dict[str, Callable[[Any], Awaitable[None]]] = {
        "mplex": mplex_request,
        "floor": FloorConnection.request,
        "floor-api": FloorConnection.request,
    }
    request = requests.get(args.impl, raw_request)
    times: list[float] = []
    timing = stop = False
    async with trio.open_nursery() as nursery:
        peers = await connections.open_all(args.conns, nursery)

        async def loop(peer: Any) -> None:
            clock = time.perf_counter
            while not stop:
                start = clock()
                await request(peer)
                if timing:
                    times.append(clock() - start)

        async with trio.open_nursery() as loops:
            for peer in peers:
                loops.start_soon(loop, peer)
            await trio.sleep(args.warmup)
            timing = True
            started, cpu, server_cpu = time.perf_counter(), time.process_time(), process_cpu(args.server_pid)
            await trio.sleep(args.seconds)
            timing, stop = False, True
            seconds = time.perf_counter() - started
            cpu, server_cpu = time.process_time() - cpu, process_cpu(args.server_pid) - server_cpu
        for peer in peers:
            await peer.aclose()
    await connections.ask(b"Q")
    ordered = sorted(times)
    return {
        "seconds": seconds,
        "requests": len(times),
        "connections": args.conns,
        "p50_us": statistics.median(ordered) * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
        "cpu_seconds": cpu,
        "server_cpu_seconds": server_cpu,
    }


async def newcomer(connections: Connections, nursery: trio.Nursery) -> float:
    """Seconds a newcomer takes to connect, ask once and be answered (median of 5)."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        (peer,) = await connections.open_all(1, nursery, idle=True)
        await (mplex_request(peer) if connections.impl == "mplex" else raw_request(peer))
        times.append(time.perf_counter() - start)
        await peer.aclose()
    return statistics.median(times)


async def case_idle_conns(args: argparse.Namespace) -> dict[str, Any]:
    """``conns`` connections, each holding one open stream that echoed a byte; and a
    newcomer's first request before and while they are held."""
    connections = Connections(args)
    async with trio.open_nursery() as nursery:
        unloaded = await newcomer(connections, nursery)
    before_rss, before_tasks = current_rss(), count_tasks()
    server_rss = process_rss(args.server_pid)
    async with trio.open_nursery() as nursery:
        peers = await connections.open_all(args.conns, nursery, idle=True)
        streams: list[trio.abc.Stream] = []
        for peer in peers:
            stream = await peer.open_stream() if args.impl == "mplex" else peer
            await stream.send_all(b"E." if args.impl == "mplex" else b".")
            await receive_exactly(stream, 1)
            streams.append(stream)
            if args.impl == "floor":
                nursery.start_soon(wait_to_read, peer)
        # Idle, as a node's connections mostly are: long enough for the writer tasks
        # to end (``mplex.WRITER_IDLES_FOR``), whichever implementation runs.
        await trio.sleep(IDLE_FOR)
        await trio.testing.wait_all_tasks_blocked()
        rss, tasks = current_rss() - before_rss, count_tasks() - before_tasks
        server = json.loads(await connections.ask(b"T"))
        server_rss = process_rss(args.server_pid) - server_rss
        loaded = await newcomer(connections, nursery)
        for peer in peers:
            await peer.aclose()
    await connections.ask(b"Q")
    n = args.conns
    return {
        "connections": n,
        "bytes_per_connection": rss / n,
        "server_bytes_per_connection": server_rss / n,
        "tasks_per_connection": tasks / n,
        "server_tasks_per_connection": server["tasks"] / n,
        "newcomer_us": unloaded * 1e6,
        "newcomer_held_us": loaded * 1e6,
    }


async def run_client(args: argparse.Namespace) -> None:
    raise_open_files_limit(30_000)
    case = case_conns if args.case == "conns" else case_idle_conns
    emit(role="client", **(await case(args)))


CASES = ("conns", "idle-conns")
