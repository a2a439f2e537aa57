"""RESULTS.md: the table of a full run, its targets, and the notes kept by hand.

``python -m benchmarks --write-results`` renders a run into benchmarks/RESULTS.md;
``--from-json PATH --write-results`` renders a saved one again.  Everything from the
notes' heading on (``NOTES``) is written by hand, dated, and kept as it is.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

from mplex._bench import suite
from mplex._bench.report import CaseLike, evaluate
from mplex._bench.runner import CHECKOUT

#: The heading from which RESULTS.md is kept by hand.
NOTES = "## Notes on the targets"
RESULTS = CHECKOUT / "RESULTS.md"


def results_markdown(
    cases: Sequence[CaseLike],
    table_md: str,
    runs: int,
    machine: str,
    notes: str,
    *,
    rendered_from: str = "",
) -> str:
    """RESULTS.md for one run, with ``notes`` (the kept part) at its end."""
    evaluated = evaluate(cases)
    again = (
        f" Rendered again from that run's saved results by `python -m benchmarks --from-json "
        f"{rendered_from} --write-results`."
        if rendered_from
        else ""
    )
    lines = [
        "# Benchmark results",
        "",
        "Made by `make bench` (`python -m benchmarks --write-results`) on "
        f"{datetime.date.today().isoformat()}; {runs} runs per implementation, medians.{again}",
        "",
        f"Machine: {machine}.",
        "",
        "Sender and receiver are separate processes over 127.0.0.1 TCP unless the row "
        "says memory (both muxers in one process over a trio memory stream). Every case "
        "runs its baselines in the same invocation, interleaved run by run. 'vs first' "
        "divides the row's median by the first row's of the case, per byte or request "
        "where rows move different amounts (times: above 1x the first row is faster; "
        "throughputs are shown in the row).",
        "",
        "## Cases",
        "",
        *[f"- **{c.name}**: {c.what}" for c in cases],  # type: ignore[attr-defined]
        "",
        "## Results",
        "",
        table_md,
        "",
        "## Targets",
        "",
        "| target | measured | limit | verdict |",
        "|---|---|---|---|",
        *[f"| {d} | {m} | {lim} | {v} |" for d, m, lim, v in evaluated],
        "",
    ]
    missed = [d for d, _, _, v in evaluated if v == "MISSED"]
    if missed:
        lines += ["## Why the missed targets are missed", ""]
        lines += [f"- **{d}**: {_pointer(d, notes)}" for d in missed]
        lines.append("")
    unmeasured = [d for d, _, _, v in evaluated if v == "baseline missing"]
    if unmeasured:
        lines += ["## Not measured in this run", "", *[f"- {d}" for d in unmeasured], ""]
    return "\n".join(lines) + "\n" + notes


def _pointer(target: str, notes: str) -> str:
    if f"### {target}\n" in notes:
        return "see its note below."
    return "no note yet: write one under the notes below."


def kept_notes(text: str) -> str:
    """The hand-kept part of a RESULTS.md: from ``NOTES`` to the end ("" if none)."""
    start = text.find(NOTES)
    return text[start:] if start >= 0 else ""


def write(
    cases: Sequence[CaseLike], table: list[list[str]], runs: int, machine: str, *, rendered_from: str = ""
) -> None:
    notes = kept_notes(RESULTS.read_text()) if RESULTS.is_file() else ""
    text = results_markdown(cases, suite.markdown(table), runs, machine, notes, rendered_from=rendered_from)
    RESULTS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks``: the suite, with RESULTS.md rendering."""
    command = suite.parser()
    command.add_argument("--write-results", action="store_true", help="rewrite benchmarks/RESULTS.md")
    command.add_argument("--from-json", type=Path, help="re-render a saved run instead of running")
    args = command.parse_args(argv)
    if args.quick and args.write_results:
        command.error("--quick sizes prove nothing about speed: RESULTS.md is written from full runs only")
    if args.from_json:
        cases, table, saved = suite.saved_run(args.from_json)
        print(suite.render(table))
        if args.write_results:
            write(cases, table, saved["runs"], saved["machine"], rendered_from=str(args.from_json))
        return 0
    cases, table, runs = suite.run(command, args)
    if args.write_results:
        write(cases, table, runs, suite.machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
