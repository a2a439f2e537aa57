"""Muxer: many mplex streams over one ``trio.abc.Stream``.

Theory of operation
-------------------
``run()`` starts two tasks in the caller's nursery and returns control once they are
running (``await nursery.start(muxer.run)``); ``open_muxer()`` does that for you.

The muxer is the trio layer over a few objects, each with one job:

* ``ConnectionCore`` (``_core``, sans-IO): the stream table, ids, stream limits, the
  accept backlog, tombstones and the abuse budgets, with time passed in.
* ``SendQueue`` (``_sendqueue``): whole frames waiting for the transport, and the
  flush policy that decides when the **writer** task takes them (at once after a
  quiet spell, when the program goes idle while it is busy, at 64 KiB, within
  ``Config.max_flush_delay``).  Appending is synchronous, so a frame is queued whole
  or not at all and cancellation cannot split one.
* ``UnreadData`` and each stream's ``ReceiveBuffer`` (``_receiving``): what was
  received and not read yet, per stream and for the whole connection; and
  ``ReaderThrottle`` (``_throttle``), the slow-reader policies that act on it.
* The transport seam: ``StreamPath`` (``_stream_path``), the generic path over any
  ``trio.abc.Stream``'s own ``send_all`` and ``receive_some``, or ``SocketPath``
  (``_socket_path``) for a TCP socket, chosen at construction
  (``Config.socket_fast_path``).  Both keep the read turn (``_read_turn``): which
  task reads the transport next.
* ``Encoder``: every frame the connection sends, data and control alike.

The **reader** owns the transport's receive side.  It feeds each chunk to the sans-IO
``Decoder`` (which merges adjacent Message frames of one stream) and dispatches the
frames: data to the stream's buffer, Close and Reset to the stream's state machine,
NewStream to the core's backlog.  Control answers (Reset for a refused or abandoned
stream) are queued synchronously, like everything else the writer sends.  After each
chunk the reader applies the slow-reader policy: under ``"block"`` it stops reading
while a stream is over ``Config.max_stream_buffer`` or all streams together are over
``Config.max_connection_buffer``; the transport's own flow control then pushes back on
the peer.  The reader never waits for anything else, so accepting and opening streams
keep working while it is blocked.

The reader lends the read turn: a task waiting in ``MplexStream.receive_some`` reads
the transport itself (``_receive_for``), once, so the transport's wake-up reaches the
task that wants the data without a second scheduler pass through the reader (over the
generic path only where a cancelled ``receive_some`` is known to lose nothing).  A
lone message after a quiet spell is written by its sender, not the writer; over the
socket path large sends go to the kernel with one ``writev`` straight from the
caller's buffer.  See spec section 8.

What streams ask of their connection is this module's small internal interface:
``_send_control``, ``_may_write_directly``/``_write_directly``, ``_may_lend``/
``_receive_for``, ``_wake_borrower``, ``_release_slot`` and ``_forget``;
streams append to the ``SendQueue`` and their ``ReceiveBuffer`` directly.

The connection's own state is a ``ConnectionState``: ``OK`` while it runs, then
``BROKEN`` (the peer or the transport ended it) or ``CLOSED`` (we did).  Whatever ends
it (transport EOF or error, a protocol error, ``aclose()``, cancellation of ``run()``),
``_fail()`` records why, marks every live stream broken with a ``ConnectionLost``
chained to the cause, wakes every waiting task and stops both loops.  Buffered data
stays readable; the error comes after it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import AsyncIterator
from typing import Any, NoReturn, final

import trio

from ._codec import MAX_MESSAGE_SIZE, Decoder, Encoder, Flag, RawFrame
from ._config import Config
from ._core import ConnectionCore, key_of
from ._errors import ConnectionLost, EndReason, MuxerClosed, fresh_copy
from ._exceptions import ProtocolError
from ._logging import ConnectionLog, connection_label, describe, logger
from ._read_turn import ReadTurn
from ._receiving import UnreadData
from ._sendqueue import SendQueue, wait_for_idle
from ._socket_path import POSIX_SOCKETS, SocketPath
from ._state import ConnectionState
from ._stats import Counters, MuxerStats
from ._stream import MplexStream
from ._stream_path import StreamPath
from ._throttle import ReaderThrottle

__all__ = ["Muxer", "open_muxer"]


#: The block _prime_allocator frees: above the largest buffer a bulk receive allocates
#: (reads of READ_SIZE, the joins of up to Config.max_stream_buffer plus one read).
_PRIME_BLOCK = 2 * 1024 * 1024

_RUNNING, _CLOSED, _BROKEN = ConnectionState.OK, ConnectionState.CLOSED, ConnectionState.BROKEN
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
        self.config = config if config is not None else Config()
        self._stats = Counters()
        self._transport = transport_stream
        self._decoder = Decoder(self.config.max_message_size, coalesce=True)
        self._core: ConnectionCore[MplexStream] = ConnectionCore(self.config)
        self._accept_lot = trio.lowlevel.ParkingLot()
        self._slot_lot = trio.lowlevel.ParkingLot()
        #: The one encoder of every frame this connection sends.
        self._encoder = Encoder(self.config.max_send_frame_size)
        self._queue = SendQueue(self.config.send_high_water, self.config.max_flush_delay)
        # The transport seam: a TCP socket is driven through its descriptor (the socket
        # fast path, POSIX only, unless Config.socket_fast_path is off); every other
        # transport through its own send_all and receive_some (the generic path).
        self._socket: SocketPath | None = None
        self._stream_path = StreamPath(transport_stream)
        self._turn: ReadTurn = self._stream_path
        self._queue.sender_send_all = transport_stream.send_all
        if self.config.socket_fast_path and isinstance(transport_stream, trio.SocketStream) and POSIX_SOCKETS:
            self._socket = SocketPath(transport_stream.socket, self._queue, lambda: self._state is _RUNNING)
            self._turn = self._socket
            self._queue.sender_send_all = None
        # Reader side.
        self._unread: UnreadData[MplexStream] = UnreadData(
            self.config.max_stream_buffer,
            self.config.max_connection_buffer,
            lambda: self._throttle.recheck(),  # noqa: PLW0108  (the throttle is built next)
        )
        self._throttle = ReaderThrottle(
            self.config,
            self._core,
            self._unread,
            self._queue,
            reset_stream=self._reset_by_policy,
            running=lambda: self._state is _RUNNING,
            on_stall=self._reader_paused,
        )
        self._reader_state = "reading"  # see MuxerStats.reader
        # Lifecycle.
        self._started = False
        self._state = _RUNNING
        self._error: ConnectionLost | MuxerClosed | None = None
        self._run_scope: trio.CancelScope | None = None
        self._own_run: contextlib.AbstractAsyncContextManager[Muxer] | None = None
        # Set once nothing more may be queued (aclose() began).
        self._send_error: ConnectionLost | MuxerClosed | None = None
        # Set once a write failed: its deadline bounds the wait for the input to end.
        self._linger_scope: trio.CancelScope | None = None
        #: A label for this connection in log lines: a sequence number and, when the
        #: transport is a socket (or TLS over one), the peer's address.
        self.name = connection_label(transport_stream)
        self._log = ConnectionLog(self.name)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def stats(self) -> MuxerStats:
        """A read-only snapshot of this connection's counters (take a new one any time)."""
        blocked = self._throttle.blocked_for()
        return self._stats.snapshot(
            frames_sent=self._queue.frames,
            bytes_sent=self._queue.bytes_sent,
            frames_received=self._decoder.frames_decoded,
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
        running = self._state is _RUNNING
        lent = self._turn.borrower if running else None
        return {
            "writer": self._queue.writer_state if running and self._send_error is None else "stopped",
            "reader": self._reader_state if running else "stopped",
            "reader_lent_to": lent.key if isinstance(lent, MplexStream) else None,
        }

    @property
    def uses_socket_fast_path(self) -> bool:
        """True when this muxer drives a TCP socket's descriptor directly (see
        ``Config.socket_fast_path``); False on the generic path over the stream's methods."""
        return self._socket is not None

    @property
    def end_reason(self) -> EndReason | None:
        """Why the connection ended (an ``EndReason``), or None while it runs."""
        return None if self._error is None else self._error.reason

    @property
    def end_error(self) -> ConnectionLost | MuxerClosed | None:
        """The error the connection's streams got when it ended, or None while it runs.

        A ``ConnectionLost`` (its ``__cause__`` is the transport error or the
        ``ProtocolError``, None for the peer's clean end of input) or a ``MuxerClosed``.
        """
        return self._error

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the reader and writer until the connection ends.

        Use as ``await nursery.start(muxer.run)``.  Returns normally however the
        connection ends (peer EOF, transport error, protocol error, ``aclose()``):
        the reason is logged, kept in ``end_reason`` and ``end_error``, and delivered
        to every stream; it never crashes the caller's nursery.  On cancellation it
        closes the connection and re-raises.
        """
        if self._started:
            raise RuntimeError("Muxer.run() was already called")
        self._started = True
        if self.config.prime_allocator:
            _prime_allocator()
        try:
            async with trio.open_nursery() as nursery:
                self._run_scope = nursery.cancel_scope
                if self._state is _RUNNING:
                    nursery.start_soon(self._read_loop, name=f"mplex reader {self.name}")
                    nursery.start_soon(self._write_loop, name=f"mplex writer {self.name}")
                task_status.started()
        finally:
            if self._state is _RUNNING:
                self._fail(MuxerClosed("the muxer's run() was cancelled"), final_state=_CLOSED)
            await trio.aclose_forcefully(self._transport)
            # Remote causes at INFO, never WARNING: see mplex._logging.
            level = logging.DEBUG if self.end_reason in _ORDINARY_ENDS else logging.INFO
            self._log.log(level, "connection ended: %s", describe(self._error))

    async def aclose(self) -> None:
        """Flush queued frames, close the transport, and end every stream.

        Intake stops first: from then on, sends and ``open_stream`` raise
        ``MuxerClosed`` (a ``trio.ClosedResourceError``), so tasks that keep sending
        cannot keep it open.  What was queued before is flushed for at most
        ``Config.close_timeout`` seconds; then the transport is closed and streams
        still open get ``MuxerClosed``.  Closes even when cancelled (skipping the
        flush).  Idempotent.
        """
        if self._state is not _RUNNING:
            await trio.lowlevel.checkpoint()
            if self._state is _BROKEN:
                self._state = _CLOSED
                await trio.aclose_forcefully(self._transport)
            return
        try:
            self._stop_sending(MuxerClosed("the muxer is closing"))
            if self._started:
                with trio.move_on_after(self.config.close_timeout):
                    queue = self._queue
                    while (queue.buffer or queue.writing) and self._state is _RUNNING:
                        await queue.wait_for_room()
        finally:
            self._fail(MuxerClosed("the muxer was closed"), final_state=_CLOSED)
            await trio.aclose_forcefully(self._transport)

    async def __aenter__(self) -> Muxer:
        """``async with Muxer(transport) as muxer:`` runs it for the block, like
        ``open_muxer``; a muxer already running is just closed on exit."""
        if not self._started and self._state is _RUNNING:
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

    @property
    def closed(self) -> bool:
        """True once the connection has ended, for whatever reason."""
        return self._state is not _RUNNING

    def _check_started(self) -> None:
        if not self._started and self._state is _RUNNING:
            raise RuntimeError(
                "this Muxer is not running: use `async with mplex.open_muxer(transport)`, "
                "`async with mplex.Muxer(transport)`, or `await nursery.start(muxer.run)`"
            )

    # -- streams ---------------------------------------------------------------------------

    async def open_stream(self, name: str | bytes | None = None) -> MplexStream:
        """Open a new stream; ``name`` is sent to the peer (default: the stream number).

        Waits while ``Config.max_outbound_streams`` of our streams are open (a stream
        stops counting once this side has closed or reset it).
        """
        if name is None:
            raw = None
        elif isinstance(name, str):
            raw = name.encode()
        elif isinstance(name, bytes):
            raw = bytes(name)
        else:
            raise TypeError(f"a stream name is str, bytes or None, not {type(name).__name__}")
        if raw is not None and len(raw) > MAX_MESSAGE_SIZE:
            raise ValueError(f"a stream name must fit one frame ({MAX_MESSAGE_SIZE} bytes)")
        self._check_started()
        await trio.lowlevel.checkpoint()
        while True:
            self._check_usable()
            if not self._queue.has_room:
                await self._queue.wait_for_room()  # NewStream is queued like data
            elif self._core.slot_free:
                break
            else:
                await self._slot_lot.park()
        stream_id = self._core.take_id()
        if raw is None:
            raw = str(stream_id).encode()
        stream = self._new_stream(stream_id, raw, is_initiator=True)
        self._core.add_outbound(stream)
        self._stats.streams_opened += 1
        self._send_control(stream_id, Flag.NEW_STREAM, raw)
        return stream

    def _new_stream(self, stream_id: int, name: bytes, *, is_initiator: bool) -> MplexStream:
        return MplexStream(
            self,
            stream_id,
            name,
            is_initiator=is_initiator,
            queue=self._queue,
            encoder=self._encoder,
            unread=self._unread,
        )

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
            backlog = self._core.backlog
            if backlog:
                await trio.lowlevel.checkpoint()
            while not backlog:
                if self._state is not _RUNNING:
                    await trio.lowlevel.checkpoint()
                    self._raise_ended()
                await self._accept_lot.park()
        finally:
            self._throttle.acceptors -= 1
            self._throttle.recheck()  # an accepted stream, or no acceptor left
        self._stats.streams_accepted += 1
        return self._core.backlog.popleft()

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

    def _check_usable(self) -> None:
        if self._state is not _RUNNING:
            self._raise_ended()
        if self._send_error is not None:
            _raise_copy(self._send_error)

    def _raise_ended(self) -> None:
        assert self._error is not None
        _raise_copy(self._error)

    # -- writer ----------------------------------------------------------------------------

    def _may_write_directly(self) -> bool:
        """True if a large send may go to the TCP socket from the sending task (when
        nothing is queued or being written, so order holds): the socket path is on,
        the send side is open, and frames are not being traced."""
        return (
            self._socket is not None
            and self._state is _RUNNING
            and self._send_error is None
            and not logger.isEnabledFor(logging.DEBUG)  # the writer traces frames
        )

    def _write_directly(self, stream_id: int, flag: Flag, view: memoryview, pos: int) -> int:
        """Frames of ``view[pos:]`` to the socket from the calling task (the caller
        checked ``may_write_directly``); return how far in ``view`` they reach.
        Whatever the kernel did not take is queued, whole, for the writer."""
        assert self._socket is not None
        encoder = self._encoder
        pos, frames = self._socket.write_frames(
            lambda size: encoder.prefix(stream_id, flag, size), encoder.frame_size, view, pos
        )
        if self._queue.buffer:
            self._queue.queued(frames)
        else:
            self._queue.frames += frames
        return pos

    def _send_control(self, stream_id: int, flag: Flag, body: bytes = b"") -> None:
        """Queue a control frame (NewStream, Close, Reset): it goes out whatever the
        send buffer holds.  Nothing is queued once the send side has ended."""
        if self._state is not _RUNNING or self._send_error is not None:
            return
        if flag >= Flag.RESET_RECEIVER:
            self._stats.resets_sent += 1
        self._queue.append_control(self._encoder.frame(stream_id, flag, body))

    async def _write_loop(self) -> None:
        send_all = self._transport.send_all if self._socket is None else self._socket.send_all
        queue = self._queue
        while True:
            data, skip = await queue.next_batch()
            if queue.failure is not None:  # a sender's own write failed
                await self._linger(queue.failure)
                return
            if logger.isEnabledFor(logging.DEBUG):  # one check per write, none per frame
                self._trace_sent(data, skip)
            queue.writing = True
            try:
                await send_all(data)
            except Exception as exc:  # any failure of any transport: the send side is lost
                queue.writing = False
                await self._linger(exc)
                return
            finally:
                queue.writing = False
            queue.sent(len(data))
            queue.batch_written()

    async def _linger(self, cause: Exception) -> None:
        """A write failed: end the send side, and let the reader deliver what the
        transport still hands over (a peer that sent everything and hung up).  The
        connection ends when the input does, or once the transport has delivered
        nothing for ``Config.close_timeout`` while the reader waited on it."""
        error = ConnectionLost("the transport failed while sending")
        error.__cause__ = cause
        self._stop_sending(error)
        self._queue.clear()
        self._linger_scope = trio.CancelScope()
        self._input_progressed(waiting=not self._throttle.blocked)
        with self._linger_scope:
            await trio.sleep_forever()
        self._end_by_failed_write()

    def _input_progressed(self, *, waiting: bool = True) -> None:
        """After a failed write: restart the wait for the input to end (none while
        the reader is held up by our own buffers)."""
        if self._linger_scope is not None:
            waited = self.config.close_timeout if waiting else math.inf
            self._linger_scope.deadline = trio.current_time() + waited

    def _trace(self, direction: str, frames: list[RawFrame]) -> None:
        """Log frames at DEBUG (received Message frames of one stream arrive merged)."""
        for header, body in frames:
            flag = header & 7
            name = Flag(flag).name if flag != 7 else "flag 7"
            side = "acceptor" if flag & 1 else "opener"
            self._log.debug("%s stream %d (%s) %s %d bytes", direction, header >> 3, side, name, len(body))

    def _trace_sent(self, data: bytearray, skip: int) -> None:
        """Trace the frames in ``data`` after its first ``skip`` bytes (the rest of a
        frame that a direct write began; -1: not known).  Never raises: the muxer's
        writer must not fail because of its own logging."""
        try:
            if skip < 0:
                self._log.debug("send %d bytes (resuming frames written directly)", len(data))
                return
            if skip:
                self._log.debug("send %d bytes (the rest of a frame written directly)", skip)
            decoder = Decoder(MAX_MESSAGE_SIZE)
            self._trace("send", decoder.feed_raw(memoryview(data)[skip:]))
        except Exception as exc:
            self._log.debug("send %d bytes (not traced: %r)", len(data), exc)

    # -- reader ----------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        """The reader: reads the transport whenever no receiving task holds the read
        turn (see ``_read_turn``), dispatches, and pauses for the slow-reader policy."""
        if self._socket is not None:
            await self._read_socket_loop(self._socket)
        else:
            await self._read_stream_loop(self._stream_path)

    async def _read_stream_loop(self, path: StreamPath) -> None:
        try:
            await path.prepare()
        except Exception as exc:  # a failed TLS handshake: the connection is lost
            self._receive_failed(exc)
            return
        while self._state is _RUNNING:
            if path.borrower is not None:
                await self._lend(path, until_idle=True)
                continue
            # A borrower moves the reader aside by cancelling this scope, which it does
            # only while the reader waits inside the transport's receive_some.
            with path.reader_scope():
                while self._state is _RUNNING and path.borrower is None:
                    if self._throttle.should_pause():
                        await self._throttle.pause()
                    self._reader_state = "waiting"
                    try:
                        data = await path.reader_receive()
                    except Exception as exc:  # any failure of any transport: it is lost
                        self._receive_failed(exc)
                        return
                    finally:
                        self._reader_state = "reading"
                    if not self._consume(data):
                        return

    async def _read_socket_loop(self, path: SocketPath) -> None:
        while self._state is _RUNNING:
            if self._throttle.should_pause():
                await self._throttle.pause()
            if path.borrower is not None:
                await self._lend(path)
                continue
            data = self._read_socket(path)
            if data is None:
                path.reader_waiting = True
                self._reader_state = "waiting"
                try:
                    await path.wait(trio.lowlevel.wait_readable)
                except (trio.ClosedResourceError, OSError) as exc:
                    self._receive_failed(exc)
                    return
                finally:
                    path.reader_waiting = False
                    self._reader_state = "reading"
                continue  # and look at the read turn again before reading
            if not self._consume(data):
                return
            # The kernel had data without waiting: yield once per read, as trio's
            # own receive_some does, so a flood cannot starve other tasks.
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _lend(self, turn: ReadTurn, *, until_idle: bool = False) -> None:
        """Park the reader while a receiving task holds the read turn.

        The task that gave the turn back is usually about to take it again (a
        request/response loop), so the reader lets it, before it waits on the
        transport and the task would have to move it out of there: one scheduler pass
        over the socket path (moving it costs one ``notify_closing``), and until the
        program goes idle (at most ``Config.max_flush_delay``) over the generic path,
        where moving it means cancelling a wait inside the transport.
        """
        self._reader_state = "lent"
        await turn.park_reader()
        self._reader_state = "reading"
        if until_idle:
            with trio.move_on_after(self.config.max_flush_delay):
                await wait_for_idle()
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _read_socket(self, path: SocketPath) -> bytes | None:
        """One non-blocking read: None if the socket has nothing now.  A failed read
        ends the connection and returns b"" (end of input)."""
        try:
            return path.read_nowait()
        except OSError as exc:
            self._receive_failed(exc)
            return b""

    def _wake_borrower(self, stream: MplexStream) -> None:
        """If ``stream``'s receiving task waits on the transport itself, wake it to
        look at its stream again."""
        if self._turn.borrower_waiting is stream:
            self._turn.wake_borrower()

    def _may_lend(self, *, bulk: bool = False) -> bool:
        """True if a receiving task may read the transport itself now (``_receive_for``).

        Not over the generic path to a stream taking a ``bulk`` transfer: there a read
        brings one TLS record or so, and handing the turn back and forth for each costs
        more than the reader task's wake-up saves; the turn pays off for the lone
        messages of a request/response exchange.

        Only while no stream has unread data: then the wait is for the peer, and the
        task that wants the next bytes should be the one the transport wakes.  While
        streams have data to read, the reader task (one read, then a yield) keeps the
        pace; if every waiting receiver read for itself, a hundred of them would read
        a hundred chunks in one scheduler pass and fill the buffers for nothing.
        """
        return (
            self._turn.borrower is None
            and self._turn.lends
            and not (bulk and self._socket is None)
            and not self._unread.total
            and not self._throttle.blocked
            and self._state is _RUNNING
        )

    async def _receive_for(self, stream: MplexStream) -> None:
        """One read of the transport in ``stream``'s receiving task, waiting for the
        transport first if it has nothing (the caller checked ``_may_lend``).

        What is read is dispatched as the reader would, to whichever streams it is
        for; if none of it is for ``stream``, the caller waits for the reader task
        like any other receiver (a busy connection is read by the reader, which
        yields between reads).  A checkpoint, like every receive.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._socket is not None:
            waited = await self._receive_from_socket(self._socket, stream)
        else:
            waited = await self._receive_from_stream(self._stream_path, stream)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _receive_from_socket(self, path: SocketPath, stream: MplexStream) -> bool:
        path.borrower = stream
        if path.reader_waiting:
            path.move_reader_aside()
        waited = False
        try:
            data = self._read_socket(path)
            if data is None:
                waited = True
                path.borrower_waiting = stream
                try:
                    await path.wait(trio.lowlevel.wait_readable)
                finally:
                    path.borrower_waiting = None
                if stream._waiting_for_data() and self._state is _RUNNING:
                    data = self._read_socket(path)
            if data is not None:
                self._consume(data)
        except (trio.ClosedResourceError, OSError) as exc:
            self._receive_failed(exc)
        finally:
            path.give_turn_back()
        return waited

    async def _receive_from_stream(self, path: StreamPath, stream: MplexStream) -> bool:
        path.borrower = stream
        waited = False
        try:
            if path.reader_waiting:
                path.move_reader_aside()
                waited = True
                await path.wait_reader_out()  # it may deliver what it had read meanwhile
            if stream._waiting_for_data() and self._state is _RUNNING:
                waited = True
                path.borrower_waiting = stream
                try:
                    data = await path.borrower_receive()
                finally:
                    path.borrower_waiting = None
                if data is not None:
                    self._consume(data)
        except Exception as exc:  # any failure of any transport: the connection is lost
            self._receive_failed(exc)
        finally:
            path.give_turn_back()
        return waited

    def _consume(self, data: bytes | bytearray) -> bool:
        """Decode and dispatch one chunk read from the transport; False once the
        connection has ended (b"" is the peer's end of input)."""
        if self._state is not _RUNNING:
            return False
        if not data:
            if not self._ended_by_failed_write():
                self._fail(ConnectionLost("the peer closed the connection", reason=EndReason.PEER_CLOSED))
            return False
        if self._linger_scope is not None:
            self._input_progressed()
        stats = self._stats
        stats.bytes_received += len(data)
        try:
            try:
                frames = self._decoder.feed_raw(data)
            except ProtocolError as exc:
                self._dispatch(exc.decoded)
                raise
            if logger.isEnabledFor(logging.DEBUG):  # one check per read, none per frame
                self._trace("recv", frames)
            self._dispatch(frames)
        except ProtocolError as exc:
            self._fail(
                ConnectionLost(f"the peer broke the mplex protocol: {exc}", reason=EndReason.PROTOCOL_ERROR),
                cause=exc,
            )
            return False
        return True

    def _receive_failed(self, exc: BaseException) -> None:
        if not self._ended_by_failed_write():
            self._fail(ConnectionLost("the transport failed while receiving"), cause=exc)

    def _ended_by_failed_write(self) -> bool:
        """The input ended after a write had failed: that failure is the reason."""
        if self._linger_scope is None:
            return False
        self._end_by_failed_write()
        return True

    def _end_by_failed_write(self) -> None:
        error = self._send_error
        assert error is not None
        self._fail(ConnectionLost(str(error)), cause=error.__cause__)

    def _dispatch(self, frames: list[RawFrame]) -> None:
        streams = self._core.streams
        for header, body in frames:
            flag = header & 7
            stream = streams.get(key_of(header))
            if flag in {1, 2}:
                if not body:  # ignored on receipt (spec 5.9): nothing to store or wake
                    self._ignored()
                elif stream is not None and stream._can_receive:
                    if stream._deliver(body):
                        self._throttle.overflowed(stream)
                elif stream is not None and stream._closed_locally:
                    stream._on_late_data()
                else:
                    self._dropped(header, stream)
            elif flag == 0:
                self._on_new_stream(header >> 3, body)
            else:
                if flag >= 5:
                    self._stats.resets_received += 1
                    self._core.spend(self._core.reset_budget, trio.current_time())
                if stream is None:
                    self._dropped(header, stream)
                elif not (stream._on_remote_reset() if flag >= 5 else stream._on_remote_close()):
                    self._stats.frames_dropped += 1
                    self._ignored()  # a repeated Close

    def _dropped(self, header: int, stream: MplexStream | None) -> None:
        """A frame nobody can use (see ``ConnectionCore.dropped_unknown``)."""
        self._stats.frames_dropped += 1
        if stream is not None:
            self._ignored()  # data after the peer's own Close, on a live stream
        else:
            self._core.dropped_unknown(header, trio.current_time())

    def _ignored(self) -> None:
        """A frame that changes nothing on a live stream: cheap, but not free."""
        self._core.spend(self._core.ignored_budget, trio.current_time())

    def _on_new_stream(self, stream_id: int, name: bytes) -> None:
        if self._core.refuses_inbound(stream_id, trio.current_time()):
            self._stats.streams_refused += 1
            self._send_control(stream_id, Flag.RESET_RECEIVER)
            return
        stream = self._new_stream(stream_id, name[: self.config.max_stream_name_size], is_initiator=False)
        if self._send_error is not None:
            stream._send_side_lost(self._send_error)
        self._core.add_inbound(stream)
        if self._accept_lot:
            self._accept_lot.unpark()

    # -- the slow-reader policy's verdicts -------------------------------------------------

    def _reset_by_policy(self, stream: MplexStream) -> None:
        """Give up on a slow (or never accepted) stream: free its unread data, reset it,
        and take it out of the accept backlog (nobody wants a stream reset unseen)."""
        stream._discard()
        if stream._reset_for_overflow():
            self._stats.streams_reset_by_policy += 1
        if self._core.unaccepted(stream):
            self._core.backlog.remove(stream)

    def _reader_paused(self, paused: bool) -> None:
        self._reader_state = "paused" if paused else "reading"
        # Time our own full buffers hold the reader up never counts as input silence.
        self._input_progressed(waiting=not paused)

    # -- bookkeeping -----------------------------------------------------------------------

    def _forget(self, stream: MplexStream) -> None:
        """The stream needs no more frames: drop it from the table, free its slot."""
        if self._core.forget(stream) and self._slot_lot:
            self._slot_lot.unpark()

    def _release_slot(self, stream: MplexStream) -> None:
        """Our ``stream`` no longer counts against ``max_outbound_streams``: this side
        closed or reset it, or it ended."""
        if self._core.release_slot(stream) and self._slot_lot:
            self._slot_lot.unpark()

    def _stop_sending(self, error: ConnectionLost | MuxerClosed) -> None:
        """No more frames may be queued: every send and open raises ``error``."""
        if self._send_error is not None:
            return
        self._send_error = error
        for stream in list(self._core.streams.values()):
            stream._send_side_lost(error)
        self._slot_lot.unpark_all()
        self._queue.wake_senders()

    def _fail(
        self,
        error: ConnectionLost | MuxerClosed,
        *,
        cause: BaseException | None = None,
        final_state: ConnectionState = _BROKEN,
    ) -> None:
        """End the connection: record why, break every stream, wake every waiter."""
        if self._state is not _RUNNING:
            return
        error.__cause__ = cause
        self._state = final_state
        self._error = error
        for stream in list(self._core.streams.values()):
            stream._connection_lost(error)
        self._queue.clear()
        for lot in (self._accept_lot, self._slot_lot):
            lot.unpark_all()
        self._throttle.wake()
        if self._run_scope is not None:
            self._run_scope.cancel()


@functools.cache
def _prime_allocator() -> None:
    """Free one ``_PRIME_BLOCK`` block, once per process (when the first muxer that
    allows it starts: ``Config.prime_allocator``), so that glibc's malloc keeps
    receive buffers in its heap instead of mapping each one afresh.

    glibc serves every block of 128 KiB or more with a fresh ``mmap`` and unmaps it
    when freed, until the program frees a larger mapped block: it then raises that
    threshold to the block's size and keeps twice as much free memory at the top of
    its heap.  A bulk receive allocates 256 KiB reads and joins of up to a stream's
    buffer, so without this it keeps going through fresh, page-faulted memory.
    ``bytes(n)`` is a ``calloc``, which touches no page of a fresh mapping, so this
    costs one ``mmap`` and one ``munmap``.  Other allocators simply allocate and free
    the block.
    """
    bytes(_PRIME_BLOCK)


def _raise_copy(error: ConnectionLost | MuxerClosed) -> NoReturn:
    """Raise a fresh copy of a recorded end, with the same cause."""
    raise fresh_copy(error) from error.__cause__


def open_muxer(
    transport_stream: trio.abc.Stream, config: Config | None = None
) -> contextlib.AbstractAsyncContextManager[Muxer]:
    """Run a ``Muxer`` for the duration of an ``async with`` block.

    On exit the muxer is closed (queued frames are flushed first) and its tasks end.
    The same as ``async with Muxer(transport_stream, config) as muxer:``.
    """
    return open_running(Muxer(transport_stream, config))


@contextlib.asynccontextmanager
async def open_running(muxer: Muxer) -> AsyncIterator[Muxer]:
    """Run ``muxer`` in a nursery of its own for the block; close it on exit."""
    async with trio.open_nursery() as nursery:
        await nursery.start(muxer.run)
        try:
            yield muxer
        finally:
            await muxer.aclose()
