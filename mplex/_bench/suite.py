"""The benchmark suite: ``mplex bench``, ``python -m benchmarks``, ``make bench``.

Every case runs this library and its baselines in the same invocation, sender and
receiver in separate processes over 127.0.0.1 TCP, several times; the table shows
medians and the ratios that the targets in benchmarks/RESULTS.md are stated in.
``--quick`` shrinks every case so the whole suite takes seconds (``make test`` runs it
to keep the harness honest); ``--write-results`` rewrites benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from mplex._bench.report import Commentary, results_markdown, targets_text

#: The source checkout's benchmarks/ folder (js and py-libp2p baselines, RESULTS.md),
#: when this package runs from a checkout; absent in an installed wheel.
CHECKOUT = Path(__file__).resolve().parents[2] / "benchmarks"
#: Where a run's JSON goes unless --json says: the checkout's results folder.  An
#: installed package saves nothing unasked (`mplex bench --json` prints the results).
RESULTS_DIR = CHECKOUT / "results" if CHECKOUT.is_dir() else None
MB = 1_000_000
MIB = 1 << 20


@dataclass
class Run:
    """One way of running a case: an implementation and its arguments."""

    label: str
    impl: str  # mplex, raw, floor, memory, checkpoint, js, pylibp2p, or host-*: see host_command
    args: dict[str, Any]
    metric: str = "seconds"  # which client field the case reports
    #: A baseline known not to complete the case: after this many seconds its row says
    #: so, instead of failing the suite (0: it must complete).
    gives_up_after: float = 0


@dataclass
class Case:
    name: str
    what: str
    runs: list[Run]
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def cases(quick: bool, only: set[str]) -> list[Case]:
    scale = 100 if quick else 1
    n32 = 3_276_800 // scale  # 105 MB in 32-byte chunks (1.05 MB when --quick)
    small = {"case": "small", "size": 32, "count": n32}
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
                ("64 KiB", 64 * 1024, 4096 // scale),
                ("1 MiB", MIB, max(2, 256 // scale)),
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
            f"100 workers x {5000 // scale // 100 or 1} requests: open, 32 B, close, 32 B reply",
            [
                Run(
                    "mplex",
                    "mplex",
                    {"case": "reqresp", "streams": 100, "count": max(1, 50 // scale)},
                ),
                Run(
                    "raw, 100 connections",
                    "raw",
                    {"case": "reqresp", "streams": 100, "count": max(1, 50 // scale)},
                ),
                # Not a target's baseline: the other reading of "the same over raw
                # connections", where each request opens and closes its own connection.
                Run(
                    "raw, a connection per request",
                    "raw",
                    {"case": "reqresp", "streams": 100, "count": max(1, 50 // scale), "per-request": 1},
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
                ("64 KiB", 64 * 1024, 4096 // scale),
                ("1 MiB", MIB, max(2, 256 // scale)),
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
            "host latency",
            f"py-libp2p hosts, TCP + noise: {latency['count']} sequential 32 B round trips",
            [
                Run("py-libp2p host, our mplex", "host-ours", latency, "p50_us"),
                Run("py-libp2p host, its mplex", "host-mplex", latency, "p50_us"),
                Run("js-libp2p node pair, mplex", "host-js", latency, "p50_us"),
            ],
        ),
    ]


def case_names() -> list[str]:
    """Every case's name, in the suite's order."""
    return [case.name for case in cases(quick=False, only=set())]


def unknown_cases(names: list[str]) -> list[str]:
    """Those of ``names`` that name no case."""
    known = set(case_names())
    return [name for name in names if name not in known]


# --- running --------------------------------------------------------------------------


JS_PEER = CHECKOUT / "js" / "peer.mjs"
JS_NODE = CHECKOUT.parent / "tests" / "interop" / "libp2p_node.mjs"


def peer_command(role: str, run: Run, port: int = 0, addr: str = "") -> list[str]:
    if run.impl.startswith("host-"):
        return host_command(role, run, addr)
    if run.impl == "js":
        command = ["node", str(JS_PEER), role]
        if role == "client":
            command += ["--port", str(port)]
            for key, value in run.args.items():
                command += [f"--{key}", str(value)]
        return command
    if run.impl == "pylibp2p":
        command = [pylibp2p_python(), "-m", "benchmarks.pylibp2p_peer", role]
    else:
        command = [sys.executable, "-m", "mplex._bench.peer", role, "--impl", _peer_impl(run.impl)]
    if port:
        command += ["--port", str(port)]
    for key, value in run.args.items():
        if role != "server" or key in SERVER_ARGS:
            command += [f"--{key}", str(value)]
    return command


#: The arguments of a run that its server needs too.
SERVER_ARGS = frozenset({"log-level", "tls", "fast-path"})


def host_command(role: str, run: Run, addr: str) -> list[str]:
    """A host-level peer: the js-libp2p node, or a py-libp2p host with ``--muxer``
    (``host-js-to-ours``: a py-libp2p host with ours serves, the js node dials it)."""
    if run.impl == "host-js" or (run.impl == "host-js-to-ours" and role == "client"):
        command = ["node", str(JS_NODE), f"--bench-{role}"]
    else:
        muxer = "ours" if run.impl == "host-js-to-ours" else run.impl.removeprefix("host-")
        command = [pylibp2p_python(), "-m", "benchmarks.libp2p_host_peer", role, "--muxer", muxer]
    if role == "client":
        command += ["--addr", addr]
        for key, value in run.args.items():
            command += [f"--{key}", str(value)]
    return command


def _peer_impl(impl: str) -> str:
    return "mplex" if impl in ("memory",) else impl


def last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise RuntimeError(f"no result in output:\n{text}")


def run_json(command: list[str], timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """Run a one-process measurement and return its JSON result line."""
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=True)
    return last_json(out.stdout)


def run_once(run: Run, timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT.parent)}
    if run.impl == "checkpoint":
        code = (
            "import time, trio\n"
            "async def main(n):\n"
            "    t = time.perf_counter()\n"
            "    for _ in range(n): await trio.lowlevel.checkpoint()\n"
            "    print('{\"seconds\": %r}' % (time.perf_counter() - t))\n"
            f"trio.run(main, {run.args['count']})\n"
        )
        return run_json([sys.executable, "-c", code], timeout, env)
    if run.impl == "memory":
        return run_json(peer_command("memory", run), timeout, env)
    server = subprocess.Popen(
        peer_command("server", run),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        if not ready.startswith("READY"):
            raise RuntimeError(
                f"server did not start: {ready!r} {server.stderr.read() if server.stderr else ''}"
            )
        fields = ready.split()  # READY <port> [<multiaddr>, from a libp2p host]
        port, addr = int(fields[1]), fields[2] if len(fields) > 2 else ""
        client = subprocess.run(
            peer_command("client", run, port, addr),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        if client.returncode:
            raise RuntimeError(f"client failed: {client.stderr[-2000:]}")
        result = last_json(client.stdout)
        rest, problems = server.communicate(timeout=timeout)
        if server.returncode:
            raise RuntimeError(f"{run.label}: server failed: {problems[-3000:]}")
        result["server_peak_rss"] = last_json(rest)["peak_rss"]
        return result
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def run_or_give_up(run: Run, timeout: float) -> dict[str, Any]:
    """``run_once``; for a baseline that may not complete, its failure as a result."""
    if not run.gives_up_after:
        return run_once(run, timeout)
    try:
        return run_once(run, run.gives_up_after)
    except subprocess.TimeoutExpired:
        return {"failed": f"no result within {run.gives_up_after:g} s"}
    except RuntimeError as exc:
        return {"failed": str(exc).splitlines()[0][:100]}


def median(results: list[dict[str, Any]], metric: str) -> float:
    return float(statistics.median(r[metric] for r in results))


class Progress:
    """A live progress line on stderr: a rich progress bar on a terminal when rich is
    installed, else one plain line per run (also what logs and pipes get)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.bar: Any = None
        if sys.stderr.isatty():
            try:
                from rich.console import Console  # noqa: PLC0415  (optional)
                from rich.progress import Progress as RichProgress  # noqa: PLC0415
            except ImportError:
                return
            self.bar = RichProgress(console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("benchmarks", total=total)
            self.bar.start()

    def step(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done - 1, description=label)
            return
        elapsed = time.monotonic() - self.started
        sys.stderr.write(f"[{self.done}/{self.total}] {elapsed:5.0f}s  {label}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def pylibp2p_python() -> str:
    """py-libp2p lives in its own venv (see the Makefile): $MPLEX_BENCH_PYLIBP2P_PYTHON,
    else the checkout's .venv-bench, else this interpreter."""
    default = CHECKOUT.parent / ".venv-bench" / "bin" / "python"
    return os.environ.get("MPLEX_BENCH_PYLIBP2P_PYTHON") or str(
        default if default.exists() else sys.executable
    )


def unavailable(run: Run) -> str | None:
    """Why a baseline cannot run here (it needs the source checkout's peers), or None."""
    if run.impl in ("js", "host-js", "host-js-to-ours"):
        if shutil.which("node") is None:
            return "node is not installed"
        if not (CHECKOUT.parent / "tests" / "interop" / "node_modules").is_dir():
            return "the js peer is not installed (run `make bench` in a source checkout)"
    if run.args.get("tls"):
        try:
            import trustme  # noqa: F401, PLC0415  (the TLS server's certificate)
        except ImportError:
            return "trustme is not installed (it makes the TLS server's certificate)"
    if run.impl == "pylibp2p" or (run.impl.startswith("host-") and run.impl != "host-js"):
        python = pylibp2p_python()
        probe = subprocess.run([python, "-c", "import libp2p"], capture_output=True, check=False)
        if probe.returncode or not (CHECKOUT / "pylibp2p_peer.py").is_file():
            return "py-libp2p is not installed (run `make bench` in a source checkout)"
    return None


def drop_unavailable(suite: list[Case], require: bool) -> list[str]:
    """Remove baselines that cannot run here; with ``require``, refuse instead."""
    notes = []
    for case in list(suite):
        for run in list(case.runs):
            reason = unavailable(run)
            if reason is None:
                continue
            if require:
                raise SystemExit(f"benchmarks: baseline {run.label!r} cannot run: {reason}")
            if run is case.runs[0]:  # our own row: without it the case compares nothing
                suite.remove(case)
                notes.append(f"{case.name}: left out: {reason}")
                break
            case.runs.remove(run)
            notes.append(f"{case.name}: {run.label} left out: {reason}")
    return notes


def run_suite(suite: list[Case], runs: int, timeout: float) -> None:
    progress = Progress(sum(len(c.runs) for c in suite) * runs)
    for case in suite:
        for _ in range(runs):  # interleave implementations: noise hits them alike
            for run in case.runs:
                progress.step(f"{case.name}: {run.label}")
                case.results.setdefault(run.label, []).append(run_or_give_up(run, timeout))
    progress.close()


# --- reporting ------------------------------------------------------------------------


def rows(suite: list[Case]) -> list[list[str]]:
    table = []
    for case in suite:
        first = case.runs[0]
        base = median(case.results[first.label], first.metric)
        for run in case.runs:
            results = case.results[run.label]
            if any("failed" in r for r in results):
                failed = sum("failed" in r for r in results)
                why = next(r["failed"] for r in results if "failed" in r)
                table.append(
                    [case.name, run.label, f"did not complete ({failed} of {len(results)}: {why})", "", ""]
                )
                continue
            value = median(results, run.metric)
            shown = describe(run, results, value)
            ratio = f"{value / base:.2f}x" if run is not first and base else ""
            rss = max(r.get("peak_rss", 0) for r in results) / MIB
            srss = max(r.get("server_peak_rss", 0) for r in results) / MIB
            memory = f"{rss:.0f} / {srss:.0f}" if srss else f"{rss:.0f}"
            table.append([case.name, run.label, shown, ratio, memory])
    return table


def describe(run: Run, results: list[dict[str, Any]], value: float) -> str:
    if run.metric == "seconds":
        sample = results[0]
        if "bytes" in sample:
            return f"{value:.3f} s  ({sample['bytes'] / value / MB:.1f} MB/s)"
        if "requests" in sample:
            return f"{value:.3f} s  ({sample['requests'] / value:,.0f} req/s)"
        return f"{value:.3f} s"
    if run.metric.endswith("_us"):
        p50 = median(results, "p50_us")
        p99 = median(results, "p99_us")
        return f"p50 {p50:.0f} us, p99 {p99:.0f} us"
    return f"{value:,.0f} B/stream"


HEADER = ["case", "implementation", "median", "vs first", "peak RSS MiB (client / server)"]


def render(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *table]) for i in range(len(HEADER))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(lines)


def markdown(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in table]
    return "\n".join(lines)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores; Linux {platform.release()}; "
        f"CPython {platform.python_version()}; trio {trio.__version__}"
    )


def main(argv: list[str] | None = None, commentary: Commentary | None = None) -> int:
    """The command; ``commentary`` (a source checkout's) goes into RESULTS.md."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness")
    parser.add_argument("--runs", type=int, help="runs per implementation (default 3, quick 1)")
    parser.add_argument("--json", type=Path, help="where to save results (default benchmarks/results/)")
    parser.add_argument("--write-results", action="store_true", help="rewrite benchmarks/RESULTS.md")
    parser.add_argument("--from-json", type=Path, help="re-render a saved run instead of running")
    parser.add_argument(
        "--require-baselines", action="store_true", help="fail if a baseline (js, py-libp2p) cannot run"
    )
    args = parser.parse_args(argv)
    unknown = unknown_cases(args.cases)
    if unknown:
        named = ", ".join(map(repr, unknown))
        parser.error(f"no case named {named}; the cases are: {', '.join(case_names())}")
    if args.quick and args.write_results:
        parser.error("--quick sizes prove nothing about speed: RESULTS.md is written from full runs only")
    if args.from_json:
        return rerender(args.from_json, args.write_results, commentary)
    runs = args.runs or (1 if args.quick else 3)
    suite = cases(args.quick, set(args.cases))
    notes = drop_unavailable(suite, args.require_baselines)
    started = time.monotonic()
    run_suite(suite, runs, timeout=120 if args.quick else 600)
    table = rows(suite)
    print(render(table))
    if args.quick:
        print("\nTargets: not judged (--quick sizes are too small to say anything about speed)")
    else:
        print("\nTargets:\n" + targets_text(suite))
    for note in notes:
        print(note)
    print(f"\n{runs} run(s) per implementation, medians; {time.monotonic() - started:.0f} s in all.")
    saved = args.json or (RESULTS_DIR and RESULTS_DIR / ("quick.json" if args.quick else "latest.json"))
    if saved is None:
        return 0
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(
        json.dumps(
            {
                "machine": machine(),
                "runs": runs,
                "quick": args.quick,
                "cases": {c.name: {"what": c.what, "results": c.results} for c in suite},
                "table": table,
            },
            indent=1,
        )
    )
    print(f"Results saved to {saved}")
    if args.write_results:
        write_results_md(suite, table, runs, machine(), commentary)
    return 0


def rerender(path: Path, write: bool, commentary: Commentary | None = None) -> int:
    """Print (and optionally write to RESULTS.md) the table of a saved run."""
    saved = json.loads(path.read_text())
    suite = cases(saved["quick"], set(saved["cases"]))
    for case in suite:
        case.results = saved["cases"][case.name]["results"]
        case.runs = [run for run in case.runs if run.label in case.results]  # rows added since
    table = rows(suite)
    print(render(table))
    if write:
        write_results_md(suite, table, saved["runs"], saved["machine"], commentary)
    return 0


def write_results_md(
    suite: list[Case], table: list[list[str]], runs: int, where: str, commentary: Commentary | None
) -> None:
    text = results_markdown(suite, table, runs, where, markdown(table), commentary=commentary)
    (CHECKOUT / "RESULTS.md").write_text(text)


if __name__ == "__main__":
    sys.exit(main())
