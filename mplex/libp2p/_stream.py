"""``MplexMuxedStream``: py-libp2p's ``IMuxedStream`` over an ``mplex.MplexStream``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

import trio
from libp2p.abc import IMuxedStream
from libp2p.stream_muxer.mplex.exceptions import MplexStreamClosed, MplexStreamEOF, MplexStreamReset

import mplex

if TYPE_CHECKING:
    from ._conn import MplexMuxedConn

__all__ = ["MplexMuxedStream", "StreamResetWhileWriting"]


class StreamResetWhileWriting(MplexStreamClosed, MplexStreamReset):
    """A write after the peer reset the stream.

    Both of py-libp2p's errors: ``MplexStreamClosed`` is what its own mplex raises
    here (and what its ``NetStream`` turns into ``StreamClosed``), ``MplexStreamReset``
    says what happened.
    """


class _TurnLock:
    """Tasks take turns; taking a free turn does not yield (the operation it guards
    is a checkpoint already), so one writer pays nothing for it."""

    def __init__(self) -> None:
        self._held = False
        self._lot = trio.lowlevel.ParkingLot()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        while self._held:
            await self._lot.park()
        self._held = True
        try:
            yield
        finally:
            self._held = False
            self._lot.unpark()


class MplexMuxedStream(IMuxedStream):
    """One mplex stream as py-libp2p sees it.

    * ``read(n)`` returns up to ``n`` bytes as soon as any are there; ``read()`` reads
      to the end.  The end of the stream raises ``MplexStreamEOF`` (py-libp2p's
      ``MuxedStreamEOF``); a reset, or the connection's end, ``MplexStreamReset``.
      Data that arrived before a reset is read first.
    * ``write`` never waits for a read: the stream is full duplex.  Concurrent
      writers take turns.  After our ``close()`` it raises ``MplexStreamClosed``;
      after the peer's reset ``StreamResetWhileWriting``.
    * ``close()`` is a half-close (we send no more, the peer may); ``reset()`` ends
      both directions.  ``set_deadline`` bounds each later read and write
      (``TimeoutError``).
    """

    def __init__(self, muxed_conn: MplexMuxedConn, stream: mplex.MplexStream) -> None:
        self.muxed_conn = muxed_conn
        #: The underlying ``mplex.MplexStream`` (a ``trio.abc.HalfCloseableStream``).
        self.stream = stream
        self.name = stream.name
        self.read_deadline: float | None = None
        self.write_deadline: float | None = None
        self._reading = _TurnLock()
        self._writing = _TurnLock()

    @property
    def is_initiator(self) -> bool:
        """True if this side opened the stream."""
        return self.stream.is_initiator

    # -- reading --------------------------------------------------------------------------

    async def read(self, n: int | None = None) -> bytes:
        """Up to ``n`` bytes (``None``: everything to the end of the stream)."""
        if n is not None and n < 0:
            raise ValueError(f"n must be >= 0 or None, not {n}")
        if n == 0:
            await trio.lowlevel.checkpoint()
            return b""
        with self._deadline(self.read_deadline, "read"), self._translated(writing=False):
            async with self._reading.turn():
                if n is not None:
                    data = await self.stream.receive_some(n)
                    if not data:
                        raise MplexStreamEOF("the peer closed the stream")
                    return data
                return await self._read_to_end()

    async def _read_to_end(self) -> bytes:
        chunks = []
        while data := await self.stream.receive_some():
            chunks.append(data)
        if not chunks:
            raise MplexStreamEOF("the peer closed the stream")
        return b"".join(chunks)

    # -- writing --------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Send ``data`` (waits while the connection's send buffer is full)."""
        with self._deadline(self.write_deadline, "write"), self._translated(writing=True):
            async with self._writing.turn():
                await self.stream.send_all(data)

    # -- ending ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Half-close: send our end of the stream; reading goes on.  Idempotent."""
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            async with self._writing.turn():
                await self.stream.send_eof()

    async def reset(self) -> None:
        """End both directions at once and tell the peer."""
        self.stream.reset()
        await trio.lowlevel.checkpoint()

    def set_deadline(self, ttl: float) -> None:
        """Bound every later read and write to ``ttl`` seconds (``TimeoutError``)."""
        self._check_ttl(ttl)
        self.read_deadline = self.write_deadline = ttl

    def set_read_deadline(self, ttl: float) -> None:
        """Bound every later read to ``ttl`` seconds."""
        self._check_ttl(ttl)
        self.read_deadline = ttl

    def set_write_deadline(self, ttl: float) -> None:
        """Bound every later write to ``ttl`` seconds."""
        self._check_ttl(ttl)
        self.write_deadline = ttl

    def get_remote_address(self) -> tuple[str, int] | None:
        """The connection's remote address, if its transport knows one."""
        return self.muxed_conn.get_remote_address()

    async def __aenter__(self) -> MplexMuxedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<MplexMuxedStream {self.stream!r}>"

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def _check_ttl(ttl: float) -> None:
        if not ttl >= 0:
            raise ValueError(f"a deadline is >= 0 seconds, not {ttl}")

    @staticmethod
    @contextlib.contextmanager
    def _deadline(ttl: float | None, operation: str) -> Iterator[None]:
        if ttl is None:
            yield
            return
        try:
            with trio.fail_after(ttl):
                yield
        except trio.TooSlowError:
            raise TimeoutError(f"{operation} timed out after {ttl} seconds") from None

    @contextlib.contextmanager
    def _translated(self, *, writing: bool) -> Iterator[None]:
        """Our errors as py-libp2p's."""
        try:
            yield
        except mplex.StreamReset as exc:
            if writing and exc.by_peer:
                raise StreamResetWhileWriting(str(exc)) from exc
            if writing:
                raise MplexStreamClosed(str(exc)) from exc
            raise MplexStreamReset(str(exc)) from exc
        except (mplex.ConnectionLost, mplex.MuxerClosed) as exc:
            if writing:
                raise MplexStreamClosed(str(exc)) from exc
            raise MplexStreamReset(str(exc)) from exc
        except trio.ClosedResourceError as exc:  # closed (writing) or reset here
            if writing:
                raise MplexStreamClosed(str(exc)) from exc
            raise MplexStreamReset(str(exc)) from exc
