"""``mplex perf``: the libp2p perf protocol over this mplex, client or server.

Plain mode runs over TCP with multistream-select, as libp2p peers negotiate:
``/mplex/6.7.0`` on the connection, then ``/perf/1.0.0`` on every stream.  With
``--libp2p`` it runs inside a py-libp2p host (TCP + noise, this mplex through
``mplex.libp2p``), where it talks to any libp2p perf peer, py-libp2p's own included.
"""

from __future__ import annotations

import argparse
import logging
from functools import partial

import trio

from .._engine.multistream import NegotiationError
from .._trio._util import describe
from .._trio.muxer import open_muxer
from .._trio.select import accept_protocol, select_protocol
from .._trio.serving import serve_tcp
from .._trio.stream import MplexStream
from . import arguments
from .dial import connect
from .errors import CommandError
from .perf_protocol import (
    PERF_PROTOCOL_ID,
    PerfResult,
    TrioPerfStream,
    measurements,
    median_run,
    perf_client,
    perf_server,
)

__all__ = ["add_arguments", "perf_command"]

_log = logging.getLogger("mplex")


def perf_command(args: argparse.Namespace) -> int:
    """Serve, or run the measurements and print one JSON line each."""
    if args.libp2p:
        try:
            from ..libp2p import _perf as host_perf  # noqa: PLC0415  (the libp2p extra)
        except ImportError as exc:
            raise CommandError(f"--libp2p needs the libp2p extra: {exc}") from None
        return trio.run(host_perf.perf_command, args)
    if args.run_server:
        return trio.run(_serve, args)
    for result in trio.run(_measure, args):
        print(result.json_line(), flush=True)
    return 0


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--server-address takes HOST:PORT, not {address!r}")
    return host, int(port)


async def _measure(args: argparse.Namespace) -> list[PerfResult]:
    host, port = split_address(args.server_address)
    transport = await connect(host, port, timeout=args.timeout, negotiate=True)
    results = []
    try:
        async with open_muxer(transport) as muxer:
            for upload, download, runs in measurements(args.upload_bytes, args.download_bytes):
                done = []
                for _ in range(runs):
                    stream = await muxer.open_stream()
                    with trio.fail_after(args.timeout):
                        await select_protocol(stream, [PERF_PROTOCOL_ID])
                    done.append(await perf_client(_Bounded(stream, args.timeout), upload, download))
                    await stream.aclose()
                results.append(median_run(done))
    except trio.TooSlowError:
        raise CommandError(
            f"the server at {args.server_address} sent nothing for {args.timeout:g} s (is it a perf "
            "server, `mplex perf --run-server`?); --timeout sets the limit"
        ) from None
    except NegotiationError as exc:
        raise CommandError(f"the server does not serve {PERF_PROTOCOL_ID}: {exc}") from None
    except ValueError as exc:  # perf_client: an answer the perf protocol does not allow
        raise CommandError(
            f"the server does not answer as a perf server does: {exc} (an echo server, perhaps?)"
        ) from None
    except trio.BrokenResourceError as exc:
        raise CommandError(f"the connection failed: {describe(exc)}") from None
    return results


class _Bounded(TrioPerfStream):
    """A perf stream whose every wait ends with ``trio.TooSlowError`` after ``timeout``
    seconds of silence (or of a server that stopped reading)."""

    def __init__(self, stream: MplexStream, timeout: float) -> None:
        super().__init__(stream)
        self._timeout = timeout

    async def write(self, data: bytes) -> None:
        with trio.fail_after(self._timeout):
            await super().write(data)

    async def read(self, max_bytes: int) -> bytes | bytearray:
        with trio.fail_after(self._timeout):
            return await super().read(max_bytes)


async def _serve_stream(stream: MplexStream) -> None:
    await accept_protocol(stream, [PERF_PROTOCOL_ID])
    try:
        await perf_server(TrioPerfStream(stream))
    except ValueError as exc:  # the client's mistake, not a bug here: no traceback
        _log.info("perf stream %d: %s", stream.id, exc)


async def _serve(args: argparse.Namespace) -> int:
    host, port = split_address(args.server_address)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(serve_tcp, _serve_stream, port, host=host, negotiate=True))
        address = listeners[0].socket.getsockname()
        print(f"mplex: serving {PERF_PROTOCOL_ID} on {address[0]}:{address[1]}", flush=True)
    return 0  # (serve_tcp serves until interrupted)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``mplex perf``'s options, named as the libp2p perf harness names them."""
    parser.add_argument(
        "--run-server", action="store_true", help="serve the perf protocol (default: run the client)"
    )
    parser.add_argument(
        "--server-address",
        metavar="HOST:PORT",
        default="127.0.0.1:4001",
        help="where the server listens or the client dials (with --libp2p, the client takes a multiaddr)",
    )
    parser.add_argument("--upload-bytes", metavar="BYTES", type=_bytes, help="bytes the client uploads")
    parser.add_argument(
        "--download-bytes", metavar="BYTES", type=_bytes, help="bytes the client asks the server to send back"
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=arguments.positive_seconds,
        default=10.0,
        help="seconds the client waits to connect and negotiate, and for any byte during a run",
    )
    parser.add_argument(
        "--libp2p",
        action="store_true",
        help="run inside a py-libp2p host over TCP + noise (needs the libp2p extra)",
    )


def _bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"must be 0 to 2**64 - 1 bytes, not {text}")
    return value
