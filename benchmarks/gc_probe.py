"""Many busy connections and CPython's cyclic garbage collector: how often it runs and
what it costs, at the interpreter's thresholds and at others.

    python -m benchmarks.gc_probe [--conns N] [--seconds S] [--thresholds T ...] [--turns N] [--raw]

The client runs in this process with ``--conns`` connections (127.0.0.1 TCP), each with
one loop of requests, a stream per request (open, 33 B, ``send_eof``, the 32 B reply
read to EOF), as in the "N connections, a request loop each" cases; the server
(``mplex.serve_connection``) runs in a process of its own.  With ``--raw``, the same
loops over raw trio connections instead, 32 B each way, as the cases' raw baseline.
For each threshold (0: the interpreter's own), in turns, both processes set
``gc.set_threshold(T, 10, 10)``, the loops warm up for a second, then run
``--seconds``; the client counts its collections per generation and the time they
took (``gc.callbacks``).  The library itself never changes the collector's settings:
this is what a program may choose to do.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import trio

import mplex
from mplex._bench.many_peer import mplex_request, raise_open_files_limit, raw_request
from mplex._bench.server import MANY_STREAMS, serve_stream, serve_stream_modes

from ._measure import server, spent

WARMUP = 1.0
#: The columns' widths.
WIDTHS = (14, 8, 14, 23, 15)
#: The interpreter's thresholds, as this process started.
DEFAULT = gc.get_threshold()


def set_threshold(threshold: int) -> None:
    if threshold:
        gc.set_threshold(threshold, 10, 10)


class Collections:
    """Collections per generation, and the seconds they took, while ``counting``."""

    def __init__(self) -> None:
        self.counting = False
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.counting:
            generation = info["generation"]
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started


async def serve(raw: bool) -> None:
    async def handle(tcp: trio.SocketStream) -> None:
        if raw:
            await serve_stream(tcp)
        else:
            await mplex.serve_connection(serve_stream_modes, tcp, config=MANY_STREAMS)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
    print(f"READY {listeners[0].socket.getsockname()[1]}", flush=True)
    await trio.serve_listeners(handle, listeners)


async def client(port: int, conns: int, seconds: float, raw: bool) -> dict[str, Any]:
    collections = Collections()
    gc.callbacks.append(collections)
    requests, stop = 0, False
    try:
        async with trio.open_nursery() as nursery:
            peers: list[Any] = []
            for _ in range(conns):
                tcp = await trio.open_tcp_stream("127.0.0.1", port)
                if raw:
                    await tcp.send_all(b"E")  # the server's echo mode
                    peers.append(tcp)
                else:
                    muxer = mplex.Muxer(tcp, MANY_STREAMS)
                    await nursery.start(muxer.run)
                    peers.append(muxer)
            request = raw_request if raw else mplex_request

            async def loop(peer: Any) -> None:
                nonlocal requests
                while not stop:
                    await request(peer)
                    requests += 1

            async with trio.open_nursery() as loops:
                for peer in peers:
                    loops.start_soon(loop, peer)
                await trio.sleep(WARMUP)
                requests, collections.counting = 0, True
                with spent() as took:
                    await trio.sleep(seconds)
                    stop, collections.counting = True, False
                done = requests
            for peer in peers:
                await peer.aclose()
    finally:
        gc.callbacks.remove(collections)
    return {
        "req_s": done / took.wall,
        "cpu_us": took.cpu / done * 1e6,
        "count": collections.count,
        "gc_share": sum(collections.seconds) / took.cpu,
    }


def one_run(threshold: int, conns: int, seconds: float, raw: bool) -> dict[str, Any]:
    args = ["-m", "benchmarks.gc_probe", "--serve", "--thresholds", str(threshold)]
    with server(*args, *(["--raw"] if raw else [])) as (_, port):
        set_threshold(threshold)
        try:
            return trio.run(client, port, conns, seconds, raw)
        finally:
            gc.set_threshold(*DEFAULT)


def row(cells: tuple[str, ...]) -> str:
    return "  ".join(f"{cell:>{width}}" for cell, width in zip(cells, WIDTHS, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conns", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--thresholds", type=int, nargs="+", default=[0, 100_000])
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--raw", action="store_true", help="raw trio connections instead of mplex")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    raise_open_files_limit(args.conns + 1000)
    if args.serve:
        set_threshold(args.thresholds[0])
        trio.run(serve, args.raw)
        return
    what = "raw trio connections" if args.raw else "mplex connections"
    print(f"{args.conns:,} {what}, a request loop each; {args.seconds:g} s a run, {args.turns} turns")
    print(row(("threshold", "req/s", "client CPU/req", "collections (gen 0/1/2)", "GC share of CPU")))
    for _ in range(args.turns):
        for threshold in args.thresholds:
            got = one_run(threshold, args.conns, args.seconds, args.raw)
            name = str(threshold) if threshold else f"{DEFAULT[0]} (default)"
            cells = (
                name,
                f"{got['req_s']:,.0f}",
                f"{got['cpu_us']:.1f} us",
                "/".join(str(n) for n in got["count"]),
                f"{got['gc_share']:.1%}",
            )
            print(row(cells), flush=True)


if __name__ == "__main__":
    main()
