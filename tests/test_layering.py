"""The sans-IO engine (``mplex._engine``) never imports trio; ``import mplex`` never
imports py-libp2p."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The sans-IO engine: every module of the mplex._engine package.
SANS_IO = sorted(
    "mplex._engine" + ("" if path.stem == "__init__" else f".{path.stem}")
    for path in (ROOT / "mplex" / "_engine").glob("*.py")
)


def test_sans_io_modules_do_not_import_trio() -> None:
    # Load the modules from their files without running mplex/__init__.py, which
    # imports the trio layer on purpose.
    code = (
        "import importlib.util, sys, pathlib\n"
        "import mplex as _probe\n"
        "root = pathlib.Path(_probe.__file__).parent\n"
        "for name in [n for n in sys.modules if n == 'trio' or n.startswith(('trio.', 'mplex'))]:\n"
        "    del sys.modules[name]\n"
        "pkg = importlib.util.module_from_spec(importlib.util.spec_from_file_location("
        "'mplex', root / '__init__.py', submodule_search_locations=[str(root)]))\n"
        "sys.modules['mplex'] = pkg\n"
        f"for mod in {SANS_IO!r}:\n"
        "    importlib.import_module(mod)\n"
        "print(sorted(n for n in sys.modules if n == 'trio' or n.startswith('trio.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_import_mplex_imports_neither_mplex_libp2p_nor_py_libp2p() -> None:
    code = (
        "import sys, mplex; print(sorted(n for n in sys.modules if n.startswith(('mplex.libp2p', 'libp2p'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
