"""Writes the README's interop matrix from the results of tests/test_interop.py.

Each interop test carries ``@pytest.mark.interop("<scenario>")`` and runs once per
peer and role.  When a run includes every one of them, the table between the
README's ``interop-matrix`` markers is replaced by what this run saw, so the matrix
can only say what the tests proved.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.peers import PEERS, ROLES

# tests/libp2p needs py-libp2p, which lives in its own venv: `make test-libp2p` runs
# it there with MPLEX_LIBP2P_TESTS=1, where a missing py-libp2p is an error.
if not os.environ.get("MPLEX_LIBP2P_TESTS"):
    collect_ignore = ["libp2p"]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = "<!-- interop-matrix:start -->"
END = "<!-- interop-matrix:end -->"

# nodeid -> (scenario, peer, role); nodeid -> outcome
_cells: dict[str, tuple[str, str, str]] = {}
_outcomes: dict[str, str] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("interop")
        callspec = getattr(item, "callspec", None)
        if mark is not None and callspec is not None:
            _cells[item.nodeid] = (mark.args[0], callspec.params["peer"], callspec.params["role"])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid not in _cells:
        return
    if report.failed:
        _outcomes[report.nodeid] = "FAIL"
    elif report.skipped:
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call":
        _outcomes.setdefault(report.nodeid, "pass")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _cells or set(_outcomes) != set(_cells):
        return  # a partial run (-k, -x, a subset of files) proves too little to publish
    README.write_text(replace_matrix(README.read_text(), render_matrix()))


def peer_versions() -> str:
    lock = json.loads((ROOT / "tests" / "interop" / "package-lock.json").read_text())["packages"]
    js = ", ".join(
        f"`{name}` {lock[f'node_modules/{name}']['version']}"
        for name in ("@libp2p/mplex", "@libp2p/multistream-select")
    )
    pins = re.findall(r'"(libp2p==[^"]+)"', (ROOT / "pyproject.toml").read_text())
    return f"js-libp2p: {js}; py-libp2p: `{pins[0]}`"


def render_matrix() -> str:
    columns = [(peer, role) for peer in PEERS for role in ROLES]
    scenarios = list(dict.fromkeys(scenario for scenario, _, _ in _cells.values()))
    table = {(cell[0], cell[1], cell[2]): _outcomes[nodeid] for nodeid, cell in _cells.items()}
    lines = [
        f"Written by the last complete run of `tests/test_interop.py` ({peer_versions()}).",
        "",
        "| scenario | " + " | ".join(f"{peer}, {role}" for peer, role in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for scenario in scenarios:
        cells = [table.get((scenario, peer, role), "n/a") for peer, role in columns]
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replace_matrix(readme: str, matrix: str) -> str:
    start, end = readme.index(START) + len(START), readme.index(END)
    return readme[:start] + "\n" + matrix + "\n" + readme[end:]
