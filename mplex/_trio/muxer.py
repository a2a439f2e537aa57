"""Muxer: many mplex streams over one ``trio.abc.Stream``.

Theory of operation
-------------------
The library is in two layers (``docs/design.md`` draws them):

* The **sans-IO protocol** (``mplex/_engine/``) owns every protocol rule: the codec,
  one ``StreamRecord`` per stream (its state on the wire, its directions, its unread
  data), the table, ids, limits, the accept backlog, tombstones, the abuse budgets, and
  the ``Outbox`` of bytes to send.  Its ``Connection`` answers through methods: bytes
  go in with ``receive_data``, the program's actions on streams go in too, and what
  the layer above must act on comes out of ``take_notice``.  It never imports trio.
* The **trio layer** (``mplex/_trio/``) moves bytes and wakes tasks.  The ``Driver``
  (``driver``) runs the protocol over a ``Transport`` (``transport/``: the socket
  fast path or the generic path over any ``trio.abc.Stream``) with two tasks: the
  ``Reader`` (``reader``), the one loop that reads, and the ``Writer`` (``writer``),
  the one that writes, with its flush policy.  ``ReaderThrottle`` (``throttle``)
  pauses the reader for slow readers.  Each ``MplexStream`` (``stream``) is a handle
  on a record that talks to its driver through ``StreamHost``.

A frame from the peer: the reader (or a task in ``receive_some`` that borrowed the read
turn) reads the transport, the engine decodes the bytes and delivers each Message to
its record's unread data, and the driver reschedules the task parked on that
record.  A frame to the peer: ``send_all`` appends it whole to the outbox; the writer
writes the outbox in one transport write, or, over the socket path after a quiet
spell, the sending task hands it to the kernel with one non-blocking write.

The connection's own state is kept by its ``Lifecycle``: it runs until the peer or the
transport ends it (``BROKEN``) or we close it (``CLOSED``).  Whatever ends it, every
stream breaks with a ``ConnectionLost`` (or ``MuxerClosed``) chained to the cause,
every waiting task wakes, and both tasks stop.  Buffered data stays readable; the
error comes after it.  A failed write ends only the send side at first: the reader
delivers what the peer had sent (``Reader.linger``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol, final

import trio

from .._engine.config import Config
from .._engine.states import ConnectionState
from .._engine.stats import MuxerStats
from .._engine.wire import name_bytes
from ._util import checked_config, checked_transport, protected, require_trio
from .driver import Driver
from .errors import ConnectionLost, EndReason, MuxerClosed, Unwrapping
from .openings import ArrivalWatcher
from .stream import MplexStream

__all__ = ["Arrivals", "Muxer", "open_muxer", "start_on_arrival"]


@final
class Muxer:
    """An mplex connection over ``transport_stream``.

    Start it with ``await nursery.start(muxer.run)`` (or use ``open_muxer``), then
    ``open_stream()`` and ``accept_stream()``.  ``aclose()`` flushes what was queued
    and closes the transport.  The reader runs in the task that runs ``run()``, which
    ``open_muxer`` names ``mplex <name>`` (``name`` is the connection's log label;
    ``serve_connection`` runs it itself).  The writer is a task of its own, named
    ``mplex writer <name>``, while the connection writes, beside the one running
    ``run()`` in the nursery that started it: it starts when frames wait for it and
    ends with ``run()``, or once it has written nothing for ``WRITER_IDLES_FOR``
    seconds or so, so an idle connection holds one task.  The names are for debuggers and trio
    instruments.
    """

    # (Slots: a program holds a muxer for each of its connections.)
    # fmt: off
    __slots__ = (
        "__weakref__", "_driver", "_entered", "_own_run", "_started",
    )
    # fmt: on

    def __init__(self, transport_stream: trio.abc.Stream, config: Config | None = None) -> None:
        transport_stream = checked_transport(transport_stream)
        self._driver = Driver(transport_stream, checked_config(config))
        self._started = False
        self._entered = False
        self._own_run: contextlib.AbstractAsyncContextManager[Muxer] | None = None

    # -- what it is ----------------------------------------------------------------------------

    @property
    def config(self) -> Config:
        """The connection's settings (the default ``Config`` if none was given)."""
        return self._driver.config

    @property
    def name(self) -> str:
        """A label for this connection in log lines: a sequence number and, when the
        transport is a socket (or TLS over one), the peer's address."""
        return self._driver.name

    @property
    def stats(self) -> MuxerStats:
        """A read-only snapshot of this connection's counters (take a new one any time)."""
        return self._driver.stats()

    @property
    def transport_stream(self) -> trio.abc.Stream:
        """The stream this muxer runs over (as ``trio.SSLStream.transport_stream``)."""
        return self._driver.transport_stream

    @property
    def uses_socket_fast_path(self) -> bool:
        """True when this muxer drives a TCP socket's descriptor directly (see
        ``Config.socket_fast_path``); False on the generic path over the stream's methods."""
        return self._driver.transport.kind == "socket"

    @property
    def end_reason(self) -> EndReason | None:
        """Why the connection ended (an ``EndReason``), or None while it runs."""
        return self._driver.life.end_reason

    @property
    def end_error(self) -> ConnectionLost | MuxerClosed | None:
        """The error the connection's streams got when it ended, or None while it runs.

        A ``ConnectionLost`` (its ``__cause__`` is the transport error or the
        ``ProtocolError``, None for the peer's clean end of input) or a ``MuxerClosed``.
        """
        return self._driver.life.error

    @property
    def closed(self) -> bool:
        """True once the connection has ended, for whatever reason."""
        return not self._driver.life.running

    def __repr__(self) -> str:
        reason = self.end_reason
        if reason is not None:
            state = f"ended: {reason.value}"
        else:
            state = "running" if self._started else "not started"
        path = "socket fast path" if self.uses_socket_fast_path else "generic path"
        return f"<mplex.Muxer {self.name} {state}, {len(self._driver.protocol.streams)} streams, {path}>"

    # -- running and closing ---------------------------------------------------------------

    def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> Coroutine[Any, Any, None]:
        """Run the reader and writer until the connection ends.

        Use as ``await nursery.start(muxer.run)``.  Returns normally however the
        connection ends (peer EOF, transport error, protocol error, ``aclose()``):
        the reason is logged, kept in ``end_reason`` and ``end_error``, and delivered
        to every stream; it never crashes the caller's nursery.  On cancellation it
        closes the connection and re-raises.  While there is something to write, a
        writer task (named ``mplex writer ...``) runs beside it in the same nursery,
        and ends with it (awaited directly, ``run`` keeps that task in a nursery of
        its own).

        The transport's handshake (TLS over ``trio.SSLStream``) happens first, before
        ``run`` counts as started, within ``Config.handshake_timeout``: a failure raises
        ``ConnectionLost`` (the ``ssl`` error as its cause) from ``nursery.start`` or
        the ``async with``, once.  So both ends of one TLS connection in one task must
        be started concurrently, as they would be in two programs.

        A plain method that returns the coroutine to await (``await muxer.run()``
        works as for an async method): a running connection holds no frame of it.  A
        second call, or a call outside trio, raises at once.
        """
        require_trio("Muxer.run()")
        if self._started:
            raise RuntimeError("Muxer.run() was already called")
        self._started = True
        # The coroutine the driver hands out, not one of ours awaiting it: a connection
        # holds the frames of its task for its whole life.
        return self._driver.run(task_status)

    @protected
    async def aclose(self) -> None:
        """Flush queued frames, close the transport, and end every stream.

        Intake stops first: from then on, sends and ``open_stream`` raise
        ``MuxerClosed`` (a ``trio.ClosedResourceError``), so tasks that keep sending
        cannot keep it open.  What was queued before is flushed for at most
        ``Config.close_timeout`` seconds; then the transport is closed and streams
        still open get ``MuxerClosed``.  Closes even when cancelled (skipping the
        flush).  Idempotent.  If a write failed and lost data the program had sent (its
        last words, say, when the flush fails), and no call has raised that failure
        yet, ``aclose`` closes all the same, then raises it once: ``ConnectionLost``
        with the transport's error as its cause (``end_reason`` ``TRANSPORT_FAILED``).
        Lost control frames alone (both ends closing at once) raise nothing.
        """
        driver = self._driver
        life = driver.life
        if not life.running:
            await trio.lowlevel.checkpoint()
            if life.closed_after_break():
                await driver.close_transport()
            return
        try:
            driver.stop_sending(MuxerClosed("the muxer is closing"))
            if self._started:
                with trio.move_on_after(self.config.close_timeout):
                    writer, outbox = driver.writer, driver.outbox
                    while (outbox.buffer or writer.writing) and life.running:
                        await writer.wait_for_room()
        finally:
            driver.end(MuxerClosed("the muxer was closed"), None, final_state=ConnectionState.CLOSED)
            try:
                await driver.close_transport()
            finally:
                if not self._started:
                    driver.finished()  # run() would have, had it been called
        if life.lost_data and not life.reported:
            life.raise_ended()  # the program's last data did not leave: never lost unseen

    @protected
    async def __aenter__(self) -> Muxer:
        """``async with Muxer(transport) as muxer:`` runs it for the block, like
        ``open_muxer``; a muxer already running is just closed on exit.  A muxer is
        entered once: entering it again, or after it ended, raises ``RuntimeError``."""
        require_trio("async with mplex.Muxer")
        if self.closed:
            raise RuntimeError(
                f"this Muxer has ended ({self.end_reason.value if self.end_reason else 'closed'}); "
                "a new connection needs a new Muxer"
            )
        if self._entered:
            raise RuntimeError("this Muxer was already entered; a Muxer is entered once (`async with`)")
        self._entered = True
        if not self._started:
            self._own_run = _open_running(self)
            await self._own_run.__aenter__()
        return self

    @protected
    async def __aexit__(self, *exc_info: Any) -> bool | None:
        """Close the muxer: see ``aclose``."""
        own, self._own_run = self._own_run, None
        if own is not None:
            return await own.__aexit__(*exc_info)
        await self.aclose()
        return None

    # -- streams ---------------------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started and not self.closed:
            raise RuntimeError(
                "this Muxer is not running: use `async with mplex.open_muxer(transport)`, "
                "`async with mplex.Muxer(transport)`, or `await nursery.start(muxer.run)`"
            )

    @protected
    async def open_stream(self, name: str | bytes | None = None) -> MplexStream:
        """Open a new stream; ``name`` is sent to the peer (default: the stream number).

        A name longer than ``Config.max_stream_name_size`` bytes (or than one frame)
        raises ``ValueError`` before anything is taken or sent.

        Waits while ``Config.max_outbound_streams`` of our streams are open (a stream
        stops counting once this side has closed or reset it).
        """
        if name is None:
            raw = None
        else:  # the longest name it sends: the name limit within one frame
            config = self._driver.config
            raw = name_bytes(name, min(config.max_stream_name_size, config.max_send_frame_size))
        if not self._started:  # (the check's call skipped on the per-request path)
            self._check_started()
        return await self._driver.open_stream(raw)

    @protected
    async def accept_stream(self) -> MplexStream:
        """Wait for the next stream the peer opens.

        Streams that arrived before the connection ended are still handed out; after
        that it raises ``MuxerClosed`` (a ``trio.ClosedResourceError``: we closed the
        muxer) or ``ConnectionLost`` (a ``trio.BrokenResourceError``) carrying the
        reason.  ``async for stream in muxer`` instead simply ends.
        """
        self._check_started()
        return await self._driver.accept_stream()

    @protected
    def accept_stream_nowait(self) -> MplexStream:
        """The next stream the peer opened, if one is waiting; otherwise raises
        ``trio.WouldBlock`` at once (like ``trio.MemoryReceiveChannel.receive_nowait``).

        Not a checkpoint: a server that has just accepted one stream with
        ``accept_stream`` can take the others that arrived with it without a scheduler
        pass each.  Once the connection has ended and no stream waits, raises what
        ``accept_stream`` raises.
        """
        self._check_started()
        return self._driver.accept_nowait()

    def __aiter__(self) -> AsyncIterator[MplexStream]:
        """``async for stream in muxer``: inbound streams until the connection ends."""
        return self

    @protected
    async def __anext__(self) -> MplexStream:
        """The next inbound stream; the iteration ends when the connection does, for
        whatever reason (``end_reason`` and ``end_error`` then say why)."""
        try:
            return await self.accept_stream()
        except (MuxerClosed, ConnectionLost):
            raise StopAsyncIteration from None


def start_on_arrival(
    muxer: Muxer, watcher: ArrivalWatcher | None, host: trio.Nursery | None = None
) -> Arrivals:
    """Have ``watcher.start_waiting()`` called as streams arrive (None: no more),
    from the task that read them, before any task waiting in ``accept_stream`` is
    woken; what it leaves in the backlog is theirs.  ``serve_connection`` starts its
    handlers so, with no task of its own waiting in ``accept_stream``.  ``host``: a
    nursery open for as long as ``run`` runs, where the muxer's writer task starts
    (instead of a nursery of ``run``'s own); ``serve_connection`` lends its nursery of
    handlers.

    Returns what the watcher takes the streams from (``Arrivals.accept_waiting``)."""
    driver = muxer._driver
    driver.on_arrival = watcher
    driver.host = host
    return driver


class Arrivals(Protocol):
    """Where ``start_on_arrival``'s watcher takes the streams that arrived."""

    def accept_waiting(self) -> MplexStream | None:
        """``accept_stream_nowait``, but None once no stream waits (the connection
        may have ended), not an exception to raise and catch after every arrival."""


def open_muxer(
    transport_stream: trio.abc.Stream, config: Config | None = None
) -> contextlib.AbstractAsyncContextManager[Muxer]:
    """Run a ``Muxer`` for the duration of an ``async with`` block.

    On exit the muxer is closed (queued frames are flushed first) and its tasks end.
    The same as ``async with Muxer(transport_stream, config) as muxer:``.  An exception
    raised in the block reaches the caller as itself (``except mplex.ConnectionLost:``
    around the block works), not wrapped in an ``ExceptionGroup``; a group the block
    raises itself (its own nursery's, say) leaves as it was raised, and several at
    once still come as a group.
    """
    return Muxer(transport_stream, config)


@contextlib.asynccontextmanager
@protected
async def _open_running(muxer: Muxer) -> AsyncIterator[Muxer]:
    """Run ``muxer`` in a nursery of its own for the block; close it on exit.  What the
    block raises leaves as itself, not wrapped in the nursery's group (``_unwrapping``)."""
    with Unwrapping() as unwrapping:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(muxer.run, name=f"mplex {muxer.name}")
            except ConnectionLost as exc:  # the handshake failed
                # trio 0.27's start() re-raises it "from None": give it its cause back.
                ended = muxer.end_error
                if exc.__cause__ is None and ended is not None:
                    exc.__cause__ = ended.__cause__
                raise
            try:
                yield muxer
            except BaseException as exc:
                unwrapping.raised(exc)  # the block's own group, if it is one, stays whole
                # The block's exception comes first; a lost last flush stays in end_error.
                with contextlib.suppress(ConnectionLost):
                    await muxer.aclose()
                raise
            await muxer.aclose()
