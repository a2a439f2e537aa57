"""Where send_all's time goes beyond send_nowait plus a bare checkpoint.

    .venv/bin/python -m benchmarks.probe_send_all

One process, a muxer writing to a socket that a child process drains; 1,000,000 rounds
of each variant.  It shows that the append send_nowait makes costs several times more
when every call also passes through the scheduler (as in send_all) than in a tight
loop, which is why the target 'send_all <= 1.3 x (send_nowait + bare checkpoints)',
built from tight-loop times, sits at its limit.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import trio

import mplex

ROUNDS = 1_000_000
DRAIN = "import socket, sys\ns = socket.socket(fileno=int(sys.argv[1]))\nwhile s.recv(1 << 20):\n    pass"


async def main() -> None:
    ours, theirs = socket.socketpair()
    drain = subprocess.Popen([sys.executable, "-c", DRAIN, str(theirs.fileno())], pass_fds=[theirs.fileno()])
    theirs.close()
    transport = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    chunk = b"x" * 32
    checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
    yield_ = trio.lowlevel.cancel_shielded_checkpoint
    async with mplex.open_muxer(transport) as muxer:
        stream = await muxer.open_stream()
        send_nowait = stream.send_nowait

        async def tight() -> None:
            for _ in range(ROUNDS):
                try:
                    send_nowait(chunk)
                except trio.WouldBlock:
                    await stream.wait_send_all_might_not_block()

        async def yields() -> None:
            for _ in range(ROUNDS):
                await yield_()

        async def nowait_and_yield() -> None:
            for _ in range(ROUNDS):
                send_nowait(chunk)
                await yield_()

        async def as_send_all() -> None:
            for _ in range(ROUNDS):
                await checkpoint_if_cancelled()
                send_nowait(chunk)
                await yield_()

        async def send_all() -> None:
            for _ in range(ROUNDS):
                await stream.send_all(chunk)

        for variant in (tight, yields, nowait_and_yield, as_send_all, send_all):
            start = time.perf_counter()
            await variant()
            print(f"{variant.__name__:18} {time.perf_counter() - start:6.2f} s")
    drain.wait()


if __name__ == "__main__":
    trio.run(main)
