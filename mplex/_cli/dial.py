"""``mplex dial``: open streams to a peer, send, read back, report."""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TextIO

import trio

from .._engine.multistream import NegotiationError
from .._engine.wire import PROTOCOL_ID
from .._trio._util import describe
from .._trio.muxer import Muxer, open_muxer
from .._trio.select import select_protocol
from .._trio.stream import MplexStream
from .capture import CapturingStream, not_mplex
from .errors import CommandError
from .output import print_table

__all__ = ["CHUNK", "PROGRESS_EVERY", "Payload", "connect", "dial_command", "show_progress"]

#: Bytes per send, and the period of the generated payload.
CHUNK = 65536

_NEGOTIATE_HINT = "if the peer speaks multistream-select first, as libp2p peers do, add --negotiate"


class Payload:
    """The bytes stream ``index`` sends, made a chunk at a time so that memory stays
    bounded whatever ``size`` is.

    Chunk ``k`` is a random block (the same for every stream) whose first 16 bytes are
    the stream's index and ``k``: no two chunks of a dial are equal, so an echo that
    loses, repeats or swaps chunks does not verify.
    """

    def __init__(self, block: bytes, index: int, size: int) -> None:
        self._block = block
        self.index = index
        self.size = size

    def chunk(self, k: int) -> bytes:
        """Chunk ``k``: bytes ``k * CHUNK`` up to ``(k + 1) * CHUNK`` of the payload."""
        length = min(CHUNK, self.size - k * CHUNK)
        return (struct.pack("<QQ", self.index, k) + self._block[16:length])[:length]

    def chunks(self) -> Iterator[bytes]:
        """Every chunk, in order."""
        for k in range(-(-self.size // CHUNK)):
            yield self.chunk(k)


class EchoCheck:
    """Compares an echo with its payload as the echo arrives."""

    def __init__(self, payload: Payload) -> None:
        self._payload = payload
        self._position = 0
        self._chunk_index = -1
        self._chunk = b""
        self._matches = True

    def feed(self, data: bytes | bytearray) -> None:
        """The next bytes the peer sent back."""
        view = memoryview(data)
        while self._matches and view:
            k, offset = divmod(self._position, CHUNK)
            if self._position >= self._payload.size:
                self._matches = False  # more came back than was sent
                break
            if k != self._chunk_index:
                self._chunk_index, self._chunk = k, self._payload.chunk(k)
            count = min(len(view), len(self._chunk) - offset)
            self._matches = view[:count] == self._chunk[offset : offset + count]
            view = view[count:]
            self._position += count

    @property
    def verified(self) -> bool:
        """Everything came back, unchanged."""
        return self._matches and self._position == self._payload.size


@dataclass
class Report:
    """What a dial did; ``failure`` is the one line that says why it failed, if it did."""

    streams: int
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0
    mb_per_s_both_directions: float = 0.0
    verified: bool = False
    mismatches: int = 0
    errors: list[str] = field(default_factory=list)
    failure: str | None = None

    def fields(self) -> dict[str, object]:
        """What the table and the JSON show: the errors as their count (the first one
        is in ``failure``)."""
        return {**asdict(self), "errors": len(self.errors)}

    def rows(self) -> list[list[str]]:
        """The report as a two-column table."""
        shown = self.fields()
        del shown["failure"]
        return [
            [key, f"{value:.3f}" if isinstance(value, float) else str(value)] for key, value in shown.items()
        ]


def dial_command(args: argparse.Namespace) -> int:
    """Dial, print the report (or the one line why it failed); 1 if it failed.  With
    ``--json`` one JSON object is printed whatever happens, failures included."""
    try:
        report = trio.run(_dial, args)
    except CommandError as exc:  # could not connect or negotiate
        if not args.json:
            raise
        report = Report(streams=args.streams, verified=args.verify, failure=str(exc))
    if args.json:
        print(json.dumps(report.fields()))
    elif report.failure is None:
        print_table(f"dial {args.host}:{args.port}", ["", ""], report.rows(), plain=args.plain)
    if report.failure is not None:
        print(f"mplex dial: {report.failure}", file=sys.stderr)
        return 1
    return 0


async def _dial(args: argparse.Namespace) -> Report:
    report = Report(streams=args.streams, verified=args.verify)
    block = random.Random(args.seed).randbytes(CHUNK)
    start = time.perf_counter()
    with trio.move_on_after(args.timeout) as overall:
        transport = CapturingStream(await _connect(args), args.capture)
        async with open_muxer(transport) as muxer, trio.open_nursery() as watching:
            if sys.stderr.isatty() and not args.json:
                watching.start_soon(show_progress, report, args.size * args.streams, sys.stderr)
            async with trio.open_nursery() as nursery:
                for index in range(args.streams):
                    nursery.start_soon(
                        _one_stream, muxer, Payload(block, index, args.size), args.verify, report
                    )
            watching.cancel_scope.cancel()
    report.seconds = time.perf_counter() - start
    moved = report.bytes_sent + report.bytes_received
    report.mb_per_s_both_directions = moved / report.seconds / 1e6 if report.seconds else 0.0
    if overall.cancelled_caught:
        report.failure = (
            f"no result within {args.timeout:g} s (sent {report.bytes_sent} of {args.size * args.streams} "
            f"bytes, received {report.bytes_received}); --timeout sets the limit"
        )
    elif report.errors:
        report.failure = (
            f"{len(report.errors)} of {args.streams} streams failed; the first: {report.errors[0]}"
        )
        # Nothing at all came back: a peer that wants multistream-select first hangs up.
        if report.bytes_received == 0 and not args.negotiate:
            report.failure += f" ({_NEGOTIATE_HINT})"
    if report.failure is not None and (why := not_mplex(transport.first)) is not None:
        report.failure = why
    elif report.mismatches:
        report.failure = (
            f"{report.mismatches} of {args.streams} streams did not echo what they sent "
            f"(received {report.bytes_received} of {args.size * args.streams} bytes"
            + (": the peer sent nothing back; is it an echo server?)" if report.bytes_received == 0 else ")")
        )
    return report


async def show_progress(report: Report, total: int, out: TextIO) -> None:
    """Every second, one line on ``out`` (a terminal) saying how far the dial is, written
    over the last; the line is cleared when the dial ends (this task is cancelled)."""
    shown = ""
    try:
        while True:
            await trio.sleep(PROGRESS_EVERY)
            shown = f"sent {report.bytes_sent:,} of {total:,} bytes, received {report.bytes_received:,}"
            out.write("\r" + shown)
            out.flush()
    finally:
        if shown:
            out.write("\r" + " " * len(shown) + "\r")
            out.flush()


#: Seconds between two progress lines of a long dial.
PROGRESS_EVERY = 1.0


async def _connect(args: argparse.Namespace) -> trio.SocketStream:
    return await connect(args.host, args.port, timeout=args.connect_timeout, negotiate=args.negotiate)


async def connect(host: str, port: int, *, timeout: float, negotiate: bool) -> trio.SocketStream:
    """A TCP connection to ``host:port`` (with ``negotiate``, agreed on ``/mplex/6.7.0``
    by multistream-select), each step within ``timeout`` seconds; ``CommandError``
    saying why not."""
    try:
        with trio.fail_after(timeout):
            transport = await trio.open_tcp_stream(host, port)
    except (OSError, trio.TooSlowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or "timed out"
        raise CommandError(f"cannot connect to {host}:{port}: {reason}") from None
    if negotiate:
        try:
            with trio.fail_after(timeout):
                await select_protocol(transport, [PROTOCOL_ID])
        except (NegotiationError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            await trio.aclose_forcefully(transport)
            reason = str(exc) or f"no answer within {timeout:g} s (does the peer negotiate?)"
            raise CommandError(f"cannot negotiate {PROTOCOL_ID}: {reason}") from None
    return transport


async def _one_stream(muxer: Muxer, payload: Payload, verify: bool, report: Report) -> None:
    check = EchoCheck(payload) if verify else None
    failed = False
    try:
        stream = await muxer.open_stream(f"dial-{payload.index}")
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(_send, stream, payload, report)
            while data := await stream.receive_some():
                report.bytes_received += len(data)
                if check is not None:
                    check.feed(data)
    except* trio.BrokenResourceError as group:
        report.errors.append(f"stream {payload.index}: {describe(group.exceptions[0])}")
        failed = True
    if not failed and check is not None and not check.verified:
        report.mismatches += 1


async def _send(stream: MplexStream, payload: Payload, report: Report) -> None:
    for chunk in payload.chunks():
        await stream.send_all(chunk)
        report.bytes_sent += len(chunk)
    await stream.send_eof()
