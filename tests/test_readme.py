"""The README (the front page, also on PyPI): its quick start runs as written, and its
links work from anywhere."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_quick_start_prints_the_echoed_message() -> None:
    text = README.read_text()
    section = text[text.index("## Quick start") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    result = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello, mplex\n"


def _interop_scenarios() -> set[str]:
    from tests import test_interop

    functions = [
        getattr(value, name)
        for value in vars(test_interop).values()
        if isinstance(value, type)
        for name in dir(value)
        if name.startswith("test_")
    ]
    functions += [value for name, value in vars(test_interop).items() if name.startswith("test_")]
    return {
        mark.args[0]
        for function in functions
        for mark in getattr(function, "pytestmark", [])
        if mark.name == "interop"
    }


def test_interop_matrix_has_a_passing_row_for_every_scenario_the_tests_define() -> None:
    """The matrix is written by `make matrices` (tests/conftest.py); this catches a
    stale or edited one."""
    text = (ROOT / "docs" / "_matrices" / "interop.md").read_text()
    matrix = text[text.index("<!-- interop-matrix:start -->") : text.index("<!-- interop-matrix:end -->")]
    rows = [line.split(" | ") for line in matrix.splitlines() if line.startswith("| ") and "---" not in line]
    header, body = rows[0], rows[1:]
    assert header[1:] == [
        "js-libp2p, we dial",
        "js-libp2p, we listen",
        "py-libp2p, we dial",
        "py-libp2p, we listen |",
    ]
    assert {row[0].removeprefix("| ") for row in body} == _interop_scenarios()
    assert {cell.removesuffix(" |") for row in body for cell in row[1:]} <= {"pass", "n/a"}


def test_every_link_of_the_readme_is_absolute() -> None:
    """PyPI shows the README away from the repository: a relative link would not resolve."""
    links = re.findall(r"\]\(([^)]+)\)", README.read_text())
    assert links
    assert [link for link in links if not link.startswith("https://")] == []


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 170
    for heading in ("## Install", "## Quick start", "## The API at a glance", "## Documentation"):
        assert heading in text
    assert text.index("## Quick start") < text.index("## The `mplex` command")


def _version(text: str) -> tuple[int, ...]:
    """``"20.19"`` as ``(20, 19, 0)``: three parts, so that versions compare."""
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def _lowest_node(requirement: str) -> tuple[int, ...]:
    """The lowest Node version an ``engines.node`` requirement accepts."""
    return min(_version(v) for v in re.findall(r"\d+(?:\.\d+)*", requirement))


def test_the_node_version_the_readme_names_runs_the_pinned_js_peers() -> None:
    """Every package of the pinned npm install runs on the Node the README names, but
    those the README names as only warning about a newer one."""
    import json

    text = " ".join(README.read_text().split())
    named = re.search(r"Node\.js (\d+(?:\.\d+)*) or later", text)
    assert named is not None
    warning_only = set(re.findall(r"`([\w@/.-]+)` asks for Node \d+", text))
    lock = json.loads((ROOT / "tests" / "interop" / "package-lock.json").read_text())
    newer = {
        path.rsplit("node_modules/", 1)[-1]
        for path, package in lock["packages"].items()
        if "node" in package.get("engines", {})
        and _lowest_node(package["engines"]["node"]) > _version(named.group(1))
    }
    assert newer == warning_only


def test_every_make_target_the_readme_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    named = set(re.findall(r"`?make ([\w-]+)", README.read_text()))
    assert named and named <= targets, named - targets
