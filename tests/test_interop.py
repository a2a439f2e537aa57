"""Byte-level interoperability with js-libp2p's and py-libp2p's mplex, in both roles.

The far ends are the benchmark peers (benchmarks/js/peer.mjs: @libp2p/mplex 12 over a
TCP socket; benchmarks/pylibp2p_peer.py: py-libp2p 0.8's Mplex).  They speak a tiny
protocol on each stream: the first byte chooses sink ("S": read to EOF, answer the
byte count as 8 big-endian bytes, close) or echo ("E").  Talking to real peers is what
catches symmetric bugs (flag parity, varint details) that a test against ourselves
cancels out.  A missing node or py-libp2p fails these tests: `make test` installs both.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import trio

import mplex
from mplex._bench.peer import serve_mplex
from mplex._bench.suite import pylibp2p_python

ROOT = Path(__file__).resolve().parent.parent
JS_PEER = ROOT / "benchmarks" / "js" / "peer.mjs"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


async def start_peer_server(command: list[str], nursery: trio.Nursery) -> tuple[trio.Process, int]:
    """Start a peer's server process; return it and the port it printed."""
    process: trio.Process = await nursery.start(
        lambda task_status: trio.run_process(  # type: ignore[misc]
            command, stdout=subprocess.PIPE, env=ENV, check=False, task_status=task_status
        )
    )
    assert process.stdout is not None
    line = b""
    with trio.fail_after(30):
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
    assert line.startswith(b"READY "), line
    return process, int(line.split()[1])


async def run_js_client(args: list[str]) -> dict[str, object]:
    """Run the js peer as a client; it checks every count we answer.  Its report."""
    with trio.fail_after(60):
        result = await trio.run_process(
            ["node", str(JS_PEER), "client", *args], capture_stdout=True, capture_stderr=True, check=False
        )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    report: dict[str, object] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return report


@contextlib.asynccontextmanager
async def our_server() -> AsyncIterator[int]:
    """Serve one inbound mplex connection (sink/echo streams) on a port we yield."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listeners[0], trio.open_nursery() as nursery:

        async def serve_one() -> None:
            await serve_mplex(await listeners[0].accept())

        nursery.start_soon(serve_one)
        yield listeners[0].socket.getsockname()[1]


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while data := await stream.receive_some():
        chunks.append(data)
    return b"".join(chunks)


async def echo_through(muxer: mplex.Muxer, payload: bytes) -> bytes:
    stream = await muxer.open_stream()
    async with trio.open_nursery() as nursery:

        async def send() -> None:
            await stream.send_all(b"E")
            for start in range(0, len(payload), 50_000):
                await stream.send_all(payload[start : start + 50_000])
            await stream.send_eof()

        nursery.start_soon(send)
        return await read_all(stream)


async def sink_through(muxer: mplex.Muxer, payload: bytes) -> int:
    stream = await muxer.open_stream()
    await stream.send_all(b"S" + payload)
    await stream.send_eof()
    return int.from_bytes(await read_all(stream), "big")


class TestJsLibp2p:
    async def test_we_dial_js_and_every_stream_echoes_byte_for_byte(self) -> None:
        rng = random.Random(7)
        payloads = [rng.randbytes(rng.choice([0, 1, 1000, rng.randrange(300_000)])) for _ in range(60)]
        async with trio.open_nursery() as nursery:
            _process, port = await start_peer_server(["node", str(JS_PEER), "server"], nursery)
            transport = await trio.open_tcp_stream("127.0.0.1", port)
            results: dict[int, bytes] = {}
            with trio.fail_after(60):
                async with mplex.open_muxer(transport) as muxer, trio.open_nursery() as streams:

                    async def one(index: int) -> None:
                        results[index] = await echo_through(muxer, payloads[index])

                    for index in range(len(payloads)):
                        streams.start_soon(one, index)
            assert [results[i] == payloads[i] for i in range(len(payloads))] == [True] * len(payloads)

    async def test_js_dials_us_and_its_counts_match(self) -> None:
        async with our_server() as port:
            args = [
                "--port",
                str(port),
                "--case",
                "fanout",
                "--streams",
                "20",
                "--size",
                "1000",
                "--count",
                "50",
            ]
            report = await run_js_client(args)
            assert report["bytes"] == 20 * 50 * 1000  # js checked every count we sent back

    async def test_frames_of_exactly_one_mebibyte_cross_both_ways(self) -> None:
        """js splits large writes into 1 MiB frames (its maxMessageSize); we must accept
        them, and js must accept ours when we send frames of exactly the limit."""
        async with our_server() as port:
            args = ["--port", str(port), "--case", "small", "--size", str(4 << 20), "--count", "2"]
            await run_js_client(args)
        payload = random.Random(5).randbytes(3 << 20)
        config = mplex.Config(max_send_frame_size=1 << 20)
        async with trio.open_nursery() as nursery:
            _process, port = await start_peer_server(["node", str(JS_PEER), "server"], nursery)
            transport = await trio.open_tcp_stream("127.0.0.1", port)
            with trio.fail_after(60):
                async with mplex.open_muxer(transport, config) as muxer:
                    assert await echo_through(muxer, payload) == payload


class TestPyLibp2p:
    async def test_we_dial_py_libp2p_and_it_counts_our_bytes(self) -> None:
        payload = random.Random(3).randbytes(300_000)
        async with trio.open_nursery() as nursery:
            command = [pylibp2p_python(), "-m", "benchmarks.pylibp2p_peer", "server"]
            _process, port = await start_peer_server(command, nursery)
            transport = await trio.open_tcp_stream("127.0.0.1", port)
            with trio.fail_after(60):
                async with mplex.open_muxer(transport) as muxer:
                    assert await sink_through(muxer, payload) == len(payload)

    async def test_py_libp2p_dials_us_and_its_count_matches(self) -> None:
        async with our_server() as port:
            command = [pylibp2p_python(), "-m", "benchmarks.pylibp2p_peer", "client", "--port", str(port)]
            with trio.fail_after(60):
                result = await trio.run_process(
                    [*command, "--size", "1000", "--count", "300"],
                    capture_stdout=True,
                    capture_stderr=True,
                    env=ENV,
                    check=False,
                )
            assert result.returncode == 0, result.stderr.decode()[-2000:]
            assert json.loads(result.stdout.decode().strip().splitlines()[-1])["bytes"] == 300_000
