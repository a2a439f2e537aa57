"""The documentation's programs run and print what the pages say they print."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
# A program, then the text it prints.
EXAMPLE = re.compile(r"```python\n(.*?)```\n\nIt prints:\n\n```text\n(.*?)```", re.S)


def _examples() -> list[tuple[str, str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for number, match in enumerate(EXAMPLE.finditer(page.read_text()), 1):
            found.append((f"{page.stem}-{number}", match.group(1), match.group(2)))
    return found


def test_the_tutorial_has_its_programs() -> None:
    assert len([name for name, _, _ in EXAMPLES if name.startswith("tutorial-")]) == 5


EXAMPLES = _examples()


@pytest.mark.parametrize(("program", "printed"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES])
def test_a_program_prints_what_the_page_shows(program: str, printed: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed


def test_every_public_name_is_in_the_reference() -> None:
    import mplex

    reference = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto(?:class|function|data):: mplex\.(\w+)$", reference, re.M))
    assert set(mplex.__all__) - {"__version__"} <= documented


def test_help_of_a_stream_lists_what_identifies_it() -> None:
    import pydoc

    import mplex

    text = pydoc.render_doc(mplex.MplexStream, renderer=pydoc.plaintext)
    described = text[text.index("Data descriptors defined here") :]
    for attribute, words in [
        ("id", "The stream number"),
        ("is_initiator", "True if this side opened the stream"),
        ("name_bytes", "The raw name"),
    ]:
        assert f"|  {attribute}\n |      {words}" in described
