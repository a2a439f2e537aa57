"""The benchmark suite's cases: what each measures, and the implementations it runs,
ours first (the row every other row's ratio is taken against)."""

from __future__ import annotations

from typing import Any

from .kinds import MB, MIB, Case, Run
from .many import many_cases

__all__ = ["MB", "MIB", "Case", "Run", "case_names", "cases", "unknown_cases"]


def cases(quick: bool, only: set[str]) -> list[Case]:
    scale = 100 if quick else 1
    n32 = 3_276_800 // scale  # 105 MB in 32-byte chunks (1.05 MB when --quick)
    small = {"case": "small", "size": 32, "count": n32}
    reqs = max(1, 200 // scale)  # requests per worker
    all_cases = [
        Case(
            "32B",
            f"{n32 * 32 / MB:g} MB in 32 B writes on one stream",
            [
                Run("mplex send_nowait", "mplex", {**small, "api": "nowait"}),
                Run("mplex send_all", "mplex", {**small, "api": "sendall"}),
                # Logging configured, DEBUG off: what the frame-tracing checks cost.
                Run(
                    "mplex send_nowait, logging at INFO",
                    "mplex",
                    {**small, "api": "nowait", "log-level": "INFO"},
                ),
                Run("mplex send_nowait, memory", "memory", {**small, "api": "nowait"}),
                Run("framing floor", "floor", {**small, "case": "floor"}),
                Run("bare checkpoints", "checkpoint", {"count": n32}),
                Run("js-libp2p mplex", "js", small),
                # py-libp2p takes minutes for 105 MB: it runs a tenth of it (10.5 MB).
                Run("py-libp2p mplex (10.5 MB)", "pylibp2p", {**small, "count": 327_680 // scale}),
            ],
        ),
        *[
            Case(
                f"bulk {label}",
                f"{count * size / MIB:g} MiB in {label} sends on one stream",
                [
                    Run("mplex", "mplex", {"case": "bulk", "size": size, "count": count}),
                    Run("raw trio socket", "raw", {"case": "bulk", "size": size, "count": count}),
                ],
            )
            for label, size, count in [
                ("1 KiB", 1024, 65536 // scale),
                # 2 GiB: a second or so, where 256 MiB lasted 0.15 s and two runs of
                # the same code differed by half.
                ("64 KiB", 64 * 1024, 32768 // scale),
                ("1 MiB", MIB, max(2, 2048 // scale)),
                ("16 MiB", 16 * MIB, 1),
                ("16 MiB x 64", 16 * MIB, max(2, 64 // scale)),
            ]
        ],
        Case(
            "bulk 1 MiB, 512 B frames",
            f"{max(2, 256 // scale)} MiB in 1 MiB sends on one stream, Config.max_send_frame_size=512",
            [
                Run(
                    "mplex",
                    "mplex",
                    {"case": "bulk", "size": MIB, "count": max(2, 256 // scale), "frame-size": 512},
                ),
                Run("raw trio socket", "raw", {"case": "bulk", "size": MIB, "count": max(2, 256 // scale)}),
            ],
        ),
        Case(
            "fan-out",
            f"100 streams x {1024 // scale} KiB in 1 KiB sends, concurrently",
            [
                Run(
                    "mplex",
                    "mplex",
                    {"case": "fanout", "streams": 100, "size": 1024, "count": 1024 // scale},
                ),
                Run(
                    "raw, 100 connections",
                    "raw",
                    {"case": "fanout", "streams": 100, "size": 1024, "count": 1024 // scale},
                ),
                Run(
                    "js-libp2p mplex",
                    "js",
                    {"case": "fanout", "streams": 100, "size": 1024, "count": 1024 // scale},
                ),
            ],
        ),
        Case(
            "request/response",
            f"100 workers x {reqs} requests, a stream each: open, 32 B, half-close, 32 B reply to EOF",
            [
                Run("mplex", "mplex", {"case": "reqresp", "streams": 100, "count": reqs}),
                Run("raw, 100 connections", "raw", {"case": "reqresp", "streams": 100, "count": reqs}),
                Run("js-libp2p mplex", "js", {"case": "reqresp", "streams": 100, "count": reqs}),
                # Not a target's baseline: the other reading of "the same over raw
                # connections", where each request opens and closes its own connection.
                Run(
                    "raw, a connection per request",
                    "raw",
                    {"case": "reqresp", "streams": 100, "count": reqs, "per-request": 1},
                ),
            ],
        ),
        Case(
            "latency",
            f"{10_000 // scale} sequential 32 B round trips on one stream",
            [
                Run("mplex", "mplex", {"case": "latency", "count": 10_000 // scale}, "p50_us"),
                Run(
                    "raw trio socket",
                    "raw",
                    {"case": "latency", "count": 10_000 // scale},
                    "p50_us",
                ),
            ],
        ),
        Case(
            "fairness",
            f"32 B ping-pong while another stream sends {256 // scale} MiB in 16 MiB sends",
            [
                Run(
                    "mplex",
                    "mplex",
                    {
                        "case": "fairness",
                        "size": 16 * MIB if not quick else MIB,
                        "count": 16 if not quick else 2,
                    },
                    "p99_us",
                )
            ],
        ),
        *tls_cases(scale),
        *host_cases(scale),
        *many_cases(quick),
        Case(
            "idle streams",
            f"RSS growth per idle open stream, {10_000 // scale} streams",
            [
                Run(
                    "mplex",
                    "mplex",
                    {"case": "idle", "streams": 10_000 // scale},
                    "bytes_per_stream",
                )
            ],
        ),
    ]
    return [c for c in all_cases if not only or c.name in only]


def tls_cases(scale: int) -> list[Case]:
    """The cases a secured libp2p channel meets, over TLS 1.3 (``trio.SSLStream``),
    each against a raw ``SSLStream`` baseline run in the same invocation."""
    n32 = 3_276_800 // scale
    small = {"case": "small", "size": 32, "count": n32, "api": "nowait"}
    tls = {"tls": 1}
    fanout = {"case": "fanout", "streams": 100, "size": 1024, "count": 1024 // scale}
    latency = {"case": "latency", "count": 10_000 // scale}
    return [
        Case(
            "TLS 32B",
            f"{n32 * 32 / MB:g} MB in 32 B send_nowait writes on one stream, TLS 1.3 and bare TCP",
            [
                Run("mplex send_nowait over TLS", "mplex", {**small, **tls}),
                Run("mplex send_nowait over bare TCP", "mplex", small),
            ],
        ),
        *[
            Case(
                f"TLS bulk {label}",
                f"{count * size / MIB:g} MiB in {label} sends on one stream, TLS 1.3",
                [
                    Run("mplex", "mplex", {"case": "bulk", "size": size, "count": count, **tls}),
                    Run("raw trio SSLStream", "raw", {"case": "bulk", "size": size, "count": count, **tls}),
                ],
            )
            for label, size, count in [
                # 2 GiB: a second or so, where 256 MiB lasted 0.15 s and two runs of
                # the same code differed by half.
                ("64 KiB", 64 * 1024, 32768 // scale),
                ("1 MiB", MIB, max(2, 2048 // scale)),
            ]
        ],
        Case(
            "TLS fan-out",
            f"100 streams x {1024 // scale} KiB in 1 KiB sends, concurrently, TLS 1.3",
            [
                Run("mplex", "mplex", {**fanout, **tls}),
                Run("raw, 100 TLS connections", "raw", {**fanout, **tls}),
            ],
        ),
        Case(
            "TLS latency",
            f"{10_000 // scale} sequential 32 B round trips on one stream, TLS 1.3",
            [
                Run("mplex", "mplex", {**latency, **tls}, "p50_us"),
                Run("raw trio SSLStream", "raw", {**latency, **tls}, "p50_us"),
            ],
        ),
    ]


def host_cases(scale: int) -> list[Case]:
    """py-libp2p hosts over TCP + noise (ours through ``mplex.libp2p``, py-libp2p's own
    mplex and yamux) and a js-libp2p node pair, each in two processes."""
    n32 = 327_680 // scale  # 10.5 MB in 32 B writes (105 KB when --quick)
    small = {"case": "small", "size": 32, "count": n32}
    # py-libp2p's own muxers take about 35 s for 10.5 MB: they run a tenth of it.
    n_theirs = max(1, n32 // 10)
    theirs = {**small, "count": n_theirs}
    echo = {"case": "echo", "size": 100_000, "streams": 100 // min(scale, 10)}
    latency = {"case": "latency", "size": 32, "count": 1000 // min(scale, 10)}
    reqresp = {"case": "reqresp", "streams": 100 // min(scale, 10), "count": max(1, 20 // scale)}
    return [
        Case(
            "host 32B",
            f"py-libp2p hosts, TCP + noise: {n32 * 32 / MB:g} MB in 32 B writes on one host stream",
            [
                Run("py-libp2p host, our mplex", "host-ours", small),
                Run(f"py-libp2p host, its mplex ({n_theirs * 32 / MB:.3g} MB)", "host-mplex", theirs),
                Run(f"py-libp2p host, its yamux ({n_theirs * 32 / MB:.3g} MB)", "host-yamux", theirs),
                Run("js-libp2p node pair, mplex", "host-js", small),
                # js stops writing after 4-5 MB when it dials a py-libp2p host (with either
                # mplex), and its ping monitor then aborts the connection: a tenth here.
                Run(
                    f"js-libp2p node dialing a py-libp2p host, our mplex ({n_theirs * 32 / MB:.3g} MB)",
                    "host-js-to-ours",
                    theirs,
                ),
            ],
        ),
        Case(
            "host echo",
            f"py-libp2p hosts, TCP + noise: {echo['streams']} streams each echoing 100 KB, full duplex",
            [
                Run("py-libp2p host, our mplex", "host-ours", echo),
                Run("js-libp2p node pair, mplex", "host-js", echo),
                # Its streams stall and are reset ("timed out waiting for reader").
                Run("py-libp2p host, its mplex", "host-mplex", echo, gives_up_after=20),
            ],
        ),
        Case(
            "host request/response",
            f"py-libp2p hosts, TCP + noise: {reqresp['streams']} workers x {reqresp['count']} requests, "
            "host.new_stream each: 32 B, half-close, 32 B reply to EOF",
            [
                Run("py-libp2p host, our mplex", "host-ours", reqresp),
                Run("py-libp2p host, its mplex", "host-mplex", reqresp),
                Run("py-libp2p host, its yamux", "host-yamux", reqresp),
                Run("js-libp2p node pair, mplex", "host-js", reqresp),
            ],
        ),
        *perf_cases(scale),
        Case(
            "host latency",
            f"py-libp2p hosts, TCP + noise: {latency['count']} sequential 32 B round trips",
            [
                Run("py-libp2p host, our mplex", "host-ours", latency, "p50_us"),
                Run("py-libp2p host, its mplex", "host-mplex", latency, "p50_us"),
                Run("js-libp2p node pair, mplex", "host-js", latency, "p50_us"),
            ],
        ),
    ]


def perf_cases(scale: int) -> list[Case]:
    """The libp2p perf protocol (``/perf/1.0.0``) between py-libp2p hosts over TCP +
    noise: this library's perf over our mplex, py-libp2p's own ``PerfService`` over its
    muxers."""
    ours, theirs = 100 * MB // scale, 10 * MB // scale  # theirs moves about 10 MB/s

    def runs(args: dict[str, Any], theirs_args: dict[str, Any], metric: str, sized: str) -> list[Run]:
        return [
            Run("py-libp2p host, our mplex and perf", "host-ours", args, metric),
            # After a perf run py-libp2p's own muxers now and then lose the connection,
            # and the harness's redial for its /done stream fails (make bench of 239ac1f,
            # its yamux): such a run is a baseline that did not complete, not a failed
            # bench.
            *[
                Run(
                    f"py-libp2p host, its {muxer} and perf{sized}",
                    f"host-{muxer}",
                    theirs_args,
                    metric,
                    gives_up_after=60,
                )
                for muxer in ("mplex", "yamux")
            ],
        ]

    found = [
        Case(
            f"host perf {way}",
            f"py-libp2p hosts, TCP + noise: the perf protocol's {way} ({ours / MB:g} MB; "
            f"py-libp2p's own muxers {theirs / MB:g} MB)",
            runs(
                {"case": f"perf-{way}", "size": ours},
                {"case": f"perf-{way}", "size": theirs},
                "seconds",
                f" ({theirs / MB:g} MB)",
            ),
        )
        for way in ("upload", "download")
    ]
    count = max(3, 100 // scale)
    latency = {"case": "perf-latency", "count": count}
    found.append(
        Case(
            "host perf latency",
            f"py-libp2p hosts, TCP + noise: the perf protocol's latency, one byte each way, {count} runs",
            runs(latency, latency, "p50_us", ""),
        )
    )
    return found


def case_names() -> list[str]:
    """Every case's name, in the suite's order."""
    return [case.name for case in cases(quick=False, only=set())]


def unknown_cases(names: list[str]) -> list[str]:
    """Those of ``names`` that name no case."""
    known = set(case_names())
    return [name for name in names if name not in known]
