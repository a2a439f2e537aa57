"""Where an exchange's time goes: task steps, I/O waits and CPU per exchange.

    python -m benchmarks.anatomy round-trip [--tls] [--count N]
    python -m benchmarks.anatomy reqresp

``round-trip``: sequential 32 B round trips against the benchmark peer's echo
(``python -m mplex._bench.peer server``) over TCP or TLS, with mplex (socket fast path
on and off) and a raw stream; per round trip: the time, the client's CPU, the time it
spent blocked in I/O waits, and its task steps by task.

``reqresp``: the suite's request/response workload (100 workers x 200 requests, a
stream per request: open, 32 B, half-close, the 32 B reply to EOF) against the
benchmark server, over mplex and over 100 raw connections; per request: the client's
and the server's CPU, and the client's task steps (counted in a separate run).
"""

from __future__ import annotations

import argparse

import trio

import mplex
from mplex._bench import peer
from mplex._bench.channel import process_cpu, secured, tls_context

from ._measure import TaskSteps, counting, mplex_task_group, per, server, spent

WORKERS = 100
REQUESTS_EACH = 200


async def round_trips(port: int, impl: str, tls: bool, count: int) -> str:
    raw = await trio.open_tcp_stream("127.0.0.1", port)
    transport = await secured(raw, tls_context(server_side=False) if tls else None, server_side=False)
    ping = b"p" * 32

    async def exchange(stream: trio.abc.Stream) -> None:
        for _ in range(count):
            await stream.send_all(ping)
            got = 0
            while got < len(ping):
                got += len(await stream.receive_some())

    steps = TaskSteps(mplex_task_group)
    if impl == "raw":
        await transport.send_all(b"DE")  # the dispatcher's "data connection", then echo
        await exchange(transport)  # warm up
        with counting(steps), spent() as took:
            await exchange(transport)
    else:
        async with mplex.open_muxer(transport, mplex.Config(socket_fast_path=impl == "mplex")) as muxer:
            stream = await muxer.open_stream()
            await stream.send_all(b"E")
            await exchange(stream)  # warm up
            with counting(steps), spent() as took:
                await exchange(stream)
            await stream.send_eof()
    return (
        f"{impl:13} {took.wall / count * 1e6:6.0f} us a round trip; client CPU "
        f"{took.cpu / count * 1e6:4.0f} us, blocked {steps.blocked / count * 1e6:4.0f} us, "
        f"{steps.io_waits / count:.1f} I/O waits, task steps {per(steps.steps, count)}"
    )


def round_trip_main(args: argparse.Namespace) -> None:
    impls = ["raw", "mplex", "mplex generic"] if not args.tls else ["raw", "mplex generic"]
    for impl in impls:
        options = ["--impl", "raw" if impl == "raw" else "mplex", "--tls", "1" if args.tls else "0"]
        options += ["--fast-path", "1" if impl == "mplex" else "0"]
        with server("-m", "mplex._bench.peer", "server", *options) as (_, port):
            print(trio.run(round_trips, port, impl, args.tls, args.count), flush=True)


async def requests(impl: str, pid: int, port: int) -> str:
    client = peer.Client(impl, port)
    total = WORKERS * REQUESTS_EACH
    workload = argparse.Namespace(streams=WORKERS, count=REQUESTS_EACH, per_request=0)

    async def measure() -> str:
        await peer.case_reqresp(client, argparse.Namespace(streams=WORKERS, count=5, per_request=0))
        server_before = process_cpu(pid)
        with spent() as took:
            result = await peer.case_reqresp(client, workload)
        server_cpu = process_cpu(pid) - server_before
        with counting(TaskSteps()) as steps:
            await peer.case_reqresp(client, workload)
        return (
            f"{impl:5}  {total / result['seconds']:8,.0f} req/s   CPU per request: client "
            f"{took.cpu / total * 1e6:5.1f} us, server {server_cpu / total * 1e6:5.1f} us   "
            f"client task steps per request: {steps.total / total:.1f}"
        )

    if impl == "mplex":
        async with mplex.open_muxer(await client.connect()) as muxer:
            client.muxer = muxer
            return await measure()
    line = await measure()
    await client.finish()
    return line


def reqresp_main(args: argparse.Namespace) -> None:
    for impl in ("mplex", "raw"):
        with server("-m", "mplex._bench.peer", "server", "--impl", impl) as (child, port):
            print(trio.run(requests, impl, child.pid, port), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    workloads = parser.add_subparsers(dest="workload", required=True)
    trips = workloads.add_parser("round-trip", help="sequential 32 B round trips")
    trips.add_argument("--tls", action="store_true", help="TLS 1.3 over the TCP connection")
    trips.add_argument("--count", type=int, default=3000, help="round trips per implementation")
    trips.set_defaults(run=round_trip_main)
    workloads.add_parser("reqresp", help="the request/response case").set_defaults(run=reqresp_main)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
