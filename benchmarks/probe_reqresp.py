"""Where the request/response case's time goes, per request, on each side.

    .venv/bin/python -m benchmarks.probe_reqresp

Runs the benchmark's request/response workload (100 workers, 20,000 requests) against
the benchmark server as a child process, once over mplex and once over 100 raw
connections, and prints per request: the client's CPU time, the server's CPU time,
and the client's scheduler steps (task steps counted by a trio instrument, during a
separate run).  A stream per request costs open, send, close, read to EOF and
aclose, each a trio checkpoint, and a task on the server; a persistent raw
connection costs one send and one receive.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import trio

import mplex
from mplex._bench import peer

WORKERS = 100
REQUESTS_EACH = 200


class StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 10 ms


async def probe(impl: str) -> str:
    server = subprocess.Popen(
        [sys.executable, "-m", "mplex._bench.peer", "server", "--impl", impl],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        return await probe_against(impl, server)
    finally:
        if server.poll() is None:  # we failed before telling it to stop
            server.kill()
            server.wait()


async def probe_against(impl: str, server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None
    client = peer.Client(impl, int(server.stdout.readline().split()[1]))
    requests = WORKERS * REQUESTS_EACH
    args = argparse.Namespace(streams=WORKERS, count=REQUESTS_EACH, per_request=0)

    async def measure() -> str:
        warm_up = argparse.Namespace(streams=WORKERS, count=5, per_request=0)
        await peer.case_reqresp(client, warm_up)
        server_before, client_before = process_cpu(server.pid), time.process_time()
        result = await peer.case_reqresp(client, args)
        client_cpu = time.process_time() - client_before
        server_cpu = process_cpu(server.pid) - server_before
        counter = StepCounter()
        trio.lowlevel.add_instrument(counter)
        await peer.case_reqresp(client, args)
        trio.lowlevel.remove_instrument(counter)
        return (
            f"{impl:5}  {requests / result['seconds']:8,.0f} req/s   CPU per request: client "
            f"{client_cpu / requests * 1e6:5.1f} us, server {server_cpu / requests * 1e6:5.1f} us   "
            f"client task steps per request: {counter.steps / requests:.1f}"
        )

    if impl == "mplex":
        async with mplex.open_muxer(await client.connect()) as muxer:
            client.muxer = muxer
            line = await measure()
    else:
        line = await measure()
        await client.finish()
    server.wait()
    return line


def main() -> None:
    for impl in ("mplex", "raw"):
        print(trio.run(probe, impl), flush=True)


if __name__ == "__main__":
    main()
