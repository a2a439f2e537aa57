"""The many-connections family: a node's shape, many peers each asking a little.

Each case runs this library against raw trio (one persistent connection per loop) in
the same invocation, and over bare TCP against js-libp2p's mplex (warmed up, as its
JIT needs).  The peers are in ``mplex._bench.many_peer``.  Its targets are issue 41's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .kinds import Case, CaseLike, Measure, Run, Target, median_of, throughput

RAW = "raw trio, a connection per loop"
RAW_TLS = "raw trio SSLStream, a connection per loop"
JS = "js-libp2p mplex"
#: What any mplex on trio must at least do (``mplex._bench.many_peer``).
FLOOR = "mplex floor: a task per connection, frames by hand"
#: The same, with the checkpoints trio's stream API adds (``floor.API_CHECKPOINTS``).
FLOOR_API = "mplex floor with a checkpoint per stream call"
#: What any mplex on trio must hold for an idle connection with one open stream: a raw
#: connection and one task more a side (``mplex._bench.floor``).
IDLE_FLOOR = "mplex floor: a raw connection and one task more a side"
#: The connection counts of the request loops (over TLS, the first two).
LOOPS = (1, 100, 1000)
#: The idle cases' connection counts.
IDLE = (5000, 10_000)


def loops_name(conns: int, tls: bool = False) -> str:
    return f"{'TLS ' if tls else ''}{conns:,} connection{'s' if conns > 1 else ''}, a request loop each"


def idle_name(conns: int) -> str:
    return f"{conns:,} idle connections"


def many_cases(quick: bool) -> list[Case]:
    """The family's cases (``quick``: a few connections, a fraction of a second)."""
    timing = {"warmup": 0.1, "seconds": 0.3} if quick else {"warmup": 1.5, "seconds": 2.5}
    found = []
    for tls in (False, True):
        for conns in LOOPS[:2] if tls else LOOPS:
            args: dict[str, Any] = {"case": "conns", "conns": conns // 10 or 1 if quick else conns, **timing}
            runs = [
                Run("mplex", "mplex", args),
                Run(RAW_TLS if tls else RAW, "raw", args),
                Run(FLOOR, "floor", args),
                Run(FLOOR_API, "floor-api", args),
            ]
            if tls:
                for run in runs:
                    run.args = {**args, "tls": 1}
            else:
                runs.append(Run(JS, "js", args))
            found.append(
                Case(
                    loops_name(conns, tls),
                    f"{args['conns']:,} connection(s){' over TLS 1.3' if tls else ''}, one loop of requests "
                    "each (mplex: a stream per request, open, 33 B, send_eof, 32 B reply to EOF); "
                    f"{args['seconds']:g} s timed after {args['warmup']:g} s of warm-up",
                    runs,
                )
            )
    for conns in IDLE:
        args = {"case": "idle-conns", "conns": conns // 100 if quick else conns}
        found.append(
            Case(
                idle_name(conns),
                f"{args['conns']:,} connections, each holding one open stream that echoed a byte: "
                "RSS and trio tasks per connection, on each side",
                [
                    Run("mplex", "mplex", args, "bytes_per_connection"),
                    Run("raw trio", "raw", args, "bytes_per_connection"),
                    Run(IDLE_FLOOR, "floor", args, "bytes_per_connection"),
                ],
            )
        )
    return found


def describe_idle(median: Callable[[str], float]) -> str:
    """An idle case's row: bytes and tasks per connection, client / server."""
    client, server = median("bytes_per_connection") / 1000, median("server_bytes_per_connection") / 1000
    tasks, server_tasks = median("tasks_per_connection"), median("server_tasks_per_connection")
    per = "per connection (client / server)"
    newcomer = (
        f"a newcomer's first request {median('newcomer_us'):,.0f} us, {median('newcomer_held_us'):,.0f} us"
    )
    return (
        f"{client:.1f} / {server:.1f} KB, {tasks:.1f} / {server_tasks:.1f} tasks {per}; {newcomer} among them"
    )


def _ratio(case: str, key: str | None, mine: str, base: str, limit: float) -> Measure:
    """Ours over the baseline's: req/s when ``key`` is None, else the median ``key``."""

    def measure(suite: Sequence[CaseLike]) -> tuple[float, float] | None:
        if key is None:
            a, b = throughput(suite, case, mine), throughput(suite, case, base)
        else:
            a, b = median_of(suite, case, mine, key), median_of(suite, case, base, key)
        return None if a is None or not b else (a / b, limit)

    return measure


def _absolute(case: str, key: str, limit: float) -> Measure:
    def measure(suite: Sequence[CaseLike]) -> tuple[float, float] | None:
        value = median_of(suite, case, "mplex", key)
        return None if value is None else (value / 1000, limit)

    return measure


def _held(case: str) -> Measure:
    """A newcomer's connect-and-request time while the case's connections are held,
    over the same with none held."""

    def measure(suite: Sequence[CaseLike]) -> tuple[float, float] | None:
        held, alone = (
            median_of(suite, case, "mplex", "newcomer_held_us"),
            median_of(suite, case, "mplex", "newcomer_us"),
        )
        return None if held is None or not alone else (held / alone, 3.0)

    return measure


def many_targets() -> list[Target]:
    """Issue 41's targets."""
    one, one_tls = loops_name(1), loops_name(1, tls=True)
    found: list[Target] = [
        (f"{one}: req/s vs js-libp2p", _ratio(one, None, "mplex", JS, 1.0), "min", "x"),
        (f"{one}: p50 vs raw", _ratio(one, "p50_us", "mplex", RAW, 1.75), "max", "x"),
        (f"{one_tls}: p50 vs raw SSLStream", _ratio(one_tls, "p50_us", "mplex", RAW_TLS, 2.5), "max", "x"),
    ]
    for conns in LOOPS[1:]:
        name = loops_name(conns)
        found += [
            (f"{name}: req/s vs js-libp2p", _ratio(name, None, "mplex", JS, 1.5), "min", "x"),
            (f"{name}: req/s vs raw", _ratio(name, None, "mplex", RAW, 0.5), "min", "x"),
            (f"{name}: p99 vs raw", _ratio(name, "p99_us", "mplex", RAW, 3.0), "max", "x"),
        ]
    tls100 = loops_name(100, tls=True)
    found.append(
        (f"{tls100}: req/s vs raw SSLStreams", _ratio(tls100, None, "mplex", RAW_TLS, 0.5), "min", "x")
    )
    for conns in IDLE:
        name = idle_name(conns)
        found.append((f"{name}: a newcomer's first request vs with none held", _held(name), "max", "x"))
        for side, key in (("client", "bytes_per_connection"), ("server", "server_bytes_per_connection")):
            found += [
                (
                    f"{name}: {side} memory per connection vs raw",
                    _ratio(name, key, "mplex", "raw trio", 2.0),
                    "max",
                    "x",
                ),
                (f"{name}: {side} memory per connection", _absolute(name, key, 12.0), "max", " KB"),
            ]
    return found
