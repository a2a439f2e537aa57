"""A/B of this checkout against another, in turns: is a change slower anywhere?

    python -m benchmarks.ab OTHER_CHECKOUT [CASE ...] [--turns N]

Runs only this library's rows of each case (not the baselines, which do not change
between the two), alternating the two checkouts run by run so that both see the same
machine, and prints each row's median per checkout and the ratio this/other (of the
row's metric: seconds or microseconds, so above 1 means this checkout is slower).
Where both checkouts' peers report CPU time (the request/response case), the CPU per
request on each side gets a row of its own.
Each side's peers run from their own checkout (its working directory and
``PYTHONPATH``), with this checkout's case definitions: both must take the same peer
arguments.  The other checkout needs the same installs as this one (the js peer and
py-libp2p's venv, for the cases that use them; symbolic links will do).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from mplex._bench import cases, runner

#: Implementations that are this library (the others are baselines).
OURS = frozenset({"mplex", "memory", "host-ours", "host-js-to-ours"})


def run_from(checkout: Path, run: cases.Run) -> dict[str, Any]:
    """One run of ``run`` with the peers of ``checkout``."""
    os.chdir(checkout)
    runner.CHECKOUT = checkout / "benchmarks"
    runner.JS_PEER = runner.CHECKOUT / "js" / "peer.mjs"
    runner.JS_NODE = checkout / "tests" / "interop" / "libp2p_node.mjs"
    return runner.run_once(run, timeout=600)


def per_request(got: dict[Path, list[dict[str, Any]]]) -> list[tuple[str, str]]:
    """Extra rows, CPU per request on each side, where both checkouts' peers report it."""
    results = [r for runs in got.values() for r in runs]
    return [
        (f"  {side} CPU per request (us)", key)
        for side, key in (("client", "cpu_seconds"), ("server", "server_cpu_seconds"))
        if all(key in r and "requests" in r for r in results)
    ]


def value(result: dict[str, Any], metric: str) -> float:
    """The row's figure: CPU per request, time per request where a run counts its
    requests (the many-connections cases run for a fixed time), or the metric."""
    if metric.endswith("cpu_seconds") or (metric == "seconds" and "requests" in result):
        return float(result[metric]) / float(result["requests"]) * 1e6
    return float(result[metric])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__)
    parser.add_argument("other", type=Path, help="the other checkout (the code before a change)")
    parser.add_argument("cases", nargs="*", help="case names (default: every case)")
    parser.add_argument("--turns", type=int, default=3, help="runs per checkout and row (default 3)")
    args = parser.parse_args(argv)
    this = Path(__file__).resolve().parent.parent
    other = args.other.resolve()
    if not (other / "mplex").is_dir():
        parser.error(f"{other} is not a checkout of this project (no mplex/ in it)")
    picked = cases.cases(quick=False, only=set(args.cases))
    if not picked:
        parser.error(f"no such case: {', '.join(args.cases)}")
    print(f"this: {this}\nother: {other}\n{args.turns} turns, alternating\n")
    print(f"{'case':<22} {'row':<40} {'other':>10} {'this':>10} {'this/other':>10}")
    worst = 0.0
    for case in picked:
        for run in case.runs:
            if run.impl not in OURS:
                continue
            got: dict[Path, list[dict[str, Any]]] = {this: [], other: []}
            for turn in range(args.turns):
                order = (other, this) if turn % 2 == 0 else (this, other)
                for checkout in order:
                    got[checkout].append(run_from(checkout, run))
            for label, metric in [(run.label[:40], run.metric), *per_request(got)]:
                before, after = (statistics.median(value(r, metric) for r in got[c]) for c in (other, this))
                ratio = after / before
                worst = max(worst, ratio)
                row = f"{case.name:<22} {label:<40}"
                print(f"{row} {before:>10.4g} {after:>10.4g} {ratio:>9.2f}x", flush=True)
    print(f"\nslowest ratio: {worst:.2f}x (metric: seconds or us; lower is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
