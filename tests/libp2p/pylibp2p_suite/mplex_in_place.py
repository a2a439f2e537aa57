"""pytest plugin: py-libp2p's own test suite, with ``mplex.libp2p.MplexMuxedConn``
in place of py-libp2p's ``Mplex``.

Loaded with ``-p mplex_in_place`` from the root of py-libp2p's sdist (see
``run.py``), so it runs before the suite's conftest files and test modules import
``Mplex``: every ``Mplex`` they construct is ours, and the factories' hosts and
swarms use mplex (ours) instead of their default, yamux.  The suite's stream-pair
factory takes the second stream out of py-libp2p's internal table; ours takes the
one the connection handed out.

``MPLEX_SUITE_MUXER=theirs`` makes the baseline run instead: the same hosts and
swarms on py-libp2p's own mplex.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import trio

import mplex.libp2p


class InPlaceMplex(mplex.libp2p.MplexMuxedConn):
    """Ours, keeping the streams it accepted so the stream-pair factory can find the
    one the swarm took."""

    made = 0  # connections made in this run: proof that the tests ran ours

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        InPlaceMplex.made += 1
        self.accepted: list[mplex.libp2p.MplexMuxedStream] = []
        self.stream_accepted = trio.Event()

    async def accept_stream(self) -> mplex.libp2p.MplexMuxedStream:
        stream = await super().accept_stream()
        self.accepted.append(stream)
        self.stream_accepted.set()
        return stream


def _swap_in() -> None:
    import libp2p.stream_muxer.mplex.mplex as theirs
    from tests.utils import factories  # py-libp2p's tests package (the sdist root is on sys.path)

    if os.environ.get("MPLEX_SUITE_MUXER", "ours") == "theirs":
        factories.yamux_transport_factory = lambda: {theirs.MPLEX_PROTOCOL_ID: theirs.Mplex}
        return
    original = theirs.Mplex
    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "Mplex", None) is original:
            module.Mplex = InPlaceMplex  # type: ignore[attr-defined]
    factories.mplex_stream_pair_factory = _stream_pair
    factories.yamux_transport_factory = lambda: {theirs.MPLEX_PROTOCOL_ID: InPlaceMplex}


@contextlib.asynccontextmanager
async def _stream_pair(security_protocol: Any = None) -> AsyncIterator[tuple[Any, Any]]:
    from tests.utils import factories

    async with factories.mplex_conn_pair_factory(security_protocol=security_protocol) as (conn_0, conn_1):
        stream_0 = await conn_0.open_stream()
        with trio.fail_after(5):
            await conn_1.stream_accepted.wait()
        yield stream_0, conn_1.accepted[0]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if os.environ.get("MPLEX_SUITE_MUXER", "ours") == "ours":
        terminalreporter.write_line(f"mplex_in_place: {InPlaceMplex.made} connections ran mplex.libp2p")


_swap_in()
