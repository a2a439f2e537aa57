"""The libp2p perf protocol (``/perf/1.0.0``, libp2p/specs ``perf/perf.md``).

The client opens a stream, sends how many bytes it wants back (a big-endian uint64),
uploads its own bytes, closes its side, and reads what comes back; the server reads the
number, reads the upload to its end, then sends that many bytes and closes.  Upload
throughput, download throughput and latency (one byte each way) are all runs of the
same exchange.

The protocol is written once, over ``PerfStream``: ``TrioPerfStream`` adapts any
``trio.abc.HalfCloseableStream`` (an ``mplex.MplexStream``), and ``mplex.libp2p``
adapts py-libp2p's streams, so the same client and server run over plain TCP with
multistream-select and inside py-libp2p hosts.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Protocol

import trio

__all__ = [
    "PERF_PROTOCOL_ID",
    "PerfResult",
    "PerfStream",
    "TrioPerfStream",
    "measurements",
    "median_run",
    "perf_client",
    "perf_server",
]

#: The multistream-select protocol id of the perf protocol.
PERF_PROTOCOL_ID = "/perf/1.0.0"
#: Bytes per write, as py-libp2p's and the other implementations write them.
BLOCK = 64 * 1024
#: What a client measures when no byte counts are given: bytes each way, and how many
#: one-byte round trips the latency is the median of.
DEFAULT_BYTES = 10_000_000
LATENCY_RUNS = 100
_ZEROS = bytes(BLOCK)


class PerfStream(Protocol):
    """What the perf protocol needs of a stream."""

    async def write(self, data: bytes) -> None:
        """Send ``data`` whole."""

    async def read(self, max_bytes: int) -> bytes | bytearray:
        """Up to ``max_bytes``, as soon as any arrive; ``b""`` at the end of the stream."""

    async def close_write(self) -> None:
        """End our direction; the other stays open."""


class TrioPerfStream:
    """``PerfStream`` over a ``trio.abc.HalfCloseableStream``."""

    def __init__(self, stream: trio.abc.HalfCloseableStream) -> None:
        self.stream = stream

    async def write(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read(self, max_bytes: int) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def close_write(self) -> None:
        await self.stream.send_eof()


@dataclass(frozen=True)
class PerfResult:
    """One run of the perf protocol, as the perf harness reports it."""

    upload_bytes: int
    download_bytes: int
    seconds: float

    def json_line(self) -> str:
        """The perf harness's JSON line for a finished run."""
        return json.dumps(
            {
                "type": "final",
                "timeSeconds": self.seconds,
                "uploadBytes": self.upload_bytes,
                "downloadBytes": self.download_bytes,
            }
        )


async def perf_client(stream: PerfStream, upload_bytes: int, download_bytes: int) -> PerfResult:
    """Run the client side on a fresh perf stream: upload ``upload_bytes``, then
    download ``download_bytes``.  ``ValueError`` if the server sends back another
    amount."""
    if not 0 <= upload_bytes < 1 << 64 or not 0 <= download_bytes < 1 << 64:
        raise ValueError("upload_bytes and download_bytes are 0 to 2**64 - 1")
    started = time.perf_counter()
    await stream.write(download_bytes.to_bytes(8, "big"))
    left = upload_bytes
    while left:
        size = min(BLOCK, left)
        await stream.write(_ZEROS if size == BLOCK else _ZEROS[:size])
        left -= size
    await stream.close_write()
    received = 0
    while data := await stream.read(BLOCK):
        received += len(data)
    seconds = time.perf_counter() - started
    if received != download_bytes:
        raise ValueError(f"asked for {download_bytes} bytes back, received {received}")
    return PerfResult(upload_bytes, received, seconds)


async def perf_server(stream: PerfStream) -> int:
    """Serve one perf stream: read the amount asked for, read the upload to its end,
    send the amount back and close.  Returns the bytes uploaded."""
    header = bytearray()
    while len(header) < 8:
        data = await stream.read(8 - len(header))
        if not data:
            raise ValueError(f"the stream ended after {len(header)} of the 8 bytes that say how much to send")
        header += data
    left = int.from_bytes(header, "big")
    uploaded = 0
    while data := await stream.read(BLOCK):
        uploaded += len(data)
    while left:
        size = min(BLOCK, left)
        await stream.write(_ZEROS if size == BLOCK else _ZEROS[:size])
        left -= size
    await stream.close_write()
    return uploaded


def measurements(upload_bytes: int | None, download_bytes: int | None) -> list[tuple[int, int, int]]:
    """(upload bytes, download bytes, runs) of each measurement a client makes: the one
    asked for, or else upload, download and the one-byte latency, in that order."""
    if upload_bytes is not None or download_bytes is not None:
        return [(upload_bytes or 0, download_bytes or 0, 1)]
    return [(DEFAULT_BYTES, 0, 1), (0, DEFAULT_BYTES, 1), (1, 1, LATENCY_RUNS)]


def median_run(runs: list[PerfResult]) -> PerfResult:
    """One result for several runs of one measurement: the median time."""
    seconds = statistics.median(run.seconds for run in runs)
    return PerfResult(runs[0].upload_bytes, runs[0].download_bytes, seconds)
