"""The libp2p perf protocol (``/perf/1.0.0``) over this mplex: the client and server
agree on every transport, a peer that breaks the protocol is told so, and ``mplex perf``
prints the perf harness's JSON lines."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
import mplex.testing
from mplex._cli.perf_protocol import PERF_PROTOCOL_ID, PerfResult, TrioPerfStream, perf_client, perf_server
from tests.helpers import over_every_transport
from tests.test_cli import served

MPLEX = [sys.executable, "-m", "mplex"]


async def exchange(
    client: mplex.Muxer, server: mplex.Muxer, upload: int, download: int
) -> tuple[PerfResult, int]:
    """One perf run from ``client`` to ``server``: the client's result, the bytes the
    server saw uploaded."""
    uploaded: list[int] = []

    async def serve() -> None:
        uploaded.append(await perf_server(TrioPerfStream(await server.accept_stream())))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        result = await perf_client(TrioPerfStream(await client.open_stream()), upload, download)
    return result, uploaded[0]


@over_every_transport
@pytest.mark.parametrize(
    ("upload", "download"), [(0, 0), (1, 1), (200_000, 0), (0, 300_001), (70_000, 70_000)]
)
async def test_the_client_gets_what_it_asked_for_and_the_server_what_was_sent(
    transport: Callable[[], Any], upload: int, download: int
) -> None:
    async with transport() as (a, b), mplex.open_muxer(a) as client, mplex.open_muxer(b) as server:
        with trio.fail_after(20):
            result, uploaded = await exchange(client, server, upload, download)
    assert (result.upload_bytes, result.download_bytes, uploaded) == (upload, download, upload)
    assert result.seconds > 0
    line = json.loads(result.json_line())
    assert line == {
        "type": "final",
        "timeSeconds": result.seconds,
        "uploadBytes": upload,
        "downloadBytes": download,
    }


async def test_a_server_that_sends_too_little_fails_the_client() -> None:
    async with mplex.testing.open_muxer_pair() as (client, server), trio.open_nursery() as nursery:

        async def short_server() -> None:
            stream = await server.accept_stream()
            while await stream.receive_some():
                pass
            await stream.send_all(b"x" * 10)  # asked for 100
            await stream.aclose()

        nursery.start_soon(short_server)
        with pytest.raises(ValueError, match="asked for 100 bytes back, received 10"):
            await perf_client(TrioPerfStream(await client.open_stream()), 5, 100)


async def test_a_client_that_ends_before_saying_how_much_fails_the_server() -> None:
    async with mplex.testing.open_muxer_pair() as (client, server):
        stream = await client.open_stream()
        await stream.send_all(b"\x00\x00\x01")  # 3 of the 8 bytes
        await stream.send_eof()
        with pytest.raises(ValueError, match="after 3 of the 8 bytes"):
            await perf_server(TrioPerfStream(await server.accept_stream()))


async def test_sizes_outside_uint64_are_refused() -> None:
    async with mplex.testing.open_muxer_pair() as (client, _):
        with pytest.raises(ValueError, match="2\\*\\*64"):
            await perf_client(TrioPerfStream(await client.open_stream()), 1 << 64, 0)


async def send_a_truncated_request(address: str) -> None:
    """A perf client that ends its stream 3 bytes into the 8 that say how much to send."""
    host, port = address.rsplit(":", 1)
    transport = await trio.open_tcp_stream(host, int(port))
    await mplex.select_protocol(transport, [mplex.PROTOCOL_ID])
    async with mplex.open_muxer(transport) as muxer:
        stream = await muxer.open_stream()
        await mplex.select_protocol(stream, [PERF_PROTOCOL_ID])
        await stream.send_all(b"\x00\x00\x01")
        await stream.send_eof()
        with trio.fail_after(30):
            assert await stream.receive_some() == b""  # closed without an answer


class TestTheCommand:
    def test_a_client_and_a_server_agree_and_print_json_lines(self) -> None:
        server = subprocess.Popen(
            [*MPLEX, "perf", "--run-server", "--server-address", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            banner = server.stdout.readline()
            assert banner.startswith("mplex: serving /perf/1.0.0 on 127.0.0.1:"), banner
            address = banner.rsplit(" ", 1)[1].strip()
            one = subprocess.run(
                [
                    *MPLEX,
                    "perf",
                    "--server-address",
                    address,
                    "--upload-bytes",
                    "1000",
                    "--download-bytes",
                    "2000",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert one.returncode == 0, one.stderr
            [line] = [json.loads(text) for text in one.stdout.splitlines()]
            assert (line["type"], line["uploadBytes"], line["downloadBytes"]) == ("final", 1000, 2000)
            every = subprocess.run(
                [*MPLEX, "perf", "--server-address", address],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert every.returncode == 0, every.stderr
            lines = [json.loads(text) for text in every.stdout.splitlines()]
            assert [(x["uploadBytes"], x["downloadBytes"]) for x in lines] == [
                (10_000_000, 0),
                (0, 10_000_000),
                (1, 1),
            ]
            trio.run(send_a_truncated_request, address)
        finally:
            server.send_signal(2)
            _, errors = server.communicate(timeout=10)
        assert server.returncode == 130
        assert errors == "", errors  # a client's mistake is no traceback of the server's

    def test_an_address_that_is_not_host_and_port_is_one_line(self) -> None:
        done = subprocess.run(
            [*MPLEX, "perf", "--server-address", "nowhere"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1
        assert done.stderr.strip() == "mplex perf: --server-address takes HOST:PORT, not 'nowhere'"


#: One small perf run: 100 kB up, nothing back.
SMALL_RUN = ["--upload-bytes", "100000", "--download-bytes", "0"]


class TestTheClientAgainstTheWrongServer:
    """Every failure of ``mplex perf``'s client is one line on stderr and exit 1, and
    no wait is unbounded (``--timeout``, 10 s by default)."""

    @staticmethod
    def against(*serve_options: str, timeout: str = "2") -> subprocess.CompletedProcess[str]:
        with served("echo", *serve_options) as port:
            return subprocess.run(
                [*MPLEX, "perf", "--server-address", f"127.0.0.1:{port}", *SMALL_RUN, "--timeout", timeout],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

    def test_an_echo_server_that_negotiates_is_named_in_one_line(self) -> None:
        done = self.against("--negotiate")
        assert done.returncode == 1
        [line] = done.stderr.splitlines()
        assert line.startswith("mplex perf: the server does not answer as a perf server does: asked for 0")

    def test_a_server_that_does_not_negotiate_times_out_in_one_line(self) -> None:
        done = self.against()
        assert done.returncode == 1
        [line] = done.stderr.splitlines()
        negotiate = "cannot negotiate /mplex/6.7.0: no answer within 2 s (does the peer negotiate?)"
        assert line == f"mplex perf: {negotiate}"

    def test_a_timeout_must_be_positive(self) -> None:
        done = subprocess.run(
            [*MPLEX, "perf", "--timeout", "0"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2
        assert "--timeout: must be more than 0 seconds" in done.stderr
