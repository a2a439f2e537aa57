"""Where a 32 B round trip's time goes: task steps, I/O waits and CPU per round trip.

Runs sequential 32 B round trips against ``python -m mplex._bench.peer server`` (its
echo) over TCP or TLS, with mplex (socket fast path on or off) or a raw stream, and
counts with a trio Instrument in the client: task steps per task, I/O waits, the time
spent blocked in them, and the client's CPU time, all per round trip.

    python -m benchmarks.probe_round_trip [--tls] [--count N]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

import trio

import mplex
from mplex._bench.channel import secured, tls_context

ROOT = Path(__file__).resolve().parent.parent


class Count(trio.abc.Instrument):
    """Task steps by task name, I/O waits and the time spent in them."""

    def __init__(self) -> None:
        self.steps: collections.Counter[str] = collections.Counter()
        self.io_waits = 0
        self.blocked = 0.0
        self._since = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        name = task.name
        self.steps[name.split(" ")[1] if name.startswith("mplex ") else "client"] += 1

    def before_io_wait(self, timeout: float) -> None:
        self.io_waits += 1
        self._since = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        self.blocked += time.perf_counter() - self._since


async def client(port: int, impl: str, tls: bool, count: int) -> str:
    raw = await trio.open_tcp_stream("127.0.0.1", port)
    transport = await secured(raw, tls_context(server_side=False) if tls else None, server_side=False)
    ping = b"p" * 32

    async def round_trips(stream: trio.abc.Stream) -> None:
        for _ in range(count):
            await stream.send_all(ping)
            got = 0
            while got < len(ping):
                got += len(await stream.receive_some())

    counter = Count()
    if impl == "raw":
        await transport.send_all(b"DE")  # the dispatcher's "data connection", then echo
        await round_trips(transport)  # warm up
        trio.lowlevel.add_instrument(counter)
        cpu, wall = time.process_time(), time.perf_counter()
        await round_trips(transport)
    else:
        config = mplex.Config(socket_fast_path=impl == "mplex")
        async with mplex.open_muxer(transport, config) as muxer:
            stream = await muxer.open_stream()
            await stream.send_all(b"E")
            await round_trips(stream)  # warm up
            trio.lowlevel.add_instrument(counter)
            cpu, wall = time.process_time(), time.perf_counter()
            await round_trips(stream)
            trio.lowlevel.remove_instrument(counter)
            await stream.send_eof()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    per = {name: round(n / count, 1) for name, n in sorted(counter.steps.items())}
    return (
        f"{impl:13} {wall / count * 1e6:6.0f} us a round trip; client CPU {cpu / count * 1e6:4.0f} us, "
        f"blocked {counter.blocked / count * 1e6:4.0f} us, {counter.io_waits / count:.1f} I/O waits, "
        f"task steps {per}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tls", action="store_true", help="TLS 1.3 over the TCP connection")
    parser.add_argument("--count", type=int, default=3000, help="round trips per implementation")
    args = parser.parse_args()
    impls = ["raw", "mplex", "mplex generic"] if not args.tls else ["raw", "mplex generic"]
    for impl in impls:
        options = ["--impl", "raw" if impl == "raw" else "mplex", "--tls", "1" if args.tls else "0"]
        options += ["--fast-path", "1" if impl == "mplex" else "0"]
        command = [sys.executable, "-m", "mplex._bench.peer", "server", *options]
        server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline().split()[1])
            print(trio.run(client, port, impl, args.tls, args.count))
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
