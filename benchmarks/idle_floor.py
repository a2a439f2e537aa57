"""What an idle connection holds, against the floor any muxer on trio must hold.

    python -m benchmarks.idle_floor [--conns N]

Both ends run in this process over 127.0.0.1 TCP, and Python's own allocator is
counted (``tracemalloc``, after a collection), so the figures are bytes of objects,
both sides of a connection together, and the machine's load does not move them.
Each shape holds ``N`` connections that have carried one byte each way:

* ``raw``: a trio ``SocketStream`` pair, the server's handler task waiting to read:
  a bare trio connection, as the suite's raw rows hold it;
* ``floor``: the same, and one task more on each side: on the client, a task waiting
  to read the connection (a muxer must read each connection all the time: the peer
  may open a stream or reset one at any moment); on the server, a task waiting as an
  open stream's handler does (the server's reader is the task ``raw`` has).  This is
  the least any mplex on trio holds for an idle connection with one open stream;
* ``mplex``: a ``Muxer`` against ``serve_connection``, one open stream each, its
  handler waiting to read (the configuration and the calls of the suite's idle
  cases).

Prints KB per connection, and what each holds beyond ``raw``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import tracemalloc

import trio
import trio.testing

import mplex
from mplex._bench.server import MANY_STREAMS

SHAPES = ("raw", "floor", "mplex")


async def _echo(stream: trio.abc.Stream) -> None:
    while data := await stream.receive_some():
        await stream.send_all(data)


async def held_bytes(shape: str, conns: int) -> float:
    """Bytes per connection (both ends) that ``conns`` idle connections of ``shape``
    hold, counted by tracemalloc."""
    async with trio.open_nursery() as nursery:

        async def serve(tcp: trio.SocketStream) -> None:
            if shape == "mplex":
                await mplex.serve_connection(_echo, tcp, config=MANY_STREAMS)
            elif shape == "floor":
                nursery.start_soon(trio.sleep_forever)  # the stream's handler, waiting
                await _echo(tcp)
            else:
                await _echo(tcp)

        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, serve, listeners)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        async with trio.open_nursery() as held, contextlib.AsyncExitStack() as stack:
            for _ in range(conns):
                tcp = await stack.enter_async_context(await trio.open_tcp_stream("127.0.0.1", port))
                stream: trio.abc.Stream = tcp
                if shape == "mplex":
                    muxer = mplex.Muxer(tcp, MANY_STREAMS)
                    await held.start(muxer.run)
                    stream = await muxer.open_stream()
                await stream.send_all(b".")
                await stream.receive_some(1)
                if shape == "floor":
                    held.start_soon(_waits_to_read, tcp)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            held.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    return (after - before) / conns


async def _waits_to_read(tcp: trio.SocketStream) -> None:
    """A task waiting to read ``tcp``, as a muxer's reader does."""
    await trio.lowlevel.wait_readable(tcp.socket)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conns", type=int, default=2000, help="connections held per shape")
    args = parser.parse_args(argv)
    figures = {shape: trio.run(held_bytes, shape, args.conns) for shape in SHAPES}
    raw = figures["raw"]
    print(f"{args.conns:,} idle connections, both ends in one process (tracemalloc)")
    for shape in SHAPES:
        held, extra = figures[shape] / 1024, (figures[shape] - raw) / 1024
        print(f"  {shape:6} {held:6.1f} KB per connection  (+{extra:.1f} KB beyond raw)")


if __name__ == "__main__":
    main()
