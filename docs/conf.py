"""Sphinx configuration of the documentation site (`make docs`)."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

from sphinx.pycode import ModuleAnalyzer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import mplex  # noqa: E402  (after the path is set)

project = "trio-mplex"
author = "the trio-mplex authors"
copyright = "2026, the trio-mplex authors"
release = version = mplex.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.intersphinx", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# _matrices holds the interop tables that pages include (make matrices writes them).
exclude_patterns = ["_build", "_matrices"]
root_doc = "index"

# Every reference must resolve: a broken link is a warning, and `make docs` runs with
# warnings as errors.
nitpicky = True
nitpick_ignore_regex = [
    # Type variables and aliases of the private modules, which the reference does not list.
    ("py:class", r"mplex\._.*"),
    ("py:class", r"(S|T)"),
    # The internal types in MplexStream's constructor, which programs never call.
    ("py:class", r"(StreamHost|StreamRecord)"),
    # py-libp2p is optional and mocked here: its types have no page to link to.
    ("py:class", r"(libp2p\..*|ISecureConn|ID|TProtocol|IMuxedConn|IMuxedStream)"),
]


def _inventory(name: str, version: str) -> str:
    """Build ``_build/inventories/<name>.inv`` from ``_inventories/<name>.txt``: the
    builds reach no network, so trio's and Python's inventories come from lists kept
    here (tools/inventories.py makes trio's from its documentation source)."""
    lines = (ROOT / "docs" / "_inventories" / f"{name}.txt").read_text().splitlines()
    entries = [line.split() for line in lines if line and not line.startswith("#")]
    body = "".join(f"{entry[0]} {entry[1]} 1 {entry[2]} -\n" for entry in entries)
    header = f"# Sphinx inventory version 2\n# Project: {name}\n# Version: {version}\n"
    header += "# The remainder of this file is compressed using zlib.\n"
    out = ROOT / "docs" / "_build" / "inventories" / f"{name}.inv"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(header.encode() + zlib.compress(body.encode()))
    return str(out)


intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", _inventory("python", "3")),
    "trio": ("https://trio.readthedocs.io/en/stable/", _inventory("trio", "stable")),
}

# py-libp2p is optional: the reference of mplex.libp2p is built without it installed.
autodoc_mock_imports = ["libp2p", "multiaddr"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"trio-mplex {release}"
html_theme_options = {
    "description": "libp2p mplex for trio",
    "fixed_sidebar": True,
    # Wide enough for the code's 110-column lines and the interop tables at 1280 px.
    "page_width": "1240px",
    "sidebar_width": "210px",
}
html_static_path = ["_static"]
html_css_files = ["mplex.css"]


_PACKAGES = ("mplex", "mplex.libp2p")
_for_module = ModuleAnalyzer.for_module


def _for_module_with_private_comments(cls: type[ModuleAnalyzer], modname: str) -> ModuleAnalyzer:
    """``ModuleAnalyzer.for_module``, with the ``#:`` comments of ``mplex``'s (and
    ``mplex.libp2p``'s) private modules added to the package's own.  The public names
    say ``mplex`` in their ``__module__`` (as trio's say ``trio``), so autodoc looks for
    the comments that document constants and class fields in the package's
    ``__init__.py``; they are in the modules that define them.  (Done when autodoc
    first asks, under its mock of py-libp2p, since this imports the package.)"""
    analyzer = _for_module(modname)
    if modname in _PACKAGES and not getattr(analyzer, "_private_comments_added", False):
        analyzer.analyze()
        folder = ROOT.joinpath(*modname.split("."))
        for path in sorted([*folder.glob("_*.py"), *folder.glob("_*/*.py")]):
            if path.name.startswith("__"):  # (never __init__ or __main__)
                continue
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            private = ModuleAnalyzer.for_file(str(path), dotted)
            for key, comment in private.find_attr_docs().items():
                analyzer.attr_docs.setdefault(key, comment)
        analyzer._private_comments_added = True  # type: ignore[attr-defined]
    return analyzer


ModuleAnalyzer.for_module = classmethod(_for_module_with_private_comments)  # type: ignore[method-assign, assignment]
