"""The ``mplex`` command (also ``python -m mplex``).

    mplex bench  [CASE ...] [--quick] [--runs N] [--json]
    mplex serve  [--host 127.0.0.1] [--port N] [--mode echo|discard|source] [--size BYTES]
    mplex dial   HOST PORT [--streams N] [--size BYTES] [--verify]
    mplex decode [FILE|-] [--hex]

Exit codes: 0 success, 1 the operation failed (unreachable peer, verification
failure, malformed capture), 2 bad arguments.  Errors are one line on stderr.
Tables use ``rich`` when the ``cli`` extra is installed, plain text otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import trio

from . import __version__
from ._codec import PROTOCOL_ID, Decoder, Frame
from ._exceptions import ProtocolError
from ._multistream import NegotiationError
from ._muxer import Muxer, open_muxer
from ._negotiation import select_protocol
from ._serve import serve_listeners
from ._stream import MplexStream
from ._varint import encode_uvarint

__all__ = ["main"]


class CommandError(Exception):
    """A failure to report as one line and exit status 1."""


# --- output -----------------------------------------------------------------------------


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table through rich when it is installed, else aligned plain text."""
    try:
        from rich.console import Console  # noqa: PLC0415  (optional dependency)
        from rich.table import Table  # noqa: PLC0415
    except ImportError:
        if title:
            print(title)
        print(plain_table(headers, rows))
        return
    table = Table(title=title or None)
    for header in headers:
        table.add_column(header)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


# --- decode ------------------------------------------------------------------------------


def preview(data: bytes, limit: int = 16) -> str:
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in data[:limit])
    more = "..." if len(data) > limit else ""
    return f"{data[:limit].hex(' ')}{more}  |{text}|" if data else ""


def frame_size(frame: Frame) -> int:
    """Bytes the frame took on the wire (varints are minimal, or it was rejected)."""
    return len(encode_uvarint(frame.header)) + len(encode_uvarint(len(frame.data))) + len(frame.data)


def decode_command(args: argparse.Namespace) -> int:
    raw = sys.stdin.buffer.read() if args.file == "-" else read_file(args.file)
    if args.hex:
        try:
            raw = bytes.fromhex(raw.decode("ascii", errors="replace").replace("\n", " "))
        except ValueError as exc:
            raise CommandError(f"the input is not valid hex: {exc}") from None
    decoder = Decoder(args.max_message_size)
    error: ProtocolError | None = None
    try:
        frames = decoder.feed(raw)
    except ProtocolError as exc:
        frames, error = exc.decoded, exc
    rows = []
    offset = 0
    for frame in frames:
        side = "opener" if frame.flag.from_initiator else "acceptor"
        rows.append(
            [
                str(offset),
                str(frame.stream_id),
                side,
                frame.flag.name,
                str(len(frame.data)),
                preview(frame.data),
            ]
        )
        offset += frame_size(frame)
    print_table(
        f"{len(frames)} frames in {len(raw)} bytes",
        ["offset", "stream", "sent by", "flag", "length", "data"],
        rows,
    )
    if error is not None:
        where = error.offset if error.offset is not None else offset
        print(f"mplex decode: stops at byte {where}: {error}", file=sys.stderr)
        return 1
    if decoder.buffered:
        print(
            f"note: the capture ends inside a frame starting at byte {offset} "
            f"({len(raw) - offset} bytes of it present)",
            file=sys.stderr,
        )
    return 0


def read_file(name: str) -> bytes:
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror}") from None


# --- serve -------------------------------------------------------------------------------


async def handle_stream(stream: MplexStream, mode: str, size: int) -> None:
    async with stream:
        if mode == "echo":
            while data := await stream.receive_some():
                await stream.send_all(data)
        elif mode == "discard":
            while await stream.receive_some():
                pass
        else:  # source: send `size` bytes (reading and dropping what arrives), then close
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, stream)
                chunk = bytes(range(256)) * 256
                for start in range(0, size, len(chunk)):
                    await stream.send_all(chunk[: min(len(chunk), size - start)])
                await stream.send_eof()


async def drain(stream: MplexStream) -> None:
    while await stream.receive_some():
        pass


NEGOTIATE_HELP = f"agree on {PROTOCOL_ID} with multistream-select first, as libp2p peers do"


async def serve(args: argparse.Namespace) -> None:
    try:
        listeners = await trio.open_tcp_listeners(args.port, host=args.host)
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    host, port = listeners[0].socket.getsockname()[:2]
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            handler = partial(handle_stream, mode=args.mode, size=args.size)
            nursery.start_soon(partial(serve_listeners, handler, listeners, negotiate=args.negotiate))
            print(f"mplex: serving {args.mode} on {host}:{port}", flush=True)
            async for _ in signals:  # Ctrl-C or SIGTERM: stop serving, exit cleanly
                nursery.cancel_scope.cancel()
                break


def serve_command(args: argparse.Namespace) -> int:
    trio.run(serve, args)
    return 0


# --- dial --------------------------------------------------------------------------------


async def dial(args: argparse.Namespace) -> dict[str, object]:
    try:
        with trio.fail_after(args.connect_timeout):
            transport = await trio.open_tcp_stream(args.host, args.port)
    except (OSError, trio.TooSlowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or "timed out"
        raise CommandError(f"cannot connect to {args.host}:{args.port}: {reason}") from None
    if args.negotiate:
        try:
            with trio.fail_after(args.connect_timeout):
                await select_protocol(transport, [PROTOCOL_ID])
        except (NegotiationError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            await trio.aclose_forcefully(transport)
            reason = str(exc) or f"no answer within {args.connect_timeout:g} s (does the peer negotiate?)"
            raise CommandError(f"cannot negotiate {PROTOCOL_ID}: {reason}") from None
    rng = random.Random(args.seed)
    payloads = [rng.randbytes(args.size) for _ in range(args.streams)]
    errors: list[str] = []
    mismatches = 0
    received = 0

    async def one(muxer: Muxer, index: int) -> None:
        nonlocal mismatches, received
        got = bytearray()
        failed = False
        try:
            stream = await muxer.open_stream(f"dial-{index}")
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(send, stream, payloads[index])
                while data := await stream.receive_some():
                    got += data
        except* trio.BrokenResourceError as group:
            errors.append(f"stream {index}: {group.exceptions[0]}")
            failed = True
        if not failed:
            received += len(got)
            if args.verify and got != payloads[index]:
                mismatches += 1

    async def send(stream: MplexStream, data: bytes) -> None:
        for start in range(0, len(data), 65536):
            await stream.send_all(data[start : start + 65536])
        await stream.send_eof()

    start = time.perf_counter()
    async with open_muxer(transport) as muxer, trio.open_nursery() as nursery:
        for index in range(args.streams):
            nursery.start_soon(one, muxer, index)
    seconds = time.perf_counter() - start
    sent = args.size * args.streams
    return {
        "streams": args.streams,
        "bytes_sent": sent,
        "bytes_received": received,
        "seconds": seconds,
        "mb_per_s": (sent + received) / seconds / 1e6 if seconds else 0.0,
        "verified": bool(args.verify),
        "mismatches": mismatches,
        "errors": errors,
    }


def dial_command(args: argparse.Namespace) -> int:
    result = trio.run(dial, args)
    if args.json:
        print(json.dumps(result))
    else:
        rows = [[key, str(value)] for key, value in result.items() if key != "errors"]
        rows.append(["errors", str(len(result["errors"]))])  # type: ignore[arg-type]
        print_table(f"dial {args.host}:{args.port}", ["", ""], rows)
        for error in result["errors"]:  # type: ignore[attr-defined]
            print(f"  {error}", file=sys.stderr)
    failed = result["errors"] or result["mismatches"]
    return 1 if failed else 0


# --- bench -------------------------------------------------------------------------------


def bench_command(args: argparse.Namespace) -> int:
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from ._bench import suite  # noqa: PLC0415  (heavy; only for this command)

    argv = list(args.cases or ["32B"])
    if args.quick:
        argv.append("--quick")
    if args.runs:
        argv += ["--runs", str(args.runs)]
    if not args.json:
        return suite.main(argv)
    # --json: the results as JSON on stdout, nothing else there (progress stays on stderr).
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "results.json"
        with contextlib.redirect_stdout(io.StringIO()):
            status = suite.main([*argv, "--json", str(saved)])
        print(saved.read_text())
    return status


# --- main --------------------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, not {text}")
    return value


def seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a finite, non-negative number of seconds, not {text}")
    return value


def port_number(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"is not a TCP port: {text}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="mplex", description="libp2p mplex for trio: serve, dial, decode, bench"
    )
    top.add_argument("-v", "--verbose", action="store_true", help="log to stderr (DEBUG: every frame)")
    top.add_argument("--version", action="version", version=f"mplex {__version__} ({PROTOCOL_ID})")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("decode", help="dissect a captured mplex byte stream into frames")
    p.add_argument("file", nargs="?", default="-", help="capture file, or - for stdin (default)")
    p.add_argument("--hex", action="store_true", help="the input is hex text, not raw bytes")
    p.add_argument(
        "--max-message-size", type=positive, default=1 << 20, help="frame body limit (default 1 MiB)"
    )
    p.set_defaults(run=decode_command)

    p = sub.add_parser("serve", help="run an mplex server on TCP")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=0, help="0 picks a free port (default)")
    p.add_argument("--mode", choices=["echo", "discard", "source"], default="echo")
    p.add_argument("--size", type=positive, default=1 << 20, help="bytes per stream in source mode")
    p.add_argument("--negotiate", action="store_true", help=NEGOTIATE_HELP)
    p.set_defaults(run=serve_command)

    p = sub.add_parser("dial", help="open streams to an mplex peer, send, read back, report")
    p.add_argument("host")
    p.add_argument("port", type=port_number)
    p.add_argument("--streams", type=positive, default=10)
    p.add_argument("--size", type=positive, default=65536, help="bytes sent on each stream")
    p.add_argument("--verify", action="store_true", help="check that every stream echoes its bytes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--connect-timeout", type=seconds, default=10.0, help="seconds (default 10)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--negotiate", action="store_true", help=NEGOTIATE_HELP)
    p.set_defaults(run=dial_command)

    p = sub.add_parser("bench", help="run the benchmark suite (default: the 105 MB / 32 B case)")
    p.add_argument("cases", nargs="*", help="case names, e.g. 32B latency fan-out")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds in all")
    p.add_argument("--runs", type=positive)
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.set_defaults(run=bench_command)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    try:
        return int(args.run(args))
    except CommandError as exc:
        print(f"mplex {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
