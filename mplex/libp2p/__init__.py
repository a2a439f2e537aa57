"""This mplex inside py-libp2p hosts (needs the ``libp2p`` extra).

``pip install 'trio-mplex[libp2p]'``, then::

    host = libp2p.new_host(muxer_opt=mplex.libp2p.muxer_options())

``import mplex`` never imports this module, nor py-libp2p.

* ``MplexMuxedConn``: py-libp2p's ``IMuxedConn`` over ``mplex.Muxer``;
  ``MplexMuxedConn.configured(config)`` binds a non-default ``mplex.Config``.
* ``MplexMuxedStream``: py-libp2p's ``IMuxedStream`` over ``mplex.MplexStream``.
* ``SecuredConnectionStream``: a ``trio.abc.Stream`` over py-libp2p's secured
  connection, for other trio protocols.
* ``muxer_options(config=None)``: the mapping for ``new_host(muxer_opt=...)``.
"""

from __future__ import annotations

try:
    import libp2p as _libp2p  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("mplex.libp2p needs py-libp2p: pip install 'trio-mplex[libp2p]'") from exc

from mplex import _publish_loaded

from ._conn import MplexMuxedConn as MplexMuxedConn
from ._conn import muxer_options as muxer_options
from ._stream import QUEUE_AT_ONCE as QUEUE_AT_ONCE
from ._stream import YIELD_EVERY as YIELD_EVERY
from ._stream import MplexMuxedStream as MplexMuxedStream
from ._stream import StreamResetWhileWriting as StreamResetWhileWriting
from ._transport import MAX_SECURE_MESSAGE as MAX_SECURE_MESSAGE
from ._transport import SecuredConnectionStream as SecuredConnectionStream

_publish_loaded()  # the names the muxer loaded print as mplex.X from the start

__all__ = [
    "MAX_SECURE_MESSAGE",
    "QUEUE_AT_ONCE",
    "YIELD_EVERY",
    "MplexMuxedConn",
    "MplexMuxedStream",
    "SecuredConnectionStream",
    "StreamResetWhileWriting",
    "muxer_options",
]
