"""Where the time of a 32 B write through a py-libp2p host goes (TCP + noise).

Two py-libp2p hosts with our mplex in one process; the same number of 32 B writes on
one stream, through three layers in turn, each timed to the receiver's count:

* ``NetStream.write``: what py-libp2p applications call;
* ``MplexMuxedStream.write``: our adapter, skipping ``NetStream``;
* ``MplexStream.send_all``: the muxer alone.

It also counts the secured connection's writes (noise messages).  Both hosts share
the process, so the numbers include the receiver's work: compare them with each
other, not with the two-process benchmark.

    .venv-bench/bin/python -m benchmarks.probe_host_writes [COUNT]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import trio
from libp2p.peer.peerinfo import info_from_p2p_addr

from benchmarks.libp2p_host_peer import LOOPBACK, SINK, make_host, read_to_eof, sink
from mplex.libp2p import SecuredConnectionStream


async def timed(count: int, write: Any, close: Any, stream: Any) -> float:
    chunk = b"x" * 32
    start = time.perf_counter()
    for _ in range(count):
        await write(chunk)
    await close()
    await read_to_eof(stream)
    return (time.perf_counter() - start) / count * 1e6


async def main(count: int) -> None:
    writes = {"messages": 0}
    original = SecuredConnectionStream.send_all

    async def counting(self: SecuredConnectionStream, data: Any) -> None:
        writes["messages"] += 1
        await original(self, data)

    SecuredConnectionStream.send_all = counting  # type: ignore[method-assign]
    server, client = make_host("ours"), make_host("ours")
    async with server.run(listen_addrs=[LOOPBACK]), client.run(listen_addrs=[LOOPBACK]):
        server.set_stream_handler(SINK, sink)
        await client.connect(info_from_p2p_addr(server.get_addrs()[0]))
        peer = server.get_id()
        for layer in ("NetStream.write", "MplexMuxedStream.write", "MplexStream.send_all"):
            stream = await client.new_stream(peer, [SINK])
            muxed = stream.muxed_stream
            write, close = {
                "NetStream.write": (stream.write, stream.close),
                "MplexMuxedStream.write": (muxed.write, muxed.close),
                "MplexStream.send_all": (muxed.stream.send_all, muxed.stream.send_eof),
            }[layer]
            writes["messages"] = 0
            per_write = await timed(count, write, close, stream)
            batch = count / max(1, writes["messages"])
            print(f"{layer:24} {per_write:6.1f} us a write, {batch:5.0f} writes a noise message")


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 32768)
