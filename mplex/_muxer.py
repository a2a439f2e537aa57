"""Muxer: many mplex streams over one ``trio.abc.Stream``.

Theory of operation
-------------------
``run()`` starts two tasks in the caller's nursery and returns control once they are
running (``await nursery.start(muxer.run)``); ``open_muxer()`` does that for you.

The **writer** owns the transport's send side.  Streams append whole encoded frames
to ``_outbuf``, one bytearray shared by the connection, synchronously; only over TCP,
and only when nothing is queued or being written, may a sending task hand frames to
the kernel itself, with one synchronous non-blocking write (``_write_directly``,
``_write_frames_directly``), whose unsent rest goes back to the writer, in order.
That is what makes sending cheap (no await per frame), atomic (a frame is appended
whole or not at all, so cancellation cannot split one) and coalesced (everything
queued since the last write leaves in one ``send_all``).
When to write is the subtle part.  After a quiet spell, the first frame wakes the
writer, which sends it at once together with whatever else that scheduler pass
queued: a lone message waits for nothing.  But writing as soon as any sender yields
would cost one transport write per message when a task sends in a loop; so when frames
have piled up *during* a write, the program is busy sending, and the writer waits
until every other task is blocked (``wait_all_tasks_blocked``: the scheduler is about
to go idle) before taking the whole buffer, so a busy sender's messages leave in large
writes.  Two bounds keep this honest: the writer is woken early once ``_FLUSH_AT``
bytes are queued, and never waits longer than ``Config.max_flush_delay`` for
idleness.  Senders
wait (``send_all``) or get ``trio.WouldBlock`` (``send_nowait``) while more than
``Config.send_high_water`` bytes are queued, so memory stays bounded and the
transport's backpressure reaches every sender.

The **reader** owns the transport's receive side.  It feeds each chunk to the sans-IO
``Decoder`` (which merges adjacent Message frames of one stream) and dispatches the
frames: data to the stream's buffer, Close and Reset to the stream's state machine,
NewStream to the accept backlog.  Control answers (Reset for a refused or abandoned
stream) are queued synchronously, like everything else the writer sends.  After each
chunk the reader applies the slow-reader policy: under ``"block"`` it stops reading
while a stream is over ``Config.max_stream_buffer`` or all streams together are over
``Config.max_connection_buffer``; the transport's own flow control then pushes back on
the peer.  The reader never waits for anything else, so accepting and opening streams
keep working while it is blocked.

Over TCP the reader lends the socket: a task waiting in ``MplexStream.receive_some``
reads it itself (``_receive_for``), once, so the kernel's wake-up reaches the task that
wants the data without a second scheduler pass through the reader.  The writer, too,
writes the socket itself.  See spec section 8 for why waits on the socket are woken
with ``notify_closing``.

Streams are keyed by ``id << 1 | opened_by_us``: the same number opened by each side
names two different streams.  A frame with an even flag comes from the stream's
opener, so it names a stream the peer opened; an odd flag names one we opened.

Teardown: whatever ends the connection (transport EOF or error, a protocol error,
``aclose()``, cancellation of ``run()``), ``_fail()`` records why, marks every live
stream broken with a ``ConnectionLost`` chained to the cause, wakes every waiting task
and stops both loops.  Buffered data stays readable; the error comes after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, NoReturn, final

import trio
from trio.testing import wait_all_tasks_blocked

from ._budget import SlidingBudget
from ._codec import MAX_MESSAGE_SIZE, MAX_STREAM_ID, Decoder, Flag, RawFrame
from ._config import Config
from ._errors import ConnectionLost, EndReason, MuxerClosed, fresh_copy
from ._exceptions import MplexError, ProtocolError
from ._logging import ConnectionLog, connection_label, describe, logger
from ._stream import MplexStream
from ._varint import encode_uvarint

__all__ = ["Muxer", "MuxerStats", "open_muxer"]


#: Bytes requested per transport read.  Large enough that thousands of small frames
#: are decoded per wake-up, small enough to keep the unparsed input bounded.
_READ_SIZE = 256 * 1024
#: Queued bytes that make the writer stop waiting for idleness and write now.
_FLUSH_AT = 64 * 1024
#: Seconds without a write after which the next frame is written by the task that
#: queues it (see Muxer._write_directly).  Far above the gap between the writes of a
#: busy sender (a few microseconds), below a network round trip (~90 us on loopback).
_QUIET = 50e-6
#: Most payload bytes handed to one direct ``writev`` (see _write_frames_directly): a
#: few socket buffers' worth, so a large send does not build a huge list of frames the
#: kernel cannot take yet.
_DIRECT_BATCH = 1024 * 1024
#: Finished stream keys remembered, so late frames for them are recognised as such
#: (at least; see Muxer._tombstone_limit).
_TOMBSTONES = 4096
#: Buffers one writev may take (the kernel refuses more with EINVAL).
_IOV_MAX = (os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 0) or 1024

#: The block _prime_allocator frees: above the largest buffer a bulk receive allocates
#: (reads of _READ_SIZE, the joins of up to Config.max_stream_buffer plus one read).
_PRIME_BLOCK = 2 * 1024 * 1024

#: Socket descriptors work with os.read, os.write and os.writev.
_POSIX_SOCKETS = os.name == "posix" and hasattr(os, "writev")

_RUNNING, _CLOSED, _BROKEN = "running", "closed", "broken"
#: Ends logged at DEBUG; the others (a failed transport, a broken protocol) at INFO.
_ORDINARY_ENDS = frozenset({EndReason.PEER_CLOSED, EndReason.CLOSED})


@dataclasses.dataclass(frozen=True)
class MuxerStats:
    """A read-only snapshot of one muxer's counters (``Muxer.stats``), for monitoring."""

    bytes_sent: int = 0
    bytes_received: int = 0
    frames_sent: int = 0
    frames_received: int = 0
    streams_opened: int = 0
    streams_accepted: int = 0
    #: Inbound streams answered with Reset because a limit was reached.
    streams_refused: int = 0
    resets_sent: int = 0
    resets_received: int = 0
    #: Streams we reset because their reader fell behind (the slow-reader policy),
    #: or because nobody accepted them while their data piled up.
    streams_reset_by_policy: int = 0
    #: Frames for streams that are unknown or already finished, dropped.  Adjacent
    #: Message frames of one stream that arrive together are merged and count once.
    frames_dropped: int = 0
    #: Seconds the reader spent not reading because readers fell behind, including
    #: a stall still going on when the snapshot was taken.
    reader_blocked_seconds: float = 0.0
    # Gauges: the connection's state when the snapshot was taken.
    #: Streams the peer opened that are still in our table (accepted or not).
    inbound_streams: int = 0
    #: Our streams holding a ``max_outbound_streams`` slot.
    outbound_streams: int = 0
    #: Inbound streams waiting for ``accept_stream``.
    streams_waiting: int = 0
    #: Received bytes no stream has read yet (what ``max_connection_buffer`` bounds).
    unread_bytes: int = 0
    #: Bytes queued for the transport (what ``send_high_water`` bounds).
    queued_bytes: int = 0


class _Counters:
    """The muxer's live counters (mutable, private); ``MuxerStats`` is their snapshot."""

    def __init__(self) -> None:
        self.bytes_sent = 0
        self.bytes_received = 0
        self.streams_opened = 0
        self.streams_accepted = 0
        self.streams_refused = 0
        self.resets_sent = 0
        self.resets_received = 0
        self.streams_reset_by_policy = 0
        self.frames_dropped = 0
        self.reader_blocked_seconds = 0.0

    def snapshot(self, **elsewhere: Any) -> MuxerStats:
        """A frozen copy, with the counters and gauges that live elsewhere passed in."""
        return MuxerStats(
            **elsewhere,
            bytes_sent=self.bytes_sent,
            bytes_received=self.bytes_received,
            streams_opened=self.streams_opened,
            streams_accepted=self.streams_accepted,
            streams_refused=self.streams_refused,
            resets_sent=self.resets_sent,
            resets_received=self.resets_received,
            streams_reset_by_policy=self.streams_reset_by_policy,
            frames_dropped=self.frames_dropped,
        )


@final
class Muxer:
    """An mplex connection over ``transport_stream``.

    Start it with ``await nursery.start(muxer.run)`` (or use ``open_muxer``), then
    ``open_stream()`` and ``accept_stream()``.  ``aclose()`` flushes what was queued
    and closes the transport.
    """

    def __init__(self, transport_stream: trio.abc.Stream, config: Config | None = None) -> None:
        self.config = config if config is not None else Config()
        self._stats = _Counters()
        # Frames queued, counted here rather than in _stats: one increment on the
        # send_nowait fast path instead of two attribute hops.
        self._frames_queued = 0
        self._transport = transport_stream
        self._decoder = Decoder(self.config.max_message_size, coalesce=True)
        self._frame_size = self.config.max_send_frame_size
        self._high_water = self.config.send_high_water
        self._streams: dict[int, MplexStream] = {}
        window = self.config.abuse_window
        self._unknown_budget = SlidingBudget(
            "max_unknown_stream_frames", self.config.max_unknown_stream_frames, window
        )
        self._refused_budget = SlidingBudget("max_refused_streams", self.config.max_refused_streams, window)
        self._reset_budget = SlidingBudget("max_resets_received", self.config.max_resets_received, window)
        self._ignored_budget = SlidingBudget("max_ignored_frames", self.config.max_ignored_frames, window)
        # Enough to remember every stream both sides may have open, twice over: a
        # batch reset of all of them must not make their in-flight frames "unknown".
        self._tombstone_limit = max(
            _TOMBSTONES, 2 * (self.config.max_inbound_streams + self.config.max_outbound_streams)
        )
        self._tombstones: OrderedDict[int, None] = OrderedDict()
        self._next_id = 0
        self._slots: set[int] = set()  # keys of our streams that hold an outbound slot
        self._inbound = 0
        self._backlog: deque[MplexStream] = deque()
        self._acceptors = 0  # tasks inside accept_stream
        self._accept_lot = trio.lowlevel.ParkingLot()
        self._slot_lot = trio.lowlevel.ParkingLot()
        # Writer side.
        self._outbuf = bytearray()
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._writer_parked = False
        self._idle_scope: trio.CancelScope | None = None
        self._flush_at = _FLUSH_AT  # for the streams' inlined hot paths
        self._writing = False
        self._writable_lot = trio.lowlevel.ParkingLot()
        # A socket transport is read and written with os.read/os.write/os.writev on its
        # descriptor, without trio's per-call hops: see _write_directly, _receive_for.
        # POSIX only (Windows sockets are not file descriptors); elsewhere the trio
        # stream's own methods are used.
        self._direct_socket: trio.socket.SocketType | None = None
        if isinstance(transport_stream, trio.SocketStream) and _POSIX_SOCKETS:
            self._direct_socket = transport_stream.socket
        self._last_flush = 0.0
        # Bytes of control frames (Close, Reset, NewStream) in _outbuf: what the reader
        # pauses for (see _wait_for_send_room).
        self._control_pending = 0
        # Bytes at the start of _outbuf that finish a frame begun by a direct write
        # (-1: not known), so that tracing never parses what is not a frame.
        self._trace_skip = 0
        # Reader side.
        self._buffered = 0
        self._overfull: set[MplexStream] = set()
        self._drain_lot = trio.lowlevel.ParkingLot()
        self._reader_blocked = False
        # The read turn over TCP (see _receive_for): the stream whose task holds it,
        # that stream again while its task waits on the socket, and whether the
        # reader task waits on the socket.
        self._borrower: MplexStream | None = None
        self._borrower_waiting: MplexStream | None = None
        self._reader_waiting = False
        self._reader_parked: trio.lowlevel.Task | None = None
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
        self._blocked_since: float | None = None
        #: A label for this connection in log lines: a sequence number and, when the
        #: transport is a socket (or TLS over one), the peer's address.
        self.name = connection_label(transport_stream)
        self._log = ConnectionLog(self.name)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def stats(self) -> MuxerStats:
        """A read-only snapshot of this connection's counters (take a new one any time)."""
        blocked = self._stats.reader_blocked_seconds
        if self._blocked_since is not None:
            blocked += trio.current_time() - self._blocked_since
        return self._stats.snapshot(
            frames_sent=self._frames_queued,
            frames_received=self._decoder.frames_decoded,
            reader_blocked_seconds=blocked,
            inbound_streams=self._inbound,
            outbound_streams=len(self._slots),
            streams_waiting=len(self._backlog),
            unread_bytes=self._buffered,
            queued_bytes=len(self._outbuf),
        )

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
        try:
            async with trio.open_nursery() as nursery:
                self._run_scope = nursery.cancel_scope
                if self._state is _RUNNING:
                    nursery.start_soon(self._read_loop)
                    nursery.start_soon(self._write_loop)
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
                    while (self._outbuf or self._writing) and self._state is _RUNNING:
                        await self._writable_lot.park()
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
            if len(self._outbuf) >= self._high_water:
                await self._writable_lot.park()  # NewStream is queued like data
            elif len(self._slots) < self.config.max_outbound_streams:
                break
            else:
                await self._slot_lot.park()
        stream_id = self._next_id
        if stream_id > MAX_STREAM_ID:
            raise MplexError("all 2**60 stream ids of this connection are used up")
        if raw is None:
            raw = str(stream_id).encode()
        self._next_id = stream_id + 1
        stream = MplexStream(self, stream_id, raw, is_initiator=True)
        self._streams[stream._key] = stream
        self._slots.add(stream._key)
        self._stats.streams_opened += 1
        self._queue_control(stream_id, Flag.NEW_STREAM, raw)
        return stream

    async def accept_stream(self) -> MplexStream:
        """Wait for the next stream the peer opens.

        Streams that arrived before the connection ended are still handed out; after
        that it raises ``MuxerClosed`` (a ``trio.ClosedResourceError``: we closed the
        muxer) or ``ConnectionLost`` (a ``trio.BrokenResourceError``) carrying the
        reason.  ``async for stream in muxer`` instead simply ends.
        """
        self._check_started()
        self._acceptors += 1
        try:
            if self._backlog:
                await trio.lowlevel.checkpoint()
            while not self._backlog:
                if self._state is not _RUNNING:
                    await trio.lowlevel.checkpoint()
                    self._raise_ended()
                await self._accept_lot.park()
        finally:
            self._acceptors -= 1
            self._recheck_limits()  # an accepted stream, or no acceptor left
        self._stats.streams_accepted += 1
        return self._backlog.popleft()

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

    def _queued(self, frames: int) -> None:
        """A stream appended ``frames`` frames to ``_outbuf``: make sure they leave."""
        self._frames_queued += frames
        if self._writer_parked:
            if self._direct_socket is not None and self._write_directly():
                return
            self._writer_parked = False
            self._writer_lot.unpark_all()
        elif self._idle_scope is not None and len(self._outbuf) >= _FLUSH_AT:
            self._idle_scope.cancel()

    def _write_directly(self) -> bool:
        """After a quiet spell, hand the send buffer to the kernel from the calling task.

        The writer task would send it one scheduler pass later; a lone message (a
        request, a reply) saves that pass.  The write is synchronous and non-blocking,
        so it cannot be cancelled half-way: what the kernel does not take, the writer
        sends, in order.  True when everything left.
        """
        now = time.perf_counter()
        if now - self._last_flush < _QUIET or logger.isEnabledFor(logging.DEBUG):
            return False  # busy (let frames gather for the writer), or tracing frames
        assert self._direct_socket is not None
        fd = self._direct_socket.fileno()
        if fd < 0:
            return False
        data = self._outbuf
        try:
            sent = os.write(fd, data)
        except OSError:
            return False  # full, or broken: the writer waits, or reports the failure
        self._sent(sent)
        if sent == len(data):
            data.clear()
            self._trace_skip = 0
            self._control_pending = 0
            return True
        if sent:
            del data[:sent]
            self._trace_skip = -1  # the buffer now starts inside some frame
        return False

    def _sent(self, count: int) -> None:
        """``count`` bytes went to the transport just now (the quiet spell restarts)."""
        self._stats.bytes_sent += count
        self._last_flush = time.perf_counter()

    def _direct_sends_allowed(self) -> bool:
        """True if large sends may write the TCP socket from the sending task."""
        return (
            self._direct_socket is not None
            and self._state is _RUNNING
            and self._send_error is None
            and not logger.isEnabledFor(logging.DEBUG)  # the writer traces frames
        )

    def _write_frames_directly(self, stream: MplexStream, view: memoryview, pos: int) -> int:
        """Write Message frames of ``view[pos:]`` to the socket with one ``writev``,
        from the calling task; return how far in ``view`` the frames reach.

        Only when nothing is queued or being written, so order holds.  The write is
        synchronous and non-blocking: the kernel takes whole frames and at most part
        of one more, whose rest is queued for the writer, whole.  If it takes nothing,
        the first frame is queued instead, so the caller always progresses (and the
        writer waits for room, or reports a failure).
        """
        sock = self._direct_socket
        assert sock is not None
        step = self._frame_size
        head = stream._data_head
        end = min(len(view), pos + _DIRECT_BATCH, pos + step * (_IOV_MAX // 2))  # 2 buffers a frame
        pieces = [view[start : start + step] for start in range(pos, end, step)]
        prefixes = [head + encode_uvarint(len(piece)) for piece in pieces]
        parts = [part for frame in zip(prefixes, pieces, strict=True) for part in frame]
        try:
            sent = os.writev(sock.fileno(), parts)
        except OSError:
            sent = 0  # full, or broken: the writer waits, or reports the failure
        self._sent(sent)
        frames = 0
        for prefix, piece in zip(prefixes, pieces, strict=True):
            size = len(prefix) + len(piece)
            frames += 1
            pos += len(piece)
            if sent >= size:
                sent -= size
                continue
            out = self._outbuf  # the rest of this frame, for the writer
            if sent:
                if sent < len(prefix):
                    out += prefix[sent:]
                    out += piece
                else:
                    out += piece[sent - len(prefix) :]
                self._trace_skip = len(out)  # a frame's tail, not a frame
            else:
                out += prefix
                out += piece
            break
        if self._outbuf:
            self._queued(frames)
        else:
            self._frames_queued += frames
        return pos

    def _queue_control(self, stream_id: int, flag: Flag, body: bytes = b"") -> None:
        """Queue a frame that must go out whatever the send buffer holds."""
        if self._state is not _RUNNING or self._send_error is not None:
            return
        if flag >= Flag.RESET_RECEIVER:
            self._stats.resets_sent += 1
        out = self._outbuf
        before = len(out)
        out += encode_uvarint(stream_id << 3 | flag)
        out += encode_uvarint(len(body))
        out += body
        self._control_pending += len(out) - before
        self._queued(1)

    async def _write_loop(self) -> None:
        send_all = self._transport.send_all
        if self._direct_socket is not None:
            send_all = self._send_to_socket
        delay = self.config.max_flush_delay
        while True:
            if not self._outbuf:
                self._writer_parked = True
                await self._writer_lot.park()
                # Woken by the first frame after a quiet spell: send it now, with
                # whatever else the same scheduler pass queued.  A lone message waits
                # for nothing.
                if not self._outbuf:
                    continue
            elif len(self._outbuf) < _FLUSH_AT:
                # Frames piled up while we were writing: the program is busy sending.
                # Let it go on until it blocks (or 64 KiB are queued, or the delay
                # bound passes) and send everything in one write.
                with trio.move_on_after(delay) as scope:
                    self._idle_scope = scope
                    await wait_all_tasks_blocked()
                self._idle_scope = None
            data = self._outbuf
            self._outbuf = bytearray()
            self._control_pending = 0
            skip, self._trace_skip = self._trace_skip, 0
            if logger.isEnabledFor(logging.DEBUG):  # one check per write, none per frame
                self._trace_sent(data, skip)
            self._writing = True
            try:
                await send_all(data)
            except Exception as exc:  # any failure of any transport: the send side is lost
                self._writing = False
                await self._linger(exc)
                return
            finally:
                self._writing = False
            self._sent(len(data))
            if self._writable_lot:
                self._writable_lot.unpark_all()

    async def _linger(self, cause: Exception) -> None:
        """A write failed: end the send side, and let the reader deliver what the
        transport still hands over (a peer that sent everything and hung up).  The
        connection ends when the input does, or once the transport has delivered
        nothing for ``Config.close_timeout`` while the reader waited on it."""
        error = ConnectionLost("the transport failed while sending")
        error.__cause__ = cause
        self._stop_sending(error)
        self._outbuf = bytearray()
        self._trace_skip = 0
        self._control_pending = 0
        self._linger_scope = trio.CancelScope()
        self._input_progressed(waiting=not self._reader_blocked)
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

    async def _send_to_socket(self, data: bytes | bytearray | memoryview) -> None:
        """``SocketStream.send_all`` of ``data``, through ``_wake_socket_waiters``."""
        sock = self._direct_socket
        assert sock is not None
        waited = False
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            try:
                pos += os.write(sock.fileno(), view[pos:])
            except BlockingIOError:
                waited = True
                await self._wait_socket(trio.lowlevel.wait_writable, sock)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    # -- reader ----------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        if self._direct_socket is not None:
            await self._read_socket_loop(self._direct_socket)
            return
        receive_some = self._transport.receive_some
        while True:
            try:
                data = await receive_some(_READ_SIZE)
            except Exception as exc:  # any failure of any transport: the connection is lost
                self._receive_failed(exc)
                return
            if not self._consume(data):
                return
            if self._should_pause():
                await self._pause()

    async def _read_socket_loop(self, sock: trio.socket.SocketType) -> None:
        """The reader over TCP, which hands the read turn to a receiving task.

        A task waiting in ``receive_some`` reads the socket itself (``_receive_for``),
        so the kernel's wake-up reaches it directly, one scheduler pass sooner than
        through this task; meanwhile this task neither reads nor waits on the socket.
        """
        while self._state is _RUNNING:
            if self._should_pause():
                await self._pause()
            if self._borrower is not None:
                await self._park_reader()
                # The task that gave the turn back is usually about to take it again (a
                # request/response loop): one pass of delay lets it do so before we
                # wait on the socket and it has to wake us out of there.
                await trio.lowlevel.cancel_shielded_checkpoint()
                continue
            data = self._read_nowait(sock)
            if data is None:
                self._reader_waiting = True
                try:
                    await self._wait_socket(trio.lowlevel.wait_readable, sock)
                except (trio.ClosedResourceError, OSError) as exc:
                    self._receive_failed(exc)
                    return
                finally:
                    self._reader_waiting = False
                continue  # and look at the read turn again before reading
            if not self._consume(data):
                return
            # The kernel had data without waiting: yield once per read, as trio's
            # own receive_some does, so a flood cannot starve other tasks.
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _park_reader(self) -> None:
        """Park the reader task until a receiving task gives the read turn back."""
        self._reader_parked = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._reader_parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _read_nowait(self, sock: trio.socket.SocketType) -> bytes | None:
        """One non-blocking read of the socket: None if it has nothing now.  A failed
        read ends the connection and returns b"" (end of input)."""
        try:
            return os.read(sock.fileno(), _READ_SIZE)
        except BlockingIOError:
            return None
        except OSError as exc:
            self._receive_failed(exc)
            return b""

    async def _wait_socket(
        self, wait: Callable[[trio.socket.SocketType], Awaitable[None]], sock: trio.socket.SocketType
    ) -> None:
        """``wait(sock)``, which also returns on a wake-up call: the caller looks
        again.  ``_wake_socket_waiters`` makes every wait on the socket raise
        ``trio.ClosedResourceError``, which is real only once the connection has
        ended or the socket is closed."""
        try:
            await wait(sock)
        except trio.ClosedResourceError:
            if self._state is not _RUNNING or sock.fileno() < 0:
                raise

    def _wake_socket_waiters(self) -> None:
        """Wake every task waiting on the TCP socket, to look at its situation again.

        trio has no way to wake one task out of ``wait_readable`` short of a cancel
        scope around every wait, which costs about 5 us each: a tenth of a round trip.
        ``notify_closing`` wakes them all with ``ClosedResourceError`` and keeps the
        socket usable (the next wait registers it again); our waits treat that as a
        wake-up call (``_wait_socket``).  Rare: a borrowed receive interrupted by a
        local close, or the reader moved aside.
        """
        sock = self._direct_socket
        if sock is not None and sock.fileno() >= 0:
            trio.lowlevel.notify_closing(sock)

    def _can_lend(self) -> bool:
        """True if a receiving task may read the transport itself now.

        Only while no stream has unread data: then the wait is for the peer, and
        the task that wants the next bytes should be the one the kernel wakes.  While
        streams have data to read, the reader task (one read, then a yield) keeps the
        pace; if every waiting receiver read for itself, a hundred of them would read
        a hundred chunks in one scheduler pass and fill the buffers for nothing.
        """
        return (
            self._direct_socket is not None
            and self._borrower is None
            and not self._buffered
            and not self._reader_blocked
            and self._state is _RUNNING
        )

    async def _receive_for(self, stream: MplexStream) -> None:
        """One read of the socket in ``stream``'s receiving task, waiting for the
        socket first if it has nothing.

        What is read is dispatched as the reader would, to whichever streams it is
        for; if none of it is for ``stream``, the caller waits for the reader task
        like any other receiver (a busy connection is read by the reader, which
        yields between reads).  A checkpoint, like every receive.  The caller
        checked ``_can_lend()``.
        """
        sock = self._direct_socket
        assert sock is not None
        await trio.lowlevel.checkpoint_if_cancelled()
        self._borrower = stream
        if self._reader_waiting:
            self._wake_socket_waiters()  # move the reader out of our way
        waited = False
        try:
            data = self._read_nowait(sock)
            if data is None:
                waited = True
                self._borrower_waiting = stream
                try:
                    await self._wait_socket(trio.lowlevel.wait_readable, sock)
                finally:
                    self._borrower_waiting = None
                if stream._waiting_for_data() and self._state is _RUNNING:
                    data = self._read_nowait(sock)
            if data is not None:
                self._consume(data)
        except (trio.ClosedResourceError, OSError) as exc:
            self._receive_failed(exc)
        finally:
            self._borrower = None
            if self._reader_parked is not None:
                # Not a ParkingLot: this wake-up is on the path from a received
                # request to its reply, and rescheduling the one task costs less.
                trio.lowlevel.reschedule(self._reader_parked)
                self._reader_parked = None
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

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

    def _over_buffer_limits(self) -> bool:
        return bool(self._overfull) or self._buffered > self.config.max_connection_buffer

    def _dispatch(self, frames: list[RawFrame]) -> None:
        streams = self._streams
        cap = self.config.max_stream_buffer
        for header, body in frames:
            flag = header & 7
            stream = streams.get((header >> 3) << 1 | (flag & 1))
            if flag in {1, 2}:
                if not body:  # ignored on receipt (spec 5.9): nothing to store or wake
                    self._ignored()
                elif stream is not None and stream._can_receive:
                    stream._deliver(body)
                    self._buffered += len(body)
                    if stream._buffered > cap:
                        self._overflowed(stream)
                elif stream is not None and stream._closed_locally:
                    stream._on_late_data()
                else:
                    self._dropped(header, stream)
            elif flag == 0:
                self._on_new_stream(header >> 3, body)
            else:
                if flag >= 5:
                    self._stats.resets_received += 1
                    self._spend(self._reset_budget)
                if stream is None:
                    self._dropped(header, stream)
                elif not (stream._on_remote_reset() if flag >= 5 else stream._on_remote_close()):
                    self._stats.frames_dropped += 1
                    self._ignored()  # a repeated Close

    def _dropped(self, header: int, stream: MplexStream | None) -> None:
        """A frame nobody can use.  Late frames for a stream that finished recently are
        expected (they crossed our close or reset); frames for a stream that never
        existed are spent from the abuse budget."""
        self._stats.frames_dropped += 1
        if stream is not None:
            self._ignored()  # data after the peer's own Close, on a live stream
            return
        key = (header >> 3) << 1 | (header & 1)
        if key & 1 and header >> 3 < self._next_id:
            return  # one of our streams, finished: the peer may still be sending on it
        if key not in self._tombstones:
            self._spend(self._unknown_budget)

    def _ignored(self) -> None:
        """A frame that changes nothing on a live stream: cheap, but not free."""
        self._spend(self._ignored_budget)

    def _spend(self, budget: SlidingBudget) -> None:
        if not budget.add(trio.current_time()):
            raise ProtocolError(
                f"abuse budget exceeded: more than {budget.limit} events counted by "
                f"Config.{budget.name} within {budget.window:g} s"
            )

    def _on_new_stream(self, stream_id: int, name: bytes) -> None:
        key = stream_id << 1
        if key in self._streams:
            raise ProtocolError(f"NewStream for stream {stream_id}, which the peer already has open")
        config = self.config
        if self._inbound >= config.max_inbound_streams or len(self._backlog) >= config.accept_backlog:
            self._stats.streams_refused += 1
            self._spend(self._refused_budget)
            self._remember(key)
            self._queue_control(stream_id, Flag.RESET_RECEIVER)
            return
        self._tombstones.pop(key, None)
        stream = MplexStream(self, stream_id, name[: config.max_stream_name_size], is_initiator=False)
        if self._send_error is not None:
            stream._send_side_lost(self._send_error)
        self._streams[key] = stream
        self._inbound += 1
        self._backlog.append(stream)
        if self._accept_lot:
            self._accept_lot.unpark()

    # -- memory and the slow-reader policy -------------------------------------------------

    def _overflowed(self, stream: MplexStream) -> None:
        """``stream`` holds more than ``Config.max_stream_buffer`` unread bytes."""
        if self.config.slow_reader_policy == "reset":
            self._reset_by_policy(stream)
        else:
            self._overfull.add(stream)

    def _unaccepted(self, stream: MplexStream) -> bool:
        return not stream.is_initiator and stream in self._backlog

    def _reset_by_policy(self, stream: MplexStream) -> None:
        """Give up on a slow (or never accepted) stream: free its unread data, reset it,
        and take it out of the accept backlog (nobody wants a stream reset unseen)."""
        stream._discard()
        stream._reset_for_overflow()
        if self._unaccepted(stream):
            self._backlog.remove(stream)

    def _released(self, stream: MplexStream, size: int) -> None:
        """``size`` unread bytes of ``stream`` were read or dropped."""
        self._buffered -= size
        if stream in self._overfull and stream._buffered <= self.config.max_stream_buffer:
            self._overfull.discard(stream)
        self._recheck_limits()

    def _recheck_limits(self) -> None:
        """Something the blocked reader waits for may have changed: let it look again."""
        if self._reader_blocked and self._drain_lot:
            self._drain_lot.unpark_all()

    def _stalled_by_unaccepted(self) -> bool:
        """True if only streams nobody has accepted keep the reader from reading, and
        no task is in ``accept_stream`` to take them."""
        if self._acceptors or any(not self._unaccepted(s) for s in self._overfull):
            return False
        if self._buffered > self.config.max_connection_buffer:
            waiting = sum(s._buffered for s in self._backlog)
            return waiting > 0 and self._buffered - waiting <= self.config.max_connection_buffer
        return bool(self._overfull)

    def _shed_unaccepted(self) -> None:
        """Reset the unaccepted streams over their limit, then, while the connection is
        over its budget, the unaccepted stream holding the most."""
        for stream in [s for s in self._overfull if self._unaccepted(s)]:
            self._reset_by_policy(stream)
        while self._buffered > self.config.max_connection_buffer:
            holding = [s for s in self._backlog if s._buffered]
            if not holding:
                return
            self._reset_by_policy(max(holding, key=_buffered))

    async def _wait_for_readers(self) -> None:
        config = self.config
        started = trio.current_time()
        policy_deadline = float("inf")
        if config.slow_reader_policy == "block-then-reset":
            policy_deadline = started + config.slow_reader_timeout
        stalled_since: float | None = None  # by unaccepted streams only, since when
        with self._reader_stalled():
            while self._over_buffer_limits():
                shed_at = float("inf")
                if self._stalled_by_unaccepted():
                    stalled_since = stalled_since or trio.current_time()
                    shed_at = stalled_since + config.accept_grace
                else:
                    stalled_since = None
                with trio.move_on_at(min(policy_deadline, shed_at)) as scope:
                    await self._drain_lot.park()
                if not scope.cancelled_caught:
                    continue
                if trio.current_time() >= shed_at:
                    # Nobody came to accept them: they must not stall the streams the
                    # program does read (a program that only dials never accepts).
                    self._shed_unaccepted()
                    stalled_since = None
                    continue
                # Timed out: give up on the streams over their own limit; failing that,
                # on the live stream holding the most.  Resetting frees their data;
                # each further victim gets another full timeout first.
                victims = list(self._overfull)
                if not victims and (candidates := self._live_buffers()):
                    victims = [max(candidates, key=_buffered)]
                for stream in victims:
                    self._reset_by_policy(stream)
                policy_deadline = trio.current_time() + config.slow_reader_timeout

    async def _wait_for_send_room(self) -> None:
        """Control frames waiting in the send buffer (replies to the peer's input, Closes
        of the streams it opened) are over ``send_high_water``: read no more until
        the writer has taken them, so a peer that never reads cannot grow our send
        buffer.  Only control frames count: pausing for data would let two peers
        that both send in bulk wait for each other's reads forever."""
        with self._reader_stalled():
            while self._control_pending > self._high_water and self._state is _RUNNING:
                await self._writable_lot.park()

    @contextlib.contextmanager
    def _reader_stalled(self) -> Iterator[None]:
        """The reader is not reading: receivers must not read for it (``_can_lend``),
        and the time counts in ``stats.reader_blocked_seconds``."""
        started = trio.current_time()
        self._reader_blocked = True
        self._blocked_since = started
        self._input_progressed(waiting=False)
        try:
            yield
        finally:
            self._reader_blocked = False
            self._blocked_since = None
            self._input_progressed()
            self._stats.reader_blocked_seconds += trio.current_time() - started

    def _should_pause(self) -> bool:
        return self._over_buffer_limits() or self._control_pending > self._high_water

    async def _pause(self) -> None:
        if self._over_buffer_limits():
            await self._wait_for_readers()
        if self._control_pending > self._high_water:
            await self._wait_for_send_room()

    def _live_buffers(self) -> list[MplexStream]:
        return [s for s in self._streams.values() if s._buffered]

    # -- bookkeeping -----------------------------------------------------------------------

    def _forget(self, stream: MplexStream) -> None:
        """The stream needs no more frames: drop it from the table, free its slot."""
        if self._streams.pop(stream._key, None) is None:
            return
        self._remember(stream._key)
        if stream.is_initiator:
            self._release_slot(stream)
        else:
            self._inbound -= 1

    def _release_slot(self, stream: MplexStream) -> None:
        """Our ``stream`` no longer counts against ``max_outbound_streams``: this side
        closed or reset it, or it ended."""
        if stream._key in self._slots:
            self._slots.discard(stream._key)
            if self._slot_lot:
                self._slot_lot.unpark()

    def _remember(self, key: int) -> None:
        tombstones = self._tombstones
        tombstones[key] = None
        if len(tombstones) > self._tombstone_limit:
            tombstones.popitem(last=False)

    def _stop_sending(self, error: ConnectionLost | MuxerClosed) -> None:
        """No more frames may be queued: every send and open raises ``error``."""
        if self._send_error is not None:
            return
        self._send_error = error
        for stream in list(self._streams.values()):
            stream._send_side_lost(error)
        self._slot_lot.unpark_all()
        self._writable_lot.unpark_all()

    def _fail(
        self,
        error: ConnectionLost | MuxerClosed,
        *,
        cause: BaseException | None = None,
        final_state: str = _BROKEN,
    ) -> None:
        """End the connection: record why, break every stream, wake every waiter."""
        if self._state is not _RUNNING:
            return
        error.__cause__ = cause
        self._state = final_state
        self._error = error
        for stream in list(self._streams.values()):
            stream._connection_lost(error)
        self._outbuf = bytearray()
        self._trace_skip = 0
        self._control_pending = 0
        for lot in (
            self._accept_lot,
            self._slot_lot,
            self._writable_lot,
            self._drain_lot,
            self._writer_lot,
        ):
            lot.unpark_all()
        if self._run_scope is not None:
            self._run_scope.cancel()


def _prime_allocator() -> None:
    """Free one ``_PRIME_BLOCK`` block (at import), so that glibc's malloc keeps
    receive buffers in its heap instead of mapping each one afresh.

    glibc serves every block of 128 KiB or more with a fresh ``mmap`` and unmaps it
    when freed, until the program frees a larger mapped block: it then raises that
    threshold to the block's size and keeps twice as much free memory at the top of
    its heap.  A bulk receive allocates 256 KiB reads and joins of up to a stream's
    buffer, so without this it keeps going through fresh, page-faulted memory:
    measured, 20,000-40,000 page faults per 256 MiB received in 1 MiB sends and about
    0.6x a raw socket's throughput; with it, no faults beyond start-up and about 1.0x.
    ``bytes(n)`` is a ``calloc``, which touches no page of a fresh mapping, so this
    costs one ``mmap`` and one ``munmap`` (about 20 us).  Other allocators simply
    allocate and free the block.
    """
    bytes(_PRIME_BLOCK)


_prime_allocator()


def _raise_copy(error: ConnectionLost | MuxerClosed) -> NoReturn:
    """Raise a fresh copy of a recorded end, with the same cause."""
    raise fresh_copy(error) from error.__cause__


def _buffered(stream: MplexStream) -> int:
    return stream._buffered


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
