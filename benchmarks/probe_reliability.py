"""Issue 25's reproductions as figures, for this checkout or an older one.

    .venv/bin/python -m benchmarks.probe_reliability
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/probe_reliability.py

Uses only the public API that every version has, so the same file measures the code
before a change and after it.  Each probe runs in a child process with a time limit
(the code before could hang for ever), and prints one line:

* ``send_all``: a peer that stops reading; each ``send_all(1000 B)`` runs under
  ``move_on_after(0.5)`` after a quiet spell; how long the one that was cancelled
  took, over TCP with the socket path, the generic path, and TLS;
* ``freed``: 13 connections that each end holding 4 MiB unread, the cyclic garbage
  collector off: memory still allocated (tracemalloc) once the program drops them;
* ``flood``: a peer resets its stream, then sends 2,097,152 Close frames for it: our
  reader's CPU time, and whether the connection was cut.
"""

from __future__ import annotations

import gc
import socket
import ssl
import subprocess
import sys
import time
import tracemalloc

import trio
import trio.testing

import mplex

LIMIT = 30.0


async def _tcp_pair(buffer: int) -> tuple[trio.SocketStream, trio.SocketStream]:
    listener = trio.socket.socket()
    client = trio.socket.socket()
    for sock in (listener, client):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    return trio.SocketStream(client), trio.SocketStream(server)


async def send_all_probe(kind: str) -> str:
    ours, theirs = await _tcp_pair(4096)
    transport: trio.abc.Stream = ours
    config = mplex.Config(socket_fast_path=kind == "tcp")
    if kind == "tls":
        import trustme

        ca = trustme.CA()
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_context)
        client_context = ssl.create_default_context()
        ca.configure_trust(client_context)
        transport = trio.SSLStream(ours, client_context, server_hostname="127.0.0.1")
        far = trio.SSLStream(theirs, server_context, server_side=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(far.do_handshake)
            await transport.do_handshake()
    async with mplex.open_muxer(transport, config) as muxer:
        stream = await muxer.open_stream()
        for _ in range(10_000):
            await trio.sleep(0.002)  # a quiet link, the writer task parked: as a reply
            start = time.monotonic()
            with trio.move_on_after(0.5) as scope:
                await stream.send_all(b"x" * 1000)
            if scope.cancelled_caught:
                took = time.monotonic() - start
                return f"send_all {kind}: the cancelled send_all returned after {took:.2f} s"
        return f"send_all {kind}: never blocked"


async def freed_probe() -> str:
    gc.disable()
    tracemalloc.start()
    baseline = 0
    for connection in range(14):  # the first warms up what lives for the process
        if connection == 1:
            baseline = tracemalloc.get_traced_memory()[0]
        a, b = trio.testing.memory_stream_pair()
        async with mplex.open_muxer(a) as left, mplex.open_muxer(b) as right:
            stream = await left.open_stream()
            await stream.send_all(b"x" * (4 << 20))
            accepted = await right.accept_stream()
            await trio.testing.wait_all_tasks_blocked()
            del accepted, stream
    del a, b, left, right
    held = tracemalloc.get_traced_memory()[0] - baseline
    return f"freed: {held / 2**20:.1f} MiB still allocated after 13 connections of 4 MiB ended (gc off)"


async def flood_probe() -> str:
    ours, theirs = trio.testing.memory_stream_pair()
    ended = trio.Event()
    flood = b"\x00\x00" + b"\x06\x00" + b"\x04\x00" * 2_097_152  # NewStream 0, Reset, Closes

    async def serve(muxer: mplex.Muxer) -> None:
        try:
            async for stream in muxer:
                await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        ended.set()

    async with mplex.open_muxer(ours) as muxer, trio.open_nursery() as nursery:
        nursery.start_soon(serve, muxer)
        started = time.process_time()
        try:
            await theirs.send_all(flood)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await trio.testing.wait_all_tasks_blocked()  # the reader has taken in all it will
        cpu = time.process_time() - started
        verdict = "cut" if ended.is_set() else "still open"
        nursery.cancel_scope.cancel()
    return f"flood: {cpu:.2f} s of CPU for the 2,097,152 Closes; the connection was {verdict}"


PROBES = {
    "send_all tcp": lambda: send_all_probe("tcp"),
    "send_all generic": lambda: send_all_probe("generic"),
    "send_all tls": lambda: send_all_probe("tls"),
    "freed": freed_probe,
    "flood": flood_probe,
}


def main() -> None:
    if len(sys.argv) > 1:
        print(trio.run(PROBES[sys.argv[1]]))
        return
    for name in PROBES:
        try:
            done = subprocess.run(
                [sys.executable, __file__, name], capture_output=True, text=True, timeout=LIMIT, check=False
            )
            print(done.stdout.strip() or f"{name}: failed: {done.stderr.strip().splitlines()[-1:]}")
        except subprocess.TimeoutExpired:
            print(f"{name}: still running after {LIMIT:g} s (killed)")


if __name__ == "__main__":
    main()
