"""Muxer: many mplex streams over one ``trio.abc.Stream``.

Theory of operation
-------------------
``run()`` starts two tasks in the caller's nursery and returns control once they are
running (``await nursery.start(muxer.run)``); ``open_muxer()`` does that for you.

The muxer is the trio layer over a few objects, each with one job:

* ``ConnectionCore`` (``_core``, sans-IO): the stream table, ids, stream limits, the
  accept backlog, tombstones and the abuse budgets, with time passed in.
* ``Reader`` (``_reader``): the **reader** task and the receive side.  It feeds what
  the transport delivers to the sans-IO ``Decoder`` (which merges adjacent Message
  frames of one stream) and dispatches the frames: data to the stream's buffer, Close
  and Reset to the stream's state machine, NewStream to the muxer (and the core's
  backlog).  It lends the read turn (``_read_turn``): a task waiting in
  ``MplexStream.receive_some`` reads the transport itself, once, so the transport's
  wake-up reaches the task that wants the data without a second scheduler pass (over
  the generic path only where a cancelled ``receive_some`` is known to lose nothing).
* ``UnreadData`` and each stream's ``ReceiveBuffer`` (``_receiving``): what was
  received and not read yet; ``ReaderThrottle`` (``_throttle``), the slow-reader
  policies that act on it.  Under ``"block"`` the reader stops reading while a stream
  is over ``Config.max_stream_buffer`` or all streams together are over
  ``Config.max_connection_buffer``, and the transport's flow control pushes back on
  the peer.  The reader never waits for anything else, so accepting and opening
  streams keep working while it is blocked.
* ``SendQueue`` (``_sendqueue``): whole frames waiting for the transport, and the
  flush policy that decides when the **writer** task (``Writer``, ``_writer``) takes
  them (at once after a quiet spell, when the program goes idle while it is busy, at
  64 KiB, within ``Config.max_flush_delay``).  Appending is synchronous, so a frame is
  queued whole or not at all and cancellation cannot split one.  No sender ever waits
  on the transport: over the socket path a lone message after a quiet spell, and a
  large send, go to the kernel from the sender with non-blocking writes (a large one
  with one ``writev`` from the caller's buffer), and what the kernel does not take is
  the writer's; over the generic path only the writer task writes.  Control frames go through
  ``Writer.send_control`` and the one ``Encoder``.
* The transport seam: ``StreamPath`` (``_stream_path``), the generic path over any
  ``trio.abc.Stream``'s own ``send_all`` and ``receive_some``, or ``SocketPath``
  (``_socket_path``) for a TCP socket, chosen at construction
  (``Config.socket_fast_path``).  See spec section 8.

A stream talks to its connection through a small internal interface: it appends to
the ``SendQueue`` and reads its ``ReceiveBuffer``; it asks the ``Writer`` for control
frames and direct writes, the ``Reader`` for the read turn (``may_lend``,
``receive_for``, ``wake_borrower``), and ``Streams`` (``_streams``) to
``release_slot`` and ``forget`` it.  The reader calls the stream methods listed under "events from the
muxer's reader" in ``_stream``.  Each direction of a stream has a busy guard
(``ConflictGuard``, ``_guard``: trio's ``ConflictDetector`` idiom).

The connection's own state is a ``ConnectionState`` kept by its ``Lifecycle``
(``_lifecycle``): ``OK`` while it runs, then ``BROKEN`` (the peer or the transport
ended it) or ``CLOSED`` (we did).  Whatever ends it (transport EOF or error, a
protocol error, ``aclose()``, cancellation of ``run()``), ``Lifecycle.end()`` records
why, and the muxer marks every live stream broken with a ``ConnectionLost``
chained to the cause, wakes every waiting task and stops both tasks.  Buffered data
stays readable; the error comes after it.  A failed write ends only the send side at
first: the reader delivers what the peer had sent (``Reader.linger``).
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import AsyncIterator
from typing import Any, final

import trio

from ._arguments import checked_config, checked_transport, require_trio
from ._endings import ConnectionLost, EndReason, MuxerClosed
from ._engine.config import Config
from ._engine.states import ConnectionState
from ._engine.stats import Counters, MuxerStats
from ._engine.table import ConnectionCore
from ._engine.unread import UnreadData, prime_allocator
from ._engine.wire import Encoder
from ._lifecycle import Ending, Lifecycle
from ._logging import ConnectionLog, connection_label, describe
from ._reader import Reader
from ._sendqueue import SendQueue
from ._socket_path import POSIX_SOCKETS, SocketPath
from ._stream import MplexStream
from ._stream_path import StreamPath
from ._streams import Streams, name_bytes, name_limit
from ._throttle import ReaderThrottle
from ._unwrapping import unwrapped
from ._writer import Writer

__all__ = ["Muxer", "open_muxer"]


_CLOSED = ConnectionState.CLOSED
#: Ends logged at DEBUG; the others (a failed transport, a broken protocol) at INFO.
_ORDINARY_ENDS = frozenset({EndReason.PEER_CLOSED, EndReason.CLOSED})


@final
class Muxer:
    """An mplex connection over ``transport_stream``.

    Start it with ``await nursery.start(muxer.run)`` (or use ``open_muxer``), then
    ``open_stream()`` and ``accept_stream()``.  ``aclose()`` flushes what was queued
    and closes the transport.  Its two tasks are named ``mplex reader <name>`` and
    ``mplex writer <name>`` (``name`` is the connection's log label), for debuggers
    and trio instruments.
    """

    def __init__(self, transport_stream: trio.abc.Stream, config: Config | None = None) -> None:
        transport_stream = checked_transport(transport_stream)
        self.config = config = checked_config(config)
        self._stats = Counters()
        self._transport = transport_stream
        self._core: ConnectionCore[MplexStream] = ConnectionCore(config)
        #: A label for this connection in log lines: a sequence number and, when the
        #: transport is a socket (or TLS over one), the peer's address.
        self.name = connection_label(transport_stream)
        self._log = ConnectionLog(self.name)
        # Lifecycle.
        self._started = False
        self._entered = False
        self._life = life = Lifecycle(self._send_side_ended, self._ended)
        self._run_scope: trio.CancelScope | None = None
        self._own_run: contextlib.AbstractAsyncContextManager[Muxer] | None = None
        # Send side.  The one encoder of every frame this connection sends.
        self._encoder = Encoder(config.max_send_frame_size)
        self._name_limit = name_limit(config)
        self._queue = SendQueue(config.send_high_water, config.max_flush_delay)
        # The transport seam: a TCP socket is driven through its descriptor (the socket
        # fast path, POSIX only, unless Config.socket_fast_path is off); every other
        # transport through its own send_all and receive_some (the generic path).
        path: StreamPath | SocketPath
        self._socket: SocketPath | None
        if config.socket_fast_path and isinstance(transport_stream, trio.SocketStream) and POSIX_SOCKETS:
            path = self._socket = SocketPath(transport_stream.socket, self._queue, life.running)
        else:
            path = StreamPath(transport_stream)
            self._socket = None
        self._writer = Writer(
            transport_stream,
            self._socket,
            queue=self._queue,
            encoder=self._encoder,
            stats=self._stats,
            log=self._log,
            may_send=life.may_send,
            on_failure=self._write_failed,
        )
        # Receive side.
        self._unread: UnreadData[MplexStream] = UnreadData(
            config.max_stream_buffer,
            config.max_connection_buffer,
            lambda: self._throttle.recheck(),  # noqa: PLW0108  (the throttle is built next)
        )
        self._throttle = ReaderThrottle(
            config,
            self._core,
            self._unread,
            self._queue,
            reset_stream=lambda stream: self._streams.reset_by_policy(stream),  # noqa: PLW0108  (built below)
            running=life.running,
            on_stall=lambda paused: self._reader.paused(paused),  # noqa: PLW0108  (built below)
        )
        self._reader = Reader(
            config,
            self._core,
            unread=self._unread,
            throttle=self._throttle,
            stats=self._stats,
            log=self._log,
            path=path,
            running=life.running,
            fail=lambda error, cause: life.end(error, cause=cause),
            on_new_stream=lambda stream_id, name: self._streams.on_new_stream(stream_id, name),  # noqa: PLW0108
        )
        self._streams = Streams(
            config,
            self._core,
            stats=self._stats,
            reader=self._reader,
            writer=self._writer,
            queue=self._queue,
            encoder=self._encoder,
            unread=self._unread,
        )

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def stats(self) -> MuxerStats:
        """A read-only snapshot of this connection's counters (take a new one any time)."""
        blocked = self._throttle.blocked_for()
        return self._stats.snapshot(
            frames_sent=self._queue.frames,
            bytes_sent=self._queue.bytes_sent,
            frames_received=self._reader.decoder.frames_decoded,
            reader_blocked_seconds=blocked,
            inbound_streams=self._core.inbound,
            outbound_streams=len(self._core.slots),
            streams_waiting=len(self._core.backlog),
            unread_bytes=self._unread.total,
            queued_bytes=len(self._queue.buffer),
            live_streams=len(self._core.streams),
            bytes_sent_without_copy=self._queue.bytes_sent_without_copy,
            **self._activity(),
        )

    def _activity(self) -> dict[str, Any]:
        """The reader's and writer's situation, for ``stats``."""
        running = self._life.running()
        lent = self._reader.turn.borrower if running else None
        return {
            "writer": self._queue.writer_state if self._life.may_send() else "stopped",
            "reader": self._reader.state if running else "stopped",
            "reader_lent_to": lent.key if isinstance(lent, MplexStream) else None,
        }

    @property
    def transport_stream(self) -> trio.abc.Stream:
        """The stream this muxer runs over (as ``trio.SSLStream.transport_stream``)."""
        return self._transport

    @property
    def uses_socket_fast_path(self) -> bool:
        """True when this muxer drives a TCP socket's descriptor directly (see
        ``Config.socket_fast_path``); False on the generic path over the stream's methods."""
        return self._socket is not None

    @property
    def end_reason(self) -> EndReason | None:
        """Why the connection ended (an ``EndReason``), or None while it runs."""
        return self._life.end_reason

    @property
    def end_error(self) -> ConnectionLost | MuxerClosed | None:
        """The error the connection's streams got when it ended, or None while it runs.

        A ``ConnectionLost`` (its ``__cause__`` is the transport error or the
        ``ProtocolError``, None for the peer's clean end of input) or a ``MuxerClosed``.
        """
        return self._life.error

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the reader and writer until the connection ends.

        Use as ``await nursery.start(muxer.run)``.  Returns normally however the
        connection ends (peer EOF, transport error, protocol error, ``aclose()``):
        the reason is logged, kept in ``end_reason`` and ``end_error``, and delivered
        to every stream; it never crashes the caller's nursery.  On cancellation it
        closes the connection and re-raises.
        """
        require_trio("Muxer.run()")
        if self._started:
            raise RuntimeError("Muxer.run() was already called")
        self._started = True
        if self.config.prime_allocator:
            prime_allocator()
        try:
            async with trio.open_nursery() as nursery:
                self._run_scope = nursery.cancel_scope
                if self._life.running():
                    nursery.start_soon(self._reader.run, name=f"mplex reader {self.name}")
                    nursery.start_soon(self._writer.run, name=f"mplex writer {self.name}")
                task_status.started()
        finally:
            self._life.end(MuxerClosed("the muxer's run() was cancelled"), final_state=_CLOSED)
            try:
                await self._close_transport()  # raises Cancelled if run() was cancelled
            finally:
                # Remote causes at INFO, never WARNING: see mplex._logging.
                level = logging.DEBUG if self.end_reason in _ORDINARY_ENDS else logging.INFO
                self._log.log(level, "connection ended: %s", describe(self._life.error))
                self._dismantle()

    def _dismantle(self) -> None:
        """The connection has ended and its tasks are done: break every reference
        cycle among its objects, so that reference counting alone frees them (and the
        unread data they hold) once the program drops the muxer and its streams.
        What the program may still do (read buffered data, look at ``stats``, get the
        end's error) keeps working."""
        self._life.detach()
        self._writer.detach()
        self._reader.detach()
        self._throttle.detach()
        self._unread.detach()
        self._queue.detach()
        self._run_scope = None
        # A recorded error's cause or context carries a traceback whose frames (ours,
        # finished) hold this connection's objects: keep the traceback, drop the locals.
        error = self._life.error
        for linked in (error.__cause__, error.__context__) if error is not None else ():
            while linked is not None:
                traceback.clear_frames(linked.__traceback__)
                linked = linked.__cause__ or linked.__context__

    async def aclose(self) -> None:
        """Flush queued frames, close the transport, and end every stream.

        Intake stops first: from then on, sends and ``open_stream`` raise
        ``MuxerClosed`` (a ``trio.ClosedResourceError``), so tasks that keep sending
        cannot keep it open.  What was queued before is flushed for at most
        ``Config.close_timeout`` seconds; then the transport is closed and streams
        still open get ``MuxerClosed``.  Closes even when cancelled (skipping the
        flush).  Idempotent.
        """
        life = self._life
        if not life.running():
            await trio.lowlevel.checkpoint()
            if life.closed_after_break():
                await self._close_transport()
            return
        try:
            life.stop_sending(MuxerClosed("the muxer is closing"))
            if self._started:
                with trio.move_on_after(self.config.close_timeout):
                    queue = self._queue
                    while (queue.buffer or queue.writing) and life.running():
                        await queue.wait_for_room()
        finally:
            life.end(MuxerClosed("the muxer was closed"), final_state=_CLOSED)
            try:
                await self._close_transport()
            finally:
                if not self._started:
                    self._dismantle()  # run() would have, had it been called

    async def _close_transport(self) -> None:
        """Close the transport at once.  Its own failure to close (a peer that already
        hung up, a TLS close_notify that cannot go) is logged and kept as the context of
        ``end_error``, never raised: the connection has ended either way."""
        try:
            await trio.aclose_forcefully(self._transport)
        except Exception as exc:  # any transport's aclose(): the connection is gone anyway
            self._log.debug("closing the transport failed: %r", exc)
            error = self._life.error
            if error is not None and error.__context__ is None:
                error.__context__ = exc

    async def __aenter__(self) -> Muxer:
        """``async with Muxer(transport) as muxer:`` runs it for the block, like
        ``open_muxer``; a muxer already running is just closed on exit.  A muxer is
        entered once: entering it again, or after it ended, raises ``RuntimeError``."""
        require_trio("async with mplex.Muxer")
        if not self._life.running():
            raise RuntimeError(
                f"this Muxer has ended ({self.end_reason.value if self.end_reason else 'closed'}); "
                "a new connection needs a new Muxer"
            )
        if self._entered:
            raise RuntimeError("this Muxer was already entered; a Muxer is entered once (`async with`)")
        self._entered = True
        if not self._started:
            self._own_run = open_running(self)
            await self._own_run.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        """Close the muxer: see ``aclose``."""
        own, self._own_run = self._own_run, None
        if own is not None:
            return await own.__aexit__(*exc_info)
        await self.aclose()
        return None

    def __repr__(self) -> str:
        reason = self.end_reason
        if reason is not None:
            state = f"ended: {reason.value}"
        else:
            state = "running" if self._started else "not started"
        path = "socket fast path" if self._socket is not None else "generic path"
        return f"<mplex.Muxer {self.name} {state}, {len(self._core.streams)} streams, {path}>"

    @property
    def closed(self) -> bool:
        """True once the connection has ended, for whatever reason."""
        return not self._life.running()

    def _check_started(self) -> None:
        if not self._started and self._life.running():
            raise RuntimeError(
                "this Muxer is not running: use `async with mplex.open_muxer(transport)`, "
                "`async with mplex.Muxer(transport)`, or `await nursery.start(muxer.run)`"
            )

    # -- streams ---------------------------------------------------------------------------

    async def open_stream(self, name: str | bytes | None = None) -> MplexStream:
        """Open a new stream; ``name`` is sent to the peer (default: the stream number).

        A name longer than ``Config.max_stream_name_size`` bytes (or than one frame)
        raises ``ValueError`` before anything is taken or sent.

        Waits while ``Config.max_outbound_streams`` of our streams are open (a stream
        stops counting once this side has closed or reset it).
        """
        raw = name_bytes(name, self._name_limit)
        self._check_started()
        return await self._streams.open(raw, self._life.check_usable)

    async def accept_stream(self) -> MplexStream:
        """Wait for the next stream the peer opens.

        Streams that arrived before the connection ended are still handed out; after
        that it raises ``MuxerClosed`` (a ``trio.ClosedResourceError``: we closed the
        muxer) or ``ConnectionLost`` (a ``trio.BrokenResourceError``) carrying the
        reason.  ``async for stream in muxer`` instead simply ends.
        """
        self._check_started()
        self._throttle.acceptors += 1
        try:
            return await self._streams.accept(self._life.running, self._life.raise_ended)
        finally:
            self._throttle.acceptors -= 1
            self._throttle.recheck()  # an accepted stream, or no acceptor left

    def __aiter__(self) -> AsyncIterator[MplexStream]:
        """``async for stream in muxer``: inbound streams until the connection ends."""
        return self

    async def __anext__(self) -> MplexStream:
        """The next inbound stream; the iteration ends when the connection does, for
        whatever reason (``end_reason`` and ``end_error`` then say why)."""
        try:
            return await self.accept_stream()
        except (MuxerClosed, ConnectionLost):
            raise StopAsyncIteration from None

    # -- what the reader and writer ask of the connection ---------------------------------

    async def _write_failed(self, cause: Exception) -> None:
        """A write failed: end the send side; the receive side lingers (``Reader.linger``)."""
        error = ConnectionLost("the transport failed while sending")
        error.__cause__ = cause
        self._life.stop_sending(error)
        self._queue.clear()
        assert self._life.send_error is not None  # ours, or aclose()'s if it came first
        await self._reader.linger(self._life.send_error)

    def _send_side_ended(self, error: Ending) -> None:
        self._streams.send_side_lost(error)
        self._queue.wake_senders()

    def _ended(self, error: Ending) -> None:
        """The connection ended: break every stream, wake every waiter, stop the tasks."""
        self._streams.connection_lost(error)
        self._queue.clear()
        self._throttle.wake()
        if self._run_scope is not None:
            self._run_scope.cancel()


def open_muxer(
    transport_stream: trio.abc.Stream, config: Config | None = None
) -> contextlib.AbstractAsyncContextManager[Muxer]:
    """Run a ``Muxer`` for the duration of an ``async with`` block.

    On exit the muxer is closed (queued frames are flushed first) and its tasks end.
    The same as ``async with Muxer(transport_stream, config) as muxer:``.  An exception
    raised in the block reaches the caller as itself (``except mplex.ConnectionLost:``
    around the block works), not wrapped in an ``ExceptionGroup``; several at once
    still come as a group.
    """
    return Muxer(transport_stream, config)


@contextlib.asynccontextmanager
async def open_running(muxer: Muxer) -> AsyncIterator[Muxer]:
    """Run ``muxer`` in a nursery of its own for the block; close it on exit.  What the
    block raises leaves as itself, not wrapped in the nursery's group (``_unwrapping``)."""
    with unwrapped():
        async with trio.open_nursery() as nursery:
            await nursery.start(muxer.run)
            try:
                yield muxer
            finally:
                await muxer.aclose()
