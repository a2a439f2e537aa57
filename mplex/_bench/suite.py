"""The benchmark suite: ``mplex bench``, ``python -m benchmarks``, ``make bench``.

Every case runs this library and its baselines in the same invocation, sender and
receiver in separate processes over 127.0.0.1 TCP, several times; the table shows
medians and the ratios that the targets in benchmarks/RESULTS.md are stated in.
``--quick`` shrinks every case so the whole suite takes seconds (``make test`` runs it
to keep the harness honest).  A source checkout's ``python -m benchmarks`` adds
``--write-results`` (``benchmarks/results.py``), which renders benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

from .cases import MB, MIB, Case, Run, case_names, cases, unknown_cases
from .many import describe_idle
from .report import per_request_median, targets_text
from .runner import CHECKOUT, drop_unavailable, run_suite

#: Where a run's JSON goes unless --json says: the checkout's results folder.  An
#: installed package saves nothing unasked (`mplex bench --json` prints the results).
RESULTS_DIR = CHECKOUT / "results" if CHECKOUT.is_dir() else None


def median(results: list[dict[str, Any]], metric: str) -> float:
    return float(statistics.median(r[metric] for r in results))


def rows(suite: list[Case]) -> list[list[str]]:
    table = []
    for case in suite:
        first = case.runs[0]
        base = median(case.results[first.label], first.metric)
        base_work = work(case.results[first.label])
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
            ratio = f"{per_unit(value, results, base_work) / base:.2f}x" if run is not first and base else ""
            rss = max(r.get("peak_rss", 0) for r in results) / MIB
            srss = max(r.get("server_peak_rss", 0) for r in results) / MIB
            memory = f"{rss:.0f} / {srss:.0f}" if srss else f"{rss:.0f}"
            table.append([case.name, run.label, shown, ratio, memory])
    return table


def work(results: list[dict[str, Any]]) -> tuple[str, float]:
    """What a run's time was spent on: ("bytes", n), ("requests", n), or ("", 1) for a
    run that times a fixed task (bare checkpoints, a latency)."""
    sample = results[0]
    for kind in ("bytes", "requests"):
        if sample.get(kind):
            return kind, float(sample[kind])
    return "", 1.0


def per_unit(value: float, results: list[dict[str, Any]], base_work: tuple[str, float]) -> float:
    """``value`` scaled to the first row's amount of work, so that rows moving different
    amounts of the same thing compare as time per byte or request."""
    kind, amount = work(results)
    return value * base_work[1] / amount if kind and kind == base_work[0] else value


def describe(run: Run, results: list[dict[str, Any]], value: float) -> str:
    if run.metric == "seconds":
        sample = results[0]
        if "bytes" in sample:
            return f"{value:.3f} s  ({sample['bytes'] / value / MB:.1f} MB/s)"
        if "requests" in sample:
            rate = statistics.median(r["requests"] / r["seconds"] for r in results)
            latency = ""
            if all("p99_us" in r for r in results):
                p50, p99 = median(results, "p50_us"), median(results, "p99_us")
                latency = f"; p50 {p50:,.0f} us, p99 {p99:,.0f} us"
            return f"{value:.3f} s  ({rate:,.0f} req/s{latency}{cpu_per_request(results)})"
        return f"{value:.3f} s"
    if run.metric.endswith("_us"):
        p50 = median(results, "p50_us")
        if not all("p99_us" in r for r in results):
            return f"p50 {p50:.0f} us"
        return f"p50 {p50:.0f} us, p99 {median(results, 'p99_us'):.0f} us"
    if run.metric == "bytes_per_connection":
        return describe_idle(lambda key: median(results, key))
    return f"{value:,.0f} B/stream"


def cpu_per_request(results: list[dict[str, Any]]) -> str:
    """ ", CPU/request: client X us, server Y us" (medians), from what the peers report."""
    sides = []
    for side, key in (("client", "cpu_seconds"), ("server", "server_cpu_seconds")):
        seconds = per_request_median(results, key)
        if seconds is not None:
            sides.append(f"{side} {seconds * 1e6:.0f} us")
    return f"; CPU/request: {', '.join(sides)}" if sides else ""


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


def parser() -> argparse.ArgumentParser:
    """The command's arguments (``python -m benchmarks`` adds its own)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness")
    parser.add_argument("--runs", type=int, help="runs per implementation (default 3, quick 1)")
    parser.add_argument("--json", type=Path, help="where to save results (default benchmarks/results/)")
    parser.add_argument(
        "--require-baselines", action="store_true", help="fail if a baseline (js, py-libp2p) cannot run"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command: run the cases, print the table and the targets, save the JSON."""
    command = parser()
    run(command, command.parse_args(argv))
    return 0


def run(
    command: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[Case], list[list[str]], int]:
    """Run what ``args`` names; the cases with their results, the table, runs per row."""
    unknown = unknown_cases(args.cases)
    if unknown:
        named = ", ".join(map(repr, unknown))
        command.error(f"no case named {named}; the cases are: {', '.join(case_names())}")
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
    if saved is not None:
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
    return suite, table, runs


def saved_run(path: Path) -> tuple[list[Case], list[list[str]], dict[str, Any]]:
    """A run saved by ``run`` (its JSON): the cases with their results, the table, and
    the saved fields."""
    saved = json.loads(path.read_text())
    suite = cases(saved["quick"], set(saved["cases"]))
    for case in suite:
        case.results = saved["cases"][case.name]["results"]
        case.runs = [run for run in case.runs if run.label in case.results]  # rows added since
    return suite, rows(suite), saved


if __name__ == "__main__":
    sys.exit(main())
