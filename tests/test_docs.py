"""The documentation's programs run and print what the pages say they print."""

from __future__ import annotations

import html.parser
import pathlib
import posixpath
import re
import subprocess
import sys
import urllib.parse

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
    assert len([name for name, _, _ in EXAMPLES if name.startswith("tutorial-")]) == 6


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
    described = text[text.index("Readonly properties defined here") :]
    for attribute, words in [
        ("id", "The stream number"),
        ("is_initiator", "True if this side opened the stream"),
        ("name_bytes", "The raw name"),
    ]:
        assert f"|  {attribute}\n |      {words}" in described


class _Links(html.parser.HTMLParser):
    """The links and anchors of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "href" and value is not None:
                self.links.append(value)
            elif name in ("id", "name") and value is not None:
                self.anchors.add(value)


@pytest.mark.external  # needs sphinx, which only the main venv installs (the docs extra)
def test_every_link_of_the_built_site_resolves(tmp_path: pathlib.Path) -> None:
    """Every link from one page of the site to another reaches a page and an anchor
    that exist (a link into the repository's files, like ``examples/x.py`` written
    relative to the README, would not)."""
    out = tmp_path / "html"
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    pages = {}
    for page in out.rglob("*.html"):
        parsed = _Links()
        parsed.feed(page.read_text())
        pages[page.relative_to(out).as_posix()] = parsed
    broken = []
    for name, page in pages.items():
        for link in page.links:
            target = urllib.parse.urlsplit(link)
            if target.scheme or link.startswith(("mailto:", "//")):
                continue  # another site's: intersphinx, the project's links
            path = name
            if target.path:
                path = posixpath.normpath(posixpath.join(posixpath.dirname(name), target.path))
            if path not in pages:
                if not (out / path).is_file():
                    broken.append(f"{name}: {link} (no such page)")
                continue
            if target.fragment and target.fragment not in pages[path].anchors:
                broken.append(f"{name}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)
    assert len(pages) > 10
