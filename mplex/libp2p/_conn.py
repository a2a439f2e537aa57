"""``MplexMuxedConn``: py-libp2p's ``IMuxedConn`` over an ``mplex.Muxer``."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import trio
from libp2p.abc import IMuxedConn, ISecureConn
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.stream_muxer.mplex.exceptions import MplexUnavailable

import mplex

from ._stream import MplexMuxedStream
from ._transport import SecuredConnectionStream

__all__ = ["MplexMuxedConn", "muxer_options"]

logger = logging.getLogger("mplex.libp2p")

#: How long a cancelled connection still gives the swarm's ``on_close`` to run.
_ON_CLOSE_GRACE = 1.0


class MplexMuxedConn(IMuxedConn):
    """An mplex connection as py-libp2p's swarm sees it.

    py-libp2p builds it as ``cls(secured_conn, peer_id)`` once ``/mplex/6.7.0`` is
    negotiated; pass it with ``muxer_options()`` to ``libp2p.new_host(muxer_opt=...)``.
    ``start()`` runs the muxer until the connection ends, for whatever reason,
    and never raises (an exception escaping it would cancel the whole swarm).
    ``on_close`` (set by the swarm) is called exactly once, when the connection
    ends.  Once it has ended, ``open_stream`` and ``accept_stream`` raise
    ``MplexUnavailable`` (py-libp2p's ``MuxedConnUnavailable``).
    """

    #: The ``mplex.Config`` of connections made by this class (None: the defaults).
    config: ClassVar[mplex.Config | None] = None

    def __init__(
        self,
        secured_conn: ISecureConn,
        peer_id: ID,
        on_close: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self.secured_conn = secured_conn
        self.peer_id = peer_id
        self.on_close = on_close
        self.event_started = trio.Event()
        self.event_closed = trio.Event()
        #: The ``mplex.Muxer`` doing the work (its ``stats``, ``end_reason``...).
        self.muxer = mplex.Muxer(SecuredConnectionStream(secured_conn), self.config)
        self._ended = False

    @classmethod
    def configured(cls, config: mplex.Config) -> type[MplexMuxedConn]:
        """A subclass whose connections use ``config``: py-libp2p passes no options."""
        if not isinstance(config, mplex.Config):
            raise TypeError(f"config must be an mplex.Config, not {type(config).__name__}")
        return type(cls.__name__, (cls,), {"config": config, "__module__": cls.__module__})

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def is_initiator(self) -> bool:
        """True if this side dialed the connection."""
        return bool(self.secured_conn.is_initiator)

    @property
    def is_established(self) -> bool:
        """True while the muxer runs."""
        return self.event_started.is_set() and not self.muxer.closed

    @property
    def is_closed(self) -> bool:
        """True once the connection has ended."""
        return self.muxer.closed

    async def start(self) -> None:
        """Run the connection until it ends; set ``event_started`` once it runs."""
        if self._ended:
            await trio.lowlevel.checkpoint()
            return
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.muxer.run, name=f"mplex {self.muxer.name}")
                self.event_started.set()
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(_ON_CLOSE_GRACE):
                await self._end()
            raise
        except Exception:  # Muxer.run() returns however the peer behaves; never let a bug out
            logger.exception("mplex connection to %s failed", self.peer_id)
        await self._end()

    async def close(self) -> None:
        """Close the connection (queued frames are flushed first, within
        ``Config.close_timeout``).  Works before ``start()`` too.  Idempotent."""
        # py-libp2p closes connections expecting no error; a lost last flush stays in
        # the muxer's end_error.
        with contextlib.suppress(mplex.ConnectionLost):
            await self.muxer.aclose()
        if not self.event_started.is_set():
            await self._end()
        await self.event_closed.wait()

    async def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self.event_closed.set()
        on_close = self.on_close
        if on_close is None:
            return
        try:
            result = on_close()
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("the on_close callback for %s failed", self.peer_id)

    # -- streams ---------------------------------------------------------------------------

    async def open_stream(self) -> MplexMuxedStream:
        """Open a new stream to the peer."""
        return await self._stream_from(self.muxer.open_stream)

    async def accept_stream(self) -> MplexMuxedStream:
        """Wait for the next stream the peer opens."""
        return await self._stream_from(self.muxer.accept_stream)

    async def _stream_from(self, get: Callable[[], Awaitable[mplex.MplexStream]]) -> MplexMuxedStream:
        try:
            stream = await get()
        except (mplex.ConnectionLost, mplex.MuxerClosed, RuntimeError) as exc:
            # Ended, closed, or not started: py-libp2p's swarm expects this family.
            raise MplexUnavailable(f"the connection is not available: {exc}") from exc
        return MplexMuxedStream(self, stream)

    # -- what the swarm asks of the secured connection ---------------------------------------

    def get_remote_address(self) -> tuple[str, int] | None:
        """The remote address of the secured connection, if it knows one."""
        return self.secured_conn.get_remote_address()  # type: ignore[no-any-return]

    def get_transport_addresses(self) -> list[Any]:
        """The secured connection's transport addresses (multiaddrs)."""
        return list(self.secured_conn.get_transport_addresses())

    def get_connection_type(self) -> Any:
        """The secured connection's ``ConnectionType``."""
        return self.secured_conn.get_connection_type()

    def __repr__(self) -> str:
        return f"<MplexMuxedConn {self.muxer.name} peer={self.peer_id}>"


def muxer_options(config: mplex.Config | None = None) -> Mapping[TProtocol, type[IMuxedConn]]:
    """``libp2p.new_host(muxer_opt=mplex.libp2p.muxer_options())``: use this mplex."""
    conn_class = MplexMuxedConn if config is None else MplexMuxedConn.configured(config)
    return {TProtocol(mplex.PROTOCOL_ID): conn_class}
