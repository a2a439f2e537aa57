"""The ``mplex`` command (also ``python -m mplex``).

    mplex decode [FILE|-] [--hex] [--offset N] [--plain]
    mplex serve  [--host 127.0.0.1] [--port N] [--mode echo|discard|source] [--size BYTES]
    mplex dial   HOST PORT [--streams N] [--size BYTES] [--verify] [--timeout S] [--json]
    mplex perf   [--run-server] [--server-address HOST:PORT]
                 [--upload-bytes N] [--download-bytes N] [--libp2p]
    mplex bench  [CASE ...] [--quick] [--runs N] [--json]

Exit codes: 0 success, 1 the operation failed (unreachable peer, verification
failure, malformed capture), with one line on stderr that says why; 2 bad arguments;
130 interrupted (Ctrl-C), quietly.
Tables use ``rich`` on a terminal when the ``cli`` extra is installed, plain text
otherwise.  ``-v`` may come anywhere on the line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mplex import __version__

from .._engine.wire import PROTOCOL_ID
from . import arguments
from .decode import decode_command
from .dial import dial_command
from .errors import CommandError
from .perf import add_arguments as add_perf_arguments
from .perf import perf_command
from .serve import serve_command

__all__ = ["main"]

_VERBOSE_HELP = "log to stderr (DEBUG: every frame)"
_NEGOTIATE_HELP = f"agree on {PROTOCOL_ID} with multistream-select first, as libp2p peers do"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    try:
        args = parser().parse_args(argv)
        if args.verbose:
            logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
        return int(args.run(args))
    except CommandError as exc:
        print(f"mplex {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`mplex decode big.bin | head`)
        # Point stdout at /dev/null so that the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return INTERRUPTED
    except BaseExceptionGroup as group:  # Ctrl-C inside a nursery of the command's own
        rest = group.split(KeyboardInterrupt)[1]
        if rest is None:
            return INTERRUPTED
        raise


#: The exit status after Ctrl-C, as shells report a process that SIGINT ended (128 + 2).
INTERRUPTED = 130


def parser() -> argparse.ArgumentParser:
    """The command line: four subcommands, each with its defaults in ``--help``."""
    top = argparse.ArgumentParser(
        prog="mplex", description="libp2p mplex for trio: decode, serve, dial, bench"
    )
    top.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    top.add_argument("--version", action="version", version=f"mplex {__version__} ({PROTOCOL_ID})")
    # -v after the subcommand too; SUPPRESS keeps a subcommand from resetting it to False.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=summary,
            description=summary,
            parents=[common],
            formatter_class=_ShowDefaults,
        )

    p = command("decode", "dissect a captured mplex byte stream into frames")
    p.add_argument("file", nargs="?", default="-", help="capture file, or - for stdin")
    p.add_argument("--hex", action="store_true", help="the input is hex text, not raw bytes")
    p.add_argument(
        "--offset",
        metavar="BYTE",
        type=arguments.non_negative,
        help="start at this byte (default: 0, or after a leading multistream-select handshake)",
    )
    p.add_argument(
        "--max-message-size",
        metavar="BYTES",
        type=arguments.positive,
        default=1 << 20,
        help="frame body limit, bytes",
    )
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    p.set_defaults(run=decode_command)

    p = command("serve", "run an mplex server on TCP")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument(
        "--port",
        metavar="PORT",
        type=arguments.port_number,
        default=0,
        help="port to listen on; 0 picks a free one",
    )
    p.add_argument(
        "--mode", choices=["echo", "discard", "source"], default="echo", help="what each stream gets"
    )
    p.add_argument(
        "--size",
        metavar="BYTES",
        type=arguments.positive,
        default=1 << 20,
        help="bytes per stream in source mode",
    )
    p.add_argument("--negotiate", action="store_true", help=_NEGOTIATE_HELP)
    p.add_argument(
        "--capture",
        metavar="FILE",
        type=Path,
        help="write what each client sends to FILE.1, FILE.2, ... (one per connection), for `mplex decode`",
    )
    p.set_defaults(run=serve_command)

    p = command("dial", "open streams to an mplex peer, send, read back, report")
    p.add_argument("host", help="the peer's address")
    p.add_argument("port", type=arguments.dial_port, help="the peer's TCP port")
    p.add_argument("--streams", metavar="N", type=arguments.positive, default=10, help="streams, all at once")
    p.add_argument(
        "--size", metavar="BYTES", type=arguments.positive, default=65536, help="bytes sent on each stream"
    )
    p.add_argument("--verify", action="store_true", help="check that every stream echoes its bytes")
    p.add_argument(
        "--seed", metavar="N", type=arguments.whole_number, default=0, help="seed of the random payload"
    )
    p.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        type=arguments.seconds,
        default=10.0,
        help="seconds to connect (and negotiate)",
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=arguments.seconds,
        default=60.0,
        help="seconds for the whole dial",
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    p.add_argument("--negotiate", action="store_true", help=_NEGOTIATE_HELP)
    p.add_argument(
        "--capture",
        metavar="FILE",
        type=Path,
        help="write every byte the peer sends to FILE, for `mplex decode FILE`",
    )
    p.set_defaults(run=dial_command)

    p = command("perf", "the libp2p perf protocol (/perf/1.0.0): client or server")
    add_perf_arguments(p)
    p.set_defaults(run=perf_command)

    p = command("bench", "run the benchmark suite (default: the 105 MB / 32 B case)")
    p.add_argument("cases", nargs="*", help="case names, e.g. 32B latency fan-out (default: 32B)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds in all; no verdicts")
    p.add_argument(
        "--runs", metavar="N", type=arguments.positive, help="runs per implementation (default: the suite's)"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.set_defaults(run=_bench_command)
    return top


class _ShowDefaults(argparse.HelpFormatter):
    """Help that ends each option with its default, where it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unsaid = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if not unsaid and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _bench_command(args: argparse.Namespace) -> int:
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from .._bench import cases, suite  # noqa: PLC0415  (heavy; only for this command)

    unknown = cases.unknown_cases(args.cases)
    if unknown:
        print(
            f"mplex bench: no case named {', '.join(map(repr, unknown))}; the cases are: "
            + ", ".join(cases.case_names()),
            file=sys.stderr,
        )
        return 2
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
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                status = suite.main([*argv, "--json", str(saved)])
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # a run failed
            print(json.dumps({"failure": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}))
            return 1
        print(saved.read_text())
    return status
