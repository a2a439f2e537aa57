"""The receiving side alone, for an A/B of two checkouts: a raw sender writes mplex
frames of one size, encoded beforehand, over TCP or TLS; the receiver sinks them
through mplex from each checkout in turns, and prints its throughput and CPU time.

    python -m benchmarks.probe_large_frames OTHER_CHECKOUT [--frame BYTES] [--tls] [--turns N] [--mib N]

Frames of 1 MiB are what js-libp2p and go-mplex peers send in bulk (our own sender's
are at most ``Config.max_send_frame_size``, 64 KiB by default).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

#: MiB a run moves unless ``--mib`` says otherwise.
DEFAULT_MIB = 256


def _mplex_from(checkout: str) -> None:
    sys.path.insert(0, checkout)


async def _open(port: int, tls: bool) -> trio.abc.Stream:
    from mplex._bench.channel import tls_context

    stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
    if tls:
        stream = trio.SSLStream(stream, tls_context(server_side=False))
    return stream


async def send(port: int, frame: int, tls: bool, total: int) -> None:
    """The raw sender: NewStream, then ``total`` bytes in Message frames of ``frame`` bytes."""
    from mplex import Encoder, Flag

    stream = await _open(port, tls)
    encoder = Encoder(frame)
    await stream.send_all(encoder.frame(0, Flag.NEW_STREAM, b"0"))
    data = encoder.frame(0, Flag.MESSAGE_INITIATOR, os.urandom(frame))
    for _ in range(total // frame):
        await stream.send_all(data)
    await stream.receive_some(1)


async def receive(checkout: str, frame: int, tls: bool, total: int) -> tuple[float, float]:
    """One run: (MB/s, receiver CPU seconds)."""
    import mplex
    from mplex._bench.channel import tls_context

    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    args = [sys.executable, "-m", "benchmarks.probe_large_frames", checkout, "--send", str(port)]
    options = ["--frame", str(frame), "--mib", str(total >> 20), *(["--tls"] if tls else [])]
    sender = subprocess.Popen([*args, *options])
    stream: trio.abc.Stream = await listener.accept()
    if tls:
        stream = trio.SSLStream(stream, tls_context(server_side=True), server_side=True)
    async with mplex.open_muxer(stream) as muxer:
        inbound = await muxer.accept_stream()
        got = 0
        cpu, wall = time.process_time(), time.perf_counter()
        while got < total:
            got += len(await inbound.receive_some())
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await inbound.send_all(b"k")
    sender.wait()
    return total / wall / 1e6, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", help="the other checkout (its mplex is the 'other' row)")
    parser.add_argument("--frame", type=int, default=1 << 20)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--mib", type=int, default=DEFAULT_MIB, help="MiB a run moves")
    parser.add_argument("--send", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--receive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.send is not None:
        _mplex_from(args.other)
        trio.run(send, args.send, args.frame, args.tls, args.mib << 20)
        return
    if args.receive is not None:
        _mplex_from(args.receive)
        rate, cpu = trio.run(receive, args.receive, args.frame, args.tls, args.mib << 20)
        print(f"{rate} {cpu}")
        return
    here = str(Path(__file__).resolve().parent.parent)
    checkouts = {"other": str(Path(args.other).resolve()), "this": here}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
    for _ in range(args.turns):
        for name, path in checkouts.items():
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.probe_large_frames",
                    path,
                    "--receive",
                    path,
                    "--frame",
                    str(args.frame),
                    "--mib",
                    str(args.mib),
                    *(["--tls"] if args.tls else []),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=here,
            ).stdout.split()
            results[name].append((float(out[0]), float(out[1])))
    print(
        f"{args.mib} MiB in {args.frame} B frames over {'TLS' if args.tls else 'TCP'}, "
        f"{args.turns} turns, medians:"
    )
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:5} {rate:7.0f} MB/s   receiver CPU {cpu * 1e3:6.0f} ms")


if __name__ == "__main__":
    main()
