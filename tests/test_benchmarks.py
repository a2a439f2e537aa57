"""The benchmark harness runs end to end (tiny sizes), with every baseline present.

Timings are not checked here (they belong to `make bench`); this proves the harness,
the js-libp2p peer and the py-libp2p peer work, so `make bench` cannot rot unnoticed.
A missing node or py-libp2p fails this test.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

# Needs node, the npm install and py-libp2p's venv: see the README.
pytestmark = pytest.mark.external

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_quick_suite_produces_every_case_and_baseline(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "quick.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--require-baselines", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads(out.read_text())
    labels = {(case, label) for case, data in saved["cases"].items() for label in data["results"]}
    assert ("32B", "js-libp2p mplex") in labels
    assert ("32B", "py-libp2p mplex (10.5 MB)") in labels
    assert ("fan-out", "js-libp2p mplex") in labels
    assert ("bulk 1 MiB, 512 B frames", "mplex") in labels
    assert ("TLS bulk 1 MiB", "raw trio SSLStream") in labels
    assert ("TLS 32B", "mplex send_nowait over bare TCP") in labels
    assert ("host 32B", "py-libp2p host, our mplex") in labels
    assert ("host latency", "js-libp2p node pair, mplex") in labels
    assert any(label.startswith("js-libp2p node dialing a py-libp2p host") for _, label in labels)
    # py-libp2p's own mplex cannot do full-duplex echo: its row says so (and the suite goes on).
    assert "did not complete" in result.stdout
    assert ("request/response", "js-libp2p mplex") in labels
    assert ("host request/response", "py-libp2p host, its yamux") in labels
    assert ("host perf download", "py-libp2p host, our mplex and perf") in labels
    assert any(label.startswith("py-libp2p host, its mplex and perf") for _, label in labels)
    assert ("1,000 connections, a request loop each", "js-libp2p mplex") in labels
    assert ("TLS 100 connections, a request loop each", "raw trio SSLStream, a connection per loop") in labels
    assert ("10,000 idle connections", "raw trio") in labels
    assert len(saved["cases"]) == 31
    # No verdicts at sizes that say nothing about speed, but every target is measurable.
    assert "Targets: not judged" in result.stdout
    verdicts = [line for line in result.stdout.splitlines() if line.endswith((" met", " MISSED"))]
    assert not verdicts
    from mplex._bench import cases as suite_cases
    from mplex._bench import report

    cases = suite_cases.cases(quick=True, only=set(saved["cases"]))
    for case in cases:
        case.results = saved["cases"][case.name]["results"]
    unmeasured = [row[0] for row in report.evaluate(cases) if row[1] == "not measured"]
    assert not unmeasured


def test_every_note_is_for_a_target_and_none_ships_in_the_package() -> None:
    from benchmarks import results
    from mplex._bench import report

    descriptions = {description for description, *_ in report.targets()}
    notes = results.kept_notes((ROOT / "benchmarks" / "RESULTS.md").read_text())
    on_targets = notes.split("\n## ", 1)[0]  # (later sections note changes, not targets)
    headings = {line[4:] for line in on_targets.splitlines() if line.startswith("### ")}
    hosts = {h for h in headings if h.startswith("py-libp2p hosts:")}
    assert headings - hosts <= descriptions
    shipped = "".join(path.read_text() for path in (ROOT / "mplex" / "_bench").glob("*.py"))
    assert "2026-" not in shipped  # dated narrative of runs belongs in benchmarks/
    assert "issue 3" not in shipped


def test_rewriting_results_keeps_the_notes_kept_by_hand() -> None:
    from benchmarks import results
    from mplex._bench.cases import Case, Run

    case = Case("fairness", "32 B ping-pong", [Run("mplex", "mplex", {})])
    case.results = {"mplex": [{"p99_us": 9000.0}]}  # 9 ms, over the 5 ms limit: missed
    target = next(d for d, _, _, v in results.evaluate([case]) if v == "MISSED")
    notes = f"{results.NOTES}\n\n### {target}\n\nWhy, on 2026-12-05.\n"
    text = results.results_markdown([case], "| table |", 3, "a machine", notes)
    assert results.kept_notes(text) == notes
    assert f"- **{target}**: see its note below." in text


def test_vs_first_compares_time_per_byte_only_between_rows_that_move_bytes() -> None:
    from mplex._bench.cases import Case, Run
    from mplex._bench.suite import rows

    case = Case(
        "32B",
        "",
        [
            Run("ours", "mplex", {}),
            Run("theirs, a tenth", "pylibp2p", {}),
            Run("checkpoints", "checkpoint", {}),
        ],
    )
    case.results = {
        "ours": [{"seconds": 2.0, "bytes": 1000}],
        "theirs, a tenth": [{"seconds": 2.0, "bytes": 100}],  # same time for a tenth of the bytes
        "checkpoints": [{"seconds": 4.0}],  # no bytes: a plain ratio of times
    }
    ratios = {row[1]: row[3] for row in rows([case])}
    assert ratios == {"ours": "", "theirs, a tenth": "10.00x", "checkpoints": "2.00x"}


def test_a_missed_target_points_at_where_it_is_explained() -> None:
    from mplex._bench import report
    from mplex._bench.cases import Case, Run

    case = Case("fairness", "", [Run("mplex", "mplex", {})])
    case.results = {"mplex": [{"p99_us": 9000.0}]}  # 9 ms, over the 5 ms limit
    text = report.targets_text([case])
    assert text.splitlines()[0].endswith("MISSED")
    assert "1 target(s) MISSED in this run" in text
    assert "benchmarks/RESULTS.md says why each is missed" in text
    case.results = {"mplex": [{"p99_us": 900.0}]}
    assert "MISSED" not in report.targets_text([case])
