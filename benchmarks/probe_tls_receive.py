"""Which side limits bulk transfers over TLS, and how fast the receiving side runs.

A sender process writes 384 MiB in 64 KiB sends over TLS 1.3 on 127.0.0.1 to this
process, which receives it with a raw ``trio.SSLStream`` or through mplex (generic
path); each is run three times, in turns.  Prints the receiver's throughput and how
busy its CPU was (near 100%: the receiver is the limit).

    python -m benchmarks.probe_tls_receive
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import trio

import mplex
from mplex._bench.channel import tls_context

SIZE = 64 * 1024
TOTAL = 384 * 1024 * 1024


async def send(port: int, impl: str) -> None:
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    tls = trio.SSLStream(tcp, tls_context(server_side=False))
    await tls.do_handshake()
    data = os.urandom(SIZE)
    if impl == "raw":
        for _ in range(TOTAL // SIZE):
            await tls.send_all(data)
        await tls.receive_some(1)
        return
    async with mplex.open_muxer(tls, mplex.Config(socket_fast_path=False)) as muxer:
        stream = await muxer.open_stream()
        for _ in range(TOTAL // SIZE):
            await stream.send_all(data)
        await stream.receive_some(1)


async def receive(impl: str) -> str:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    sender = subprocess.Popen([sys.executable, "-m", "benchmarks.probe_tls_receive", "send", impl, str(port)])
    tls = trio.SSLStream(await listener.accept(), tls_context(server_side=True), server_side=True)
    await tls.do_handshake()
    got = 0
    cpu, wall = time.process_time(), time.perf_counter()
    if impl == "raw":
        while got < TOTAL:
            got += len(await tls.receive_some(1 << 20))
        await tls.send_all(b"k")
    else:
        async with mplex.open_muxer(tls, mplex.Config(socket_fast_path=False)) as muxer:
            stream = await muxer.accept_stream()
            while got < TOTAL:
                got += len(await stream.receive_some())
            await stream.send_all(b"k")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sender.wait()
    return f"{impl:5} receiver {TOTAL / wall / 1e6:5.0f} MB/s, its CPU busy {cpu / wall:4.0%}"


def main() -> None:
    if sys.argv[1:2] == ["send"]:
        trio.run(send, int(sys.argv[3]), sys.argv[2])
        return
    for _ in range(3):
        for impl in ("raw", "mplex"):
            print(trio.run(receive, impl))


if __name__ == "__main__":
    main()
