"""Sphinx configuration of the documentation site (`make docs`)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import mplex  # noqa: E402  (after the path is set)

project = "trio-mplex"
author = "the trio-mplex authors"
copyright = "2026, the trio-mplex authors"
release = version = mplex.__version__

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

# py-libp2p is optional: the reference of mplex.libp2p is built without it installed.
autodoc_mock_imports = ["libp2p", "multiaddr"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

myst_heading_anchors = 3
# The pages take their text from the README, spec and results files, whose links point
# at files of the repository rather than at pages of this site.
suppress_warnings = ["myst.xref_missing"]

html_theme = "alabaster"
html_title = f"trio-mplex {release}"
html_theme_options = {"description": "libp2p mplex for trio", "fixed_sidebar": True}
