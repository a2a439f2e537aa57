"""Instructions per request of the request/response workload, counted by callgrind:
a figure that does not move with the machine's load, for A/B of the per-request path.

    python -m benchmarks.instructions [OTHER_CHECKOUT ...] [--workload reqresp]

Both sides run in one process over a socketpair (the socket fast path): 100 workers,
each request a new stream (open, 32 B, half-close, the 32 B echo read to EOF, close),
served by ``serve_connection`` (a handler per stream, in its reused tasks), as in the benchmark's
request/response case.  The program runs twice under ``valgrind --tool=callgrind``,
with 10 and 30 requests per worker; the difference over the 2,000 extra requests is
the figure, so start-up and imports drop out.  ``--workload fanout`` counts 1 KiB
sends on 100 streams instead, ``--workload send-all`` 32 B ``send_all`` calls on one, and
``--workload conns`` the many-connections shape: 10 connections (socketpairs), each
with one loop of requests, a stream per request, as in "100 connections, a request
loop each"; ``--workload conns-floor`` the same loops through the floor with a
checkpoint per stream call (``mplex._bench.many_peer``), what any mplex offering
trio's stream API must at least execute.

Each checkout named runs with its own code (its directory first on ``PYTHONPATH``),
after this one.  Timing still steers a few choices (the writer's quiet spell, its
flush delay), so two runs of the same code differ by up to about 0.5%.
Needs ``valgrind`` (Debian's package); a run takes about 40 s.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

import mplex
from mplex._bench import peer
from mplex._bench.many_peer import mplex_request
from mplex._bench.server import MANY_STREAMS, serve_mplex

try:
    from mplex._bench.floor import API_CHECKPOINTS, FloorConnection, serve_floor
except ImportError:  # a checkout from before the floors had a module of their own
    from mplex._bench.many_peer import API_CHECKPOINTS, FloorConnection, serve_floor  # type: ignore[attr-defined]

#: This checkout (the script runs as a file under callgrind, with another checkout's
#: ``mplex`` first on the path, so it imports the measuring helper only when counting).
CHECKOUT = Path(__file__).resolve().parent.parent

#: Requests (or sends) per worker of the two runs whose difference is counted.
SHORT, LONG = 10, 30
WORKERS = 100
#: Connections of the ``conns`` workload.
CONNECTIONS = 10


async def reqresp(count: int) -> None:
    a, b = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_mplex, trio.SocketStream(b))
        client = peer.Client("mplex", 0)
        async with mplex.open_muxer(trio.SocketStream(a)) as muxer:
            client.muxer = muxer
            await peer.case_reqresp(client, argparse.Namespace(streams=WORKERS, count=count, per_request=0))


async def conns(count: int, floor: bool) -> None:
    """``CONNECTIONS`` connections, each with one loop of ``count`` requests: through
    this library, or (``floor``) through the floor with a checkpoint per stream call."""
    async with trio.open_nursery() as nursery:
        clients: list[Any] = []
        for _ in range(CONNECTIONS):
            a, b = trio.socket.socketpair()
            if floor:
                nursery.start_soon(serve_floor, trio.SocketStream(b), API_CHECKPOINTS["server"])
                clients.append(FloorConnection(trio.SocketStream(a), API_CHECKPOINTS["client"]))
            else:
                nursery.start_soon(serve_mplex, trio.SocketStream(b))
                muxer = mplex.Muxer(trio.SocketStream(a), MANY_STREAMS)
                await nursery.start(muxer.run)
                clients.append(muxer)
        request = FloorConnection.request if floor else mplex_request

        async def loop(client: Any) -> None:
            for _ in range(count):
                await request(client)

        async with trio.open_nursery() as loops:
            for client in clients:
                loops.start_soon(loop, client)
        for client in clients:
            await client.aclose()


async def sends(count: int, size: int, streams: int) -> None:
    a, b = trio.socket.socketpair()
    left_transport, right_transport = trio.SocketStream(a), trio.SocketStream(b)
    async with mplex.open_muxer(left_transport) as left, mplex.open_muxer(right_transport) as right:

        async def one() -> None:
            stream = await left.open_stream()
            peer_stream = await right.accept_stream()

            async def drain() -> None:
                got = 0
                while got < count * size:
                    got += len(await peer_stream.receive_some())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain)
                chunk = b"x" * size
                for _ in range(count):
                    await stream.send_all(chunk)

        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(one)


def run_workload(workload: str, count: int) -> None:
    if workload == "reqresp":
        trio.run(reqresp, count)
    elif workload.startswith("conns"):
        trio.run(conns, count * 10, workload == "conns-floor")
    elif workload == "fanout":
        trio.run(sends, count * 2, 1024, WORKERS)
    else:
        trio.run(sends, count * 2000, 32, 1)


def units(workload: str) -> int:
    """Requests or sends that the long run adds to the short one."""
    if workload == "send-all":
        return (LONG - SHORT) * 2000
    if workload.startswith("conns"):
        return (LONG - SHORT) * 10 * CONNECTIONS
    return (LONG - SHORT) * WORKERS * (2 if workload == "fanout" else 1)


def instructions(checkout: Path, workload: str, count: int) -> int:
    # This script, importing the checkout's mplex, under callgrind.
    from benchmarks._measure import python

    script = str(Path(__file__).resolve())
    callgrind = ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null")
    child = python(
        script, "--run", workload, str(count), checkout=checkout, under=callgrind, stderr=subprocess.PIPE
    )
    _, errors = child.communicate()
    found = re.search(r"Collected : (\d+)", errors)
    if child.returncode or found is None:
        raise RuntimeError(f"callgrind printed no count:\n{errors[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("others", nargs="*", type=Path, help="other checkouts to count too")
    workloads = ["reqresp", "fanout", "send-all", "conns", "conns-floor"]
    parser.add_argument("--workload", choices=workloads, default="reqresp")
    parser.add_argument("--run", nargs=2, metavar=("WORKLOAD", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run_workload(args.run[0], int(args.run[1]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt install valgrind)")
    unit = {
        "reqresp": "request (both sides)",
        "conns": "request (both sides)",
        "conns-floor": "request (both sides)",
        "fanout": "1 KiB send",
        "send-all": "32 B send_all",
    }
    for checkout in [CHECKOUT, *args.others]:
        short = instructions(checkout.resolve(), args.workload, SHORT)
        long = instructions(checkout.resolve(), args.workload, LONG)
        per = (long - short) / units(args.workload)
        print(f"{checkout}: {per:,.0f} instructions per {unit[args.workload]}", flush=True)


if __name__ == "__main__":
    main()
