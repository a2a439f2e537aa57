"""What a user sees of the package from a REPL: ``dir()``, reprs."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import mplex
import mplex.testing

INIT = pathlib.Path(mplex.__file__)


def test_dir_lists_the_public_names_only() -> None:
    names = dir(mplex)
    assert set(names) == set(mplex.__all__) | {"testing"}
    for private in ("Any", "TYPE_CHECKING", "annotations", "importlib", "sys", "re", "functools"):
        assert private not in names
    for name in names:
        assert getattr(mplex, name) is not None  # each listed name resolves


async def test_a_muxer_and_a_stream_say_what_they_are() -> None:
    async with mplex.testing.open_muxer_pair() as (client, server):
        stream = await client.open_stream("chat")
        text = repr(client)
        assert text.startswith("<mplex.Muxer #") and "running, 1 streams, generic path" in text
        assert repr(stream) == "<MplexStream id=0 (ours) name='chat' open>"
        accepted = await server.accept_stream()
        assert "(theirs)" in repr(accepted)
    assert "ended: closed" in repr(client) or "ended: peer-closed" in repr(client)


def test_a_muxer_not_started_says_so() -> None:
    import trio.testing

    a, _ = trio.testing.memory_stream_pair()
    assert "not started" in repr(mplex.Muxer(a))


def test_the_public_api_is_written_once() -> None:
    """Each public name appears once in ``mplex/__init__.py``, as an import of its
    ``TYPE_CHECKING`` block (what type checkers read); ``__all__``, ``dir()`` and the
    lazy imports are made from that block, so they cannot drift from it."""
    tree = ast.parse(INIT.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    imported = [
        alias.asname for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names
    ]
    assert len(imported) == len(set(imported))
    assert sorted([*imported, "__version__"]) == sorted(mplex.__all__)
    assert not any(
        isinstance(node, ast.Assign | ast.AnnAssign) and "__all__" in ast.unparse(node) for node in tree.body
    )  # no second list
    source = INIT.read_text()
    for name in imported:
        assert source.count(f" {name} as {name}") == 1, name


def test_every_public_name_imports_in_a_fresh_interpreter() -> None:
    """The names resolve from the block alone, each from a fresh ``import mplex``."""
    code = "import mplex; [getattr(mplex, name) for name in mplex.__all__]; print(len(mplex.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(mplex.__all__)
