"""What a user sees of the package from a REPL: ``dir()``, reprs."""

from __future__ import annotations

import mplex
import mplex.testing


def test_dir_lists_the_public_names_only() -> None:
    names = dir(mplex)
    assert set(names) == set(mplex.__all__) | {"testing"}
    for private in ("Any", "TYPE_CHECKING", "annotations", "importlib", "sys"):
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
