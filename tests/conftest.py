"""Writes the documentation's interop matrices from what the tests saw, when asked.

An interop test carries ``@pytest.mark.interop("<scenario>")`` (tests/test_interop.py:
our muxer against js-libp2p's and py-libp2p's, once per peer and role) or
``@pytest.mark.host_interop("<scenario>")`` (tests/libp2p: py-libp2p hosts running
``mplex.libp2p``).  With ``MPLEX_WRITE_MATRICES=1`` (``make matrices``), a run that
includes every test of a matrix replaces the table in that matrix's file under
``docs/_matrices/`` by what it saw, so a matrix can only say what the tests proved.
An ordinary run writes nothing: tests do not edit the checkout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.peers import PEERS, ROLES

# tests/libp2p needs py-libp2p, which lives in its own venv: `make test-libp2p` runs
# it there with MPLEX_LIBP2P_TESTS=1, where a missing py-libp2p is an error.
if not os.environ.get("MPLEX_LIBP2P_TESTS"):
    collect_ignore = ["libp2p"]

# Some tests press Ctrl-C: tests/test_ctrl_c.py in this process, tests/test_cli.py in
# the programs it starts.  A shell without job control starts a background job with
# SIGINT ignored; Python then installs no handler of its own, and the programs started
# inherit the ignored signal, so those tests would fail for a reason of the launch.
# Python's default handler is put back (the programs started then get theirs too), and
# the run says so, in its header and at its end.
SIGINT_WAS_IGNORED = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
if SIGINT_WAS_IGNORED:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
MATRIX_FILES = ROOT / "docs" / "_matrices"
LOCK = ROOT / "tests" / "interop" / "package-lock.json"

#: The columns of the host matrix, from a test's parameters.
HOST_PAIRINGS = {
    "ours-ours": "ours both sides",
    "ours-dials-theirs": "we dial py-libp2p's mplex",
    "theirs-dials-ours": "py-libp2p's mplex dials us",
}


def _js_versions(*names: str) -> str:
    lock = json.loads(LOCK.read_text())["packages"]
    return ", ".join(f"`{name}` {lock[f'node_modules/{name}']['version']}" for name in names)


def _libp2p_pin() -> str:
    """The py-libp2p release the tests run against (pinned in constraints.txt)."""
    return re.findall(r"^(libp2p==\S+)", (ROOT / "constraints.txt").read_text(), re.MULTILINE)[0]


def _peer_column(params: dict[str, Any]) -> str:
    return f"{params['peer']}, {params['role']}"


def _host_column(params: dict[str, Any]) -> str:
    if "pairing" in params:
        return f"{params['security']}, {HOST_PAIRINGS[params['pairing']]}"
    return "js-libp2p node, we dial" if params["dialer"] == "python" else "js-libp2p node, it dials"


@dataclasses.dataclass
class Matrix:
    marker: str
    name: str  # its file's markers are <!-- {name}:start --> and <!-- {name}:end -->
    file: str  # under docs/_matrices/
    home: str  # the file or folder (under the checkout) of the tests that fill it
    column: Callable[[dict[str, Any]], str]
    caption: Callable[[], str]
    columns: list[str] = dataclasses.field(default_factory=list)
    cells: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # nodeid -> (row, column)
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)

    def complete(self) -> bool:
        """Every test of the matrix ran: each file of its home that fills it was
        collected, and no test collected was left unrun (by -k, -x, ...)."""
        home = ROOT / self.home
        sources = [home] if home.is_file() else sorted(home.rglob("test_*.py"))
        needed = {str(p.relative_to(ROOT)) for p in sources if f"mark.{self.marker}(" in p.read_text()}
        seen = {nodeid.split("::")[0] for nodeid in self.cells}
        return bool(self.cells) and needed <= seen and set(self.outcomes) == set(self.cells)

    def render(self) -> str:
        rows = list(dict.fromkeys(row for row, _ in self.cells.values()))
        table = {cell: self.outcomes[nodeid] for nodeid, cell in self.cells.items()}
        lines = [self.caption(), "", "| scenario | " + " | ".join(self.columns) + " |"]
        lines.append("|---|" + "---|" * len(self.columns))
        lines += [
            f"| {row} | " + " | ".join(table.get((row, c), "n/a") for c in self.columns) + " |"
            for row in rows
        ]
        return "\n".join(lines)

    def write(self) -> None:
        path = MATRIX_FILES / self.file
        text = path.read_text()
        start_marker, end_marker = f"<!-- {self.name}:start -->", f"<!-- {self.name}:end -->"
        start, end = text.index(start_marker) + len(start_marker), text.index(end_marker)
        path.write_text(text[:start] + "\n" + self.render() + "\n" + text[end:])


MATRICES = [
    Matrix(
        "interop",
        "interop-matrix",
        "interop.md",
        "tests/test_interop.py",
        _peer_column,
        lambda: (
            "Written by the last complete run of `tests/test_interop.py` (js-libp2p: "
            f"{_js_versions('@libp2p/mplex', '@libp2p/multistream-select')}; py-libp2p: `{_libp2p_pin()}`)."
        ),
        columns=[f"{peer}, {role}" for peer in PEERS for role in ROLES],
    ),
    Matrix(
        "host_interop",
        "host-matrix",
        "host.md",
        "tests/libp2p",
        _host_column,
        lambda: (
            "Written by the last complete run of `tests/libp2p` (py-libp2p hosts: "
            f"`{_libp2p_pin()}`; js-libp2p node: "
            f"{_js_versions('libp2p', '@libp2p/mplex', '@chainsafe/libp2p-noise', '@libp2p/tcp')})."
        ),
    ),
]


SIGINT_NOTE = "SIGINT was ignored when this run started (a background job?): Python's default handler is back"


def pytest_report_header() -> str | None:
    return SIGINT_NOTE if SIGINT_WAS_IGNORED else None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SIGINT_WAS_IGNORED:  # (the header is not shown with -q)
        terminalreporter.write_line(SIGINT_NOTE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        for matrix in MATRICES:
            mark = item.get_closest_marker(matrix.marker)
            if mark is not None and callspec is not None:
                column = matrix.column(callspec.params)
                if column not in matrix.columns:
                    matrix.columns.append(column)
                row = mark.args[0].format(**callspec.params)  # a row may name parameters
                matrix.cells[item.nodeid] = (row, column)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for matrix in MATRICES:
        if report.nodeid not in matrix.cells:
            continue
        if report.failed:
            matrix.outcomes[report.nodeid] = "FAIL"
        elif report.skipped:
            matrix.outcomes[report.nodeid] = "skipped"
        elif report.when == "call":
            matrix.outcomes.setdefault(report.nodeid, "pass")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not os.environ.get("MPLEX_WRITE_MATRICES"):
        return
    for matrix in MATRICES:
        # A partial run (-k, -x, a subset of files) proves too little to publish.
        if matrix.complete():
            matrix.write()
