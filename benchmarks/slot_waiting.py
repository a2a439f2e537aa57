"""Requests from a task each, beyond ``Config.max_outbound_streams``: the library's own
waiting for a stream slot against the same program bounded by its own semaphore.

    python -m benchmarks.slot_waiting [--requests N] [--turns N]

Both muxers run in this process over a memory stream; each request opens a stream,
sends 1 byte, half-closes, reads the echo to its end and closes.  With the library
waiting, every task beyond the limit waits in ``open_stream``; with the semaphore, in
``trio.Semaphore(max_outbound_streams)``.  Prints the seconds of each, in turns.
"""

from __future__ import annotations

import argparse

import trio

import mplex
import mplex.testing

from ._measure import spent


async def requests(count: int, own_semaphore: bool) -> float:
    async with mplex.testing.open_muxer_pair() as (client, server):
        limit = trio.Semaphore(client.config.max_outbound_streams)

        async def echo(stream: mplex.MplexStream) -> None:
            await stream.send_all(await stream.receive_some())
            await stream.aclose()

        async def one() -> None:
            stream = await client.open_stream()
            await stream.send_all(b"q")
            await stream.send_eof()
            while await stream.receive_some():
                pass
            await stream.aclose()

        async def request() -> None:
            if own_semaphore:
                async with limit:
                    await one()
            else:
                await one()

        async with trio.open_nursery() as nursery:

            async def serve() -> None:
                async for stream in server:
                    nursery.start_soon(echo, stream)

            nursery.start_soon(serve)
            with spent() as took:
                async with trio.open_nursery() as tasks:
                    for _ in range(count):
                        tasks.start_soon(request)
            nursery.cancel_scope.cancel()
    return took.wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16_000, help="requests, a task each")
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.turns):
        for own in (False, True):
            seconds = trio.run(requests, args.requests, own)
            what = "its own semaphore" if own else "mplex's slot waiting"
            print(f"{args.requests:,} requests, {what:21}: {seconds:6.2f} s", flush=True)


if __name__ == "__main__":
    main()
