"""``MplexMuxedStream``: py-libp2p's ``IMuxedStream`` over an ``mplex.MplexStream``."""

from __future__ import annotations

from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

import trio
from libp2p.abc import IMuxedConn, IMuxedStream
from libp2p.stream_muxer.mplex.exceptions import MplexStreamClosed, MplexStreamEOF, MplexStreamReset

import mplex

__all__ = ["QUEUE_AT_ONCE", "YIELD_EVERY", "MplexMuxedStream", "StreamResetWhileWriting"]

T = TypeVar("T")

#: A write of up to this many bytes is queued at once when the connection's send buffer
#: has room; a longer one goes through ``send_all`` (which waits for room as it goes, so
#: one write cannot queue megabytes past ``Config.send_high_water``).
QUEUE_AT_ONCE = 64 * 1024
#: A stream's writes that queued at once yield to the scheduler at least every this many
#: writes, so a loop of writes that never has to wait cannot starve other tasks.
YIELD_EVERY = 16

_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_yield = trio.lowlevel.cancel_shielded_checkpoint


class StreamResetWhileWriting(MplexStreamClosed, MplexStreamReset):
    """A write after the peer reset the stream.

    Both of py-libp2p's errors: ``MplexStreamClosed`` is what its own mplex raises
    here (and what its ``NetStream`` turns into ``StreamClosed``), ``MplexStreamReset``
    says what happened.
    """


class _TurnLock:
    """Tasks take turns, first come first served; taking a free turn does not yield
    (the operation it guards is a checkpoint already), so one writer pays nothing for
    it.  A turn given back while others wait passes straight to the longest waiting,
    so a task that takes turn after turn without waiting cannot shut the others out."""

    def __init__(self) -> None:
        self._held = False
        self._lot = trio.lowlevel.ParkingLot()

    async def take(self) -> None:
        """Wait for the turn (at once if nobody holds it); ``give_back()`` after."""
        if self._held:
            await self._lot.park()  # woken by give_back(), which passed the turn to us
        else:
            self._held = True

    def give_back(self) -> None:
        if self._lot:
            self._lot.unpark()  # the turn stays held: it is the woken task's now
        else:
            self._held = False


class MplexMuxedStream(IMuxedStream):
    """One mplex stream as py-libp2p sees it.

    * ``read(n)`` returns up to ``n`` bytes as soon as any are there; ``read()`` reads
      to the end.  The end of the stream raises ``MplexStreamEOF`` (py-libp2p's
      ``MuxedStreamEOF``); a reset, or the connection's end, ``MplexStreamReset``.
      Data that arrived before a reset is read first: ``read()`` returns it, and the
      next read raises the reset.
    * ``write`` never waits for a read: the stream is full duplex.  Concurrent
      writers take turns.  The first write, and the first after a read, goes out at
      once (``send_all``: a request or a reply).  The writes that follow it are a
      burst: each is a cancel point, and a short one (up to `QUEUE_AT_ONCE` bytes)
      that finds room in the send buffer is queued without a scheduling pass of its
      own, yielding only every `YIELD_EVERY` writes: py-libp2p's ``NetStream`` takes a
      ``trio.Lock`` around each write, which is a scheduling pass already, and a
      second one per write would double its cost.  After our
      ``close()`` it raises ``MplexStreamClosed``; after the peer's reset
      ``StreamResetWhileWriting``.
    * ``close()`` is a half-close (we send no more, the peer may); ``reset()`` ends
      both directions.  ``set_deadline`` bounds each later read and write
      (``TimeoutError``).
    """

    def __init__(self, muxed_conn: IMuxedConn, stream: mplex.MplexStream) -> None:
        self.muxed_conn = muxed_conn
        #: The underlying ``mplex.MplexStream`` (a ``trio.abc.HalfCloseableStream``).
        self.stream = stream
        self.name = stream.name
        self.read_deadline: float | None = None
        self.write_deadline: float | None = None
        self._reading = _TurnLock()
        self._writing = _TurnLock()
        self._writes_without_yield = 0
        # False until the stream's first write, and again after each read: the next
        # write is then a request or a reply, sent with send_all, which writes a lone
        # message from the calling task at once; the writes that follow it are a burst.
        self._writing_burst = False

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
        if self.read_deadline is not None:
            return await _within(self.read_deadline, "Read", self._read(n))
        return await self._read(n)

    async def _read(self, n: int | None) -> bytes:
        turn = self._reading
        await turn.take()
        try:
            if n is None:
                return await self._read_to_end()
            data = await self.stream.receive_some(n)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _read_error(exc) from exc
        finally:
            turn.give_back()
            self._writing_burst = False
        if not data:
            raise MplexStreamEOF("the peer closed the stream")
        return data

    async def _read_to_end(self) -> bytes:
        """Everything to the end of the stream.  A reset (or the connection's end)
        after some data returns that data; the next read raises it."""
        chunks = []
        try:
            while data := await self.stream.receive_some():
                chunks.append(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if not chunks:
                raise
            # The stream keeps raising it: the next read gets the error.
        if not chunks:
            raise MplexStreamEOF("the peer closed the stream")
        return b"".join(chunks)

    # -- writing --------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Send ``data`` (waits while the connection's send buffer is full)."""
        if self.write_deadline is not None:
            await _within(self.write_deadline, "Write", self._write(data))
        else:
            await self._write(data)

    async def _write(self, data: bytes) -> None:
        turn = self._writing
        await turn.take()
        try:
            if self._writing_burst and len(data) <= QUEUE_AT_ONCE:
                await _checkpoint_if_cancelled()  # cancelled: nothing queued
                try:
                    self.stream.send_nowait(data)
                except trio.WouldBlock:
                    pass  # the send buffer is full: send_all waits for room
                else:
                    self._writes_without_yield += 1
                    if self._writes_without_yield >= YIELD_EVERY:
                        self._writes_without_yield = 0
                        await _yield()
                    return
            self._writes_without_yield = 0
            await self.stream.send_all(data)
            self._writing_burst = True
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _write_error(exc) from exc
        finally:
            turn.give_back()

    # -- ending ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Half-close: send our end of the stream; reading goes on.  Idempotent."""
        await self._writing.take()
        try:
            await self.stream.send_eof()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # closed or reset already, or the connection is gone: nothing to send
        finally:
            self._writing.give_back()

    async def close_write(self) -> None:
        """Half-close, as ``close()``: py-libp2p's ``NetStream.close_write()`` calls this
        when a muxed stream has it, so that no transport's ``close()`` that ends both
        directions is used where only writing should end."""
        await self.close()

    @property
    def is_closed(self) -> bool:
        """True once the stream can carry nothing more either way (both sides closed
        it, it was reset, or its connection ended), as py-libp2p's
        ``NetStream.is_closed`` asks of a muxed stream."""
        return self.stream.closed

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
        address: tuple[str, int] | None = self.muxed_conn.get_remote_address()
        return address

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
            raise ValueError(f"a deadline must be non-negative, not {ttl}")


async def _within(ttl: float, operation: str, work: Coroutine[Any, Any, T]) -> T:
    """``work`` within ``ttl`` seconds, else py-libp2p's ``TimeoutError``."""
    try:
        with trio.fail_after(ttl):
            return await work
    except trio.TooSlowError:
        raise TimeoutError(f"{operation} operation timed out after {ttl} seconds") from None


def _read_error(exc: BaseException) -> Exception:
    """What py-libp2p's callers expect from a read that failed with ``exc``: a reset,
    whether the peer's, ours, or the connection's end."""
    error: Exception = MplexStreamReset(str(exc))
    return error


def _write_error(exc: BaseException) -> Exception:
    """What py-libp2p's callers expect from a write that failed with ``exc``."""
    error: Exception
    if isinstance(exc, mplex.StreamReset) and exc.by_peer:
        error = StreamResetWhileWriting(str(exc))
    else:
        error = MplexStreamClosed(str(exc))  # closed or reset here, or the connection ended
    return error
