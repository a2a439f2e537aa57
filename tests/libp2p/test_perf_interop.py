"""The perf protocol inside py-libp2p hosts, both ways against py-libp2p 0.8.1's own
``PerfService``: our client against its server, its client against our server, over
TCP + noise, with our mplex on our side and py-libp2p's own on its side."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import multiaddr
import pytest
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.perf import PerfService

import mplex
from mplex.libp2p._perf import measure, serve_perf
from tests.libp2p.hosts import LOOPBACK, make_host

SIZES = pytest.mark.parametrize(
    ("upload", "download"), [(0, 0), (1, 1), (300_000, 0), (0, 300_000), (70_000, 90_000)]
)


def address_of(host: Any) -> str:
    return str(host.get_addrs()[0])


@SIZES
async def test_our_client_against_py_libp2p_perf_service(upload: int, download: int) -> None:
    ours, theirs = make_host("noise", "ours"), make_host("noise", "theirs")
    async with ours.run(listen_addrs=[LOOPBACK]), theirs.run(listen_addrs=[LOOPBACK]):
        service = PerfService(theirs)
        await service.start()
        with trio.fail_after(30):
            await ours.connect(info_from_p2p_addr(multiaddr.Multiaddr(address_of(theirs))))
            conn = ours.get_network().get_connections(theirs.get_id())[0].muxed_conn
            assert isinstance(conn, mplex.libp2p.MplexMuxedConn)  # ours, against its mplex
            result = await measure(ours, address_of(theirs), upload, download)
    assert (result.upload_bytes, result.download_bytes) == (upload, download)


@SIZES
async def test_py_libp2p_perf_client_against_our_server(upload: int, download: int) -> None:
    ours, theirs = make_host("noise", "ours"), make_host("noise", "theirs")
    async with ours.run(listen_addrs=[LOOPBACK]), theirs.run(listen_addrs=[LOOPBACK]):
        serve_perf(ours)
        with trio.fail_after(30):
            outputs = [
                output
                async for output in PerfService(theirs).measure_performance(
                    multiaddr.Multiaddr(address_of(ours)), upload, download
                )
            ]
    final = outputs[-1]
    assert (final["type"], final["upload_bytes"], final["download_bytes"]) == ("final", upload, download)


async def test_the_command_serves_py_libp2p_perf_client() -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mplex",
            "perf",
            "--libp2p",
            "--run-server",
            "--server-address",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = await trio.to_thread.run_sync(server.stdout.readline)
        assert banner.startswith("mplex: serving /perf/1.0.0 on /ip4/127.0.0.1/tcp/"), banner
        address = banner.rsplit(" ", 1)[1].strip()
        theirs = make_host("noise", "theirs")
        async with theirs.run(listen_addrs=[LOOPBACK]):
            with trio.fail_after(30):
                outputs = [
                    o
                    async for o in PerfService(theirs).measure_performance(multiaddr.Multiaddr(address), 5, 7)
                ]
        assert (outputs[-1]["upload_bytes"], outputs[-1]["download_bytes"]) == (5, 7)
        # ... and its client, against py-libp2p's server.
        theirs = make_host("noise", "theirs")
        async with theirs.run(listen_addrs=[LOOPBACK]):
            await PerfService(theirs).start()
            client = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "mplex",
                    "perf",
                    "--libp2p",
                    "--server-address",
                    address_of(theirs),
                    "--upload-bytes",
                    "1000",
                    "--download-bytes",
                    "2000",
                ],
                capture_stdout=True,
                check=False,
            )
        assert client.returncode == 0
        [line] = [json.loads(text) for text in client.stdout.decode().splitlines()]
        assert (line["uploadBytes"], line["downloadBytes"]) == (1000, 2000)
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
