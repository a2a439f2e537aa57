"""MplexStream: one mplex stream as a ``trio.abc.HalfCloseableStream``.

The stream owns its receive buffer and its state; every byte it sends is appended, as
whole frames, to the muxer's single outbound buffer, which the muxer writes in order
(its writer task, or over TCP after a quiet spell the sending task itself, with one
synchronous write).  So two streams' frames never interleave within a frame, and a
cancelled ``send_all`` leaves only whole frames behind.  Over TCP a receiving task
with nothing buffered reads the socket itself (see ``Muxer._receive_for``).

Mapping of trio's stream contract onto mplex frames:

======================  =====================================================
``send_all(data)``      Message frames of at most ``max_send_frame_size`` bytes
``send_eof()``          Close (our direction ends; theirs stays open)
``aclose()``            Close, or Reset if unread data had to be thrown away;
                        data that arrives afterwards is answered with one Reset
``reset()``             Reset (both directions end at once)
remote Close            ``receive_some`` returns the buffered data, then ``b""``
remote Reset            ``receive_some`` returns the buffered data, then raises
                        ``StreamReset``; sends raise ``StreamReset``
connection lost         like a reset, raising ``ConnectionLost``
======================  =====================================================
"""

from __future__ import annotations

import operator
from collections import deque
from typing import TYPE_CHECKING, final

import trio

from ._codec import Flag
from ._errors import ConnectionLost, MuxerClosed, StreamReset, fresh_copy
from ._state import FINISHED_STATES, StreamEvent, StreamState, Verdict, transition
from ._varint import encode_uvarint

if TYPE_CHECKING:
    from ._muxer import Muxer

__all__ = ["MplexStream"]

#: Received pieces shorter than this are merged while unread (see _deliver).
_MERGE_BELOW = 4096
_SENDABLE = frozenset({StreamState.OPEN, StreamState.REMOTE_CLOSED})
_RECEIVABLE = frozenset({StreamState.OPEN, StreamState.LOCAL_CLOSED})
Buffer = bytes | bytearray | memoryview
# send_all's checkpoints, bound once: the 32-byte send_all loop calls them millions of times.
_checkpoint = trio.lowlevel.checkpoint
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_yield = trio.lowlevel.cancel_shielded_checkpoint


def _byte_buffer(data: object) -> Buffer:
    """``data``, any object with the buffer protocol, as a flat buffer whose ``len()`` is
    its byte count (as ``trio.SocketStream.send_all`` takes it); ``TypeError`` otherwise."""
    if isinstance(data, bytes | bytearray):
        return data
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    if not view.c_contiguous:
        return view.tobytes()
    if view.ndim == 1 and view.itemsize == 1:
        return view
    try:
        return view.cast("B")
    except TypeError:  # a shape cast() cannot flatten (a 0-d view, say)
        return view.tobytes()


@final
class MplexStream(trio.abc.HalfCloseableStream):
    """One stream of an mplex connection.

    See `trio.abc.HalfCloseableStream` for the contract; the differences are:

    * ``send_all`` returns once the data is queued in the connection's send buffer
      (bounded by ``Config.send_high_water``), not once the peer has it;
    * ``send_nowait`` queues without yielding, for senders of many tiny messages;
    * ``reset`` aborts the stream in both directions and tells the peer.

    Streams come from ``Muxer.open_stream`` and ``Muxer.accept_stream``; do not build
    them yourself.
    """

    def __init__(self, muxer: Muxer, stream_id: int, name: bytes, *, is_initiator: bool) -> None:
        self._muxer = muxer
        #: The stream number (unique per opener, not per connection).
        self.id = stream_id
        #: The raw name from the NewStream frame (at most ``Config.max_stream_name_size``).
        self.name_bytes = name
        #: True if this side opened the stream.
        self.is_initiator = is_initiator
        self._key = stream_id << 1 | is_initiator
        data_flag = Flag.MESSAGE_INITIATOR if is_initiator else Flag.MESSAGE_RECEIVER
        self._data_head = encode_uvarint(stream_id << 3 | data_flag)
        self._last_size = -1
        self._last_prefix = b""
        self._state = StreamState.OPEN
        self._closed_locally = False  # aclose() or reset() was called here
        self._can_send = True  # derived: state sendable, not closed, muxer alive
        self._can_receive = True  # derived: state receivable and not closed locally
        self._eof = False  # the peer's Close arrived: its data is complete
        self._eof_sent = False  # our Close was queued: sending is over, whatever follows
        self._failure: BaseException | None = None  # why the stream broke, if it did
        self._send_failure: ConnectionLost | MuxerClosed | None = None  # why sends cannot go
        self._chunks: deque[bytes | bytearray] = deque()
        self._offset = 0  # bytes of _chunks[0] already handed out
        self._buffered = 0  # unread bytes in _chunks
        self._recv_lot = trio.lowlevel.ParkingLot()
        self._send_busy = False
        self._recv_busy = False

    # -- identity --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The stream's name as text (invalid UTF-8 is replaced, never an error)."""
        return self.name_bytes.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        side = "ours" if self.is_initiator else "theirs"
        return f"<MplexStream id={self.id} ({side}) name={self.name!r} {self._state.value}>"

    # -- sending ---------------------------------------------------------------------------

    def send_nowait(self, data: Buffer) -> None:
        """Queue ``data`` for sending without yielding.

        Raises ``trio.WouldBlock`` (queuing nothing) when the connection's send buffer
        already holds ``Config.send_high_water`` bytes or more (one call may pass the
        mark by its own size); wait with ``wait_send_all_might_not_block``
        or fall back to ``send_all``.  Otherwise the same errors as ``send_all``.
        """
        m = self._muxer
        out = m._outbuf
        if self._send_busy or not self._can_send or len(out) >= m._high_water:
            self._refuse_send_nowait()
        if data.__class__ is not bytes:
            data = _byte_buffer(data)  # len() must count bytes, before anything is queued
        size = len(data)
        if size == self._last_size:
            # The hot path: _append_frame inlined for a write of the same size as the
            # last one (many small messages: the prefix is cached).  A method call here
            # costs a fifth of the whole call, so this stays a copy.
            out += self._last_prefix
            out += data
            m._frames_queued += 1
            if m._writer_parked or (m._idle_scope is not None and len(out) >= m._flush_at):
                m._queued(0)
            return
        if size <= m._frame_size:
            if size:
                self._append_frame(out, data, size)
        else:
            self._queue_frames(memoryview(data).cast("B"))

    def _append_frame(self, out: bytearray, data: Buffer, size: int) -> None:
        """Append one Message frame of ``size`` bytes (0 < size <= frame size) to the
        send buffer, caching its prefix for the next write of the same size."""
        if size != self._last_size:
            self._last_size = size
            self._last_prefix = self._data_head + encode_uvarint(size)
        out += self._last_prefix
        out += data
        self._muxer._queued(1)

    def _refuse_send_nowait(self) -> None:
        """Why send_nowait cannot queue now, as the exception to raise."""
        if self._send_busy:
            raise trio.BusyResourceError("another task is sending on this stream")
        if not self._can_send:
            self._raise_send_error()
        raise trio.WouldBlock

    async def send_all(self, data: Buffer) -> None:
        """See `trio.abc.SendStream.send_all`.

        If cancelled, whole frames of ``data`` may have been queued; never part of one.
        """
        if self._send_busy:
            raise trio.BusyResourceError("another task is sending on this stream")
        if data.__class__ is not bytes:
            data = _byte_buffer(data)  # len() must count bytes, before anything is queued
        self._send_busy = True
        try:
            m = self._muxer
            if m._idle_scope is None:
                # trio's socket idiom: raise if already cancelled, queue, then yield
                # without cancellation.  The writer is then scheduled in the same pass
                # as our yield (one pass less latency than yielding first), and a
                # cancelled call has queued nothing.
                await _checkpoint_if_cancelled()
                yielded = False
            else:
                # The writer is gathering a busy program's frames until every task is
                # blocked, so queuing after the yield delays nothing; one checkpoint
                # costs a call less than the check and the yield apart.
                await _checkpoint()
                yielded = True
            if not self._can_send:
                if not yielded:
                    await _yield()
                self._raise_send_error()
            out = m._outbuf
            size = len(data)
            if size == self._last_size and len(out) < m._high_water:
                # The hot path, as in send_nowait (a repeated size: cached prefix).
                out += self._last_prefix
                out += data
                m._frames_queued += 1
                if m._writer_parked or (m._idle_scope is not None and len(out) >= m._flush_at):
                    m._queued(0)
                if not yielded:
                    await _yield()
                return
            if size <= m._frame_size and len(out) < m._high_water:
                if size:
                    self._append_frame(out, data, size)
                if not yielded:
                    await _yield()
                return
            if size <= m._frame_size:  # one frame, but the buffer is at the mark
                if size:
                    while len(m._outbuf) >= m._high_water:
                        yielded = await self._wait_for_writer()
                    self._append_frame(m._outbuf, data, size)
            elif await self._send_frames(memoryview(data).cast("B")):
                yielded = True
            if not yielded:
                await _yield()
        finally:
            self._send_busy = False

    async def _send_frames(self, view: memoryview) -> bool:
        """send_all's part for data longer than one frame; True if it yielded.

        Over TCP, whenever nothing is queued or being written, the frames go to the
        kernel from this task without a copy (``Muxer._write_frames_directly``); then
        it waits for the writer to send what the kernel did not take.  If other
        senders keep the buffer busy, it queues copies up to the high-water mark like
        everyone else, so it is never starved.
        """
        m = self._muxer
        step = m._frame_size
        pos, end = 0, len(view)
        direct = m._direct_sends_allowed()
        waited = yielded = False
        while pos < end:
            if direct and not m._outbuf and not m._writing:
                pos = m._write_frames_directly(self, view, pos)
                waited = False
            elif direct and not waited:
                if m._idle_scope is not None:
                    m._idle_scope.cancel()  # write now, not when the program idles
                yielded = waited = await self._wait_for_writer()
            elif len(m._outbuf) >= m._high_water:
                yielded = await self._wait_for_writer()
            else:
                self._queue_frames(view[pos : pos + step])
                pos += step
        return yielded

    async def _wait_for_writer(self) -> bool:
        """Wait until the writer has sent something (or the stream broke); True."""
        if self._can_send:  # else nothing would wake us: the failure woke everyone already
            await self._muxer._writable_lot.park()
        if not self._can_send:
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._raise_send_error()
        return True

    def _queue_frames(self, view: memoryview) -> None:
        m = self._muxer
        out = m._outbuf
        step = m._frame_size
        count = 0
        for start in range(0, len(view), step):
            piece = view[start : start + step]
            out += self._data_head
            out += encode_uvarint(len(piece))
            out += piece
            count += 1
        m._queued(count)

    async def wait_send_all_might_not_block(self) -> None:
        """See `trio.abc.SendStream.wait_send_all_might_not_block`."""
        if self._send_busy:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._send_busy = True
        try:
            m = self._muxer
            if not self._can_send or len(m._outbuf) < m._high_water:
                await trio.lowlevel.checkpoint()
            else:
                await m._writable_lot.park()
            if not self._can_send:
                self._raise_send_error()
        finally:
            self._send_busy = False

    async def send_eof(self) -> None:
        """See `trio.abc.HalfCloseableStream.send_eof`: sends an mplex Close."""
        if self._send_busy:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._send_busy = True
        try:
            await trio.lowlevel.checkpoint()
            if self._closed_locally:
                raise trio.ClosedResourceError("this stream was closed")
            if self._eof_sent:
                return  # repeating send_eof is harmless, whatever happened since
            if (self._failure is not None or self._send_failure is not None) and self._state in _SENDABLE:
                self._raise_send_error()  # our EOF can no longer reach the peer
            verdict = self._apply(StreamEvent.SEND_CLOSE)
            if verdict is Verdict.OK:
                self._eof_sent = True
                self._muxer._queue_control(self.id, self._flag(Flag.CLOSE_INITIATOR))
                self._refresh()
            elif verdict is Verdict.BROKEN:
                self._raise_send_error()
        finally:
            self._send_busy = False

    def _raise_send_error(self) -> None:
        # Local reasons first: sending after our own close or EOF is the caller's
        # mistake (trio's ClosedResourceError) even if the peer reset the stream since.
        if self._closed_locally:
            raise trio.ClosedResourceError("this stream was closed")
        if self._eof_sent:
            raise trio.ClosedResourceError("send_eof() was called on this stream")
        if self._failure is not None:
            raise self._failure_error() from self._failure.__cause__
        if self._send_failure is not None:
            raise fresh_copy(self._send_failure, self.id) from self._send_failure.__cause__
        raise trio.ClosedResourceError("send_eof() was called on this stream")

    # -- receiving -------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """See `trio.abc.ReceiveStream.receive_some`.

        Returns everything buffered (up to ``max_bytes``) as one ``bytes``.  After a
        reset or a lost connection, the data that arrived before it comes first, then
        the error.
        """
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        if self._recv_busy:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._recv_busy = True
        try:
            if not self._waiting_for_data():
                await trio.lowlevel.checkpoint()
            else:
                # Over TCP, read the socket in this task (once: see _receive_for);
                # otherwise, or if that read brought nothing for us, let the
                # muxer's reader task deliver.
                if self._muxer._can_lend():
                    await self._muxer._receive_for(self)
                while self._waiting_for_data():
                    await self._recv_lot.park()
            if self._closed_locally:
                raise trio.ClosedResourceError("this stream was closed")
            if self._buffered:
                return self._take(max_bytes)
            if self._eof:
                return b""
            raise self._failure_error() from self._failure_cause()
        finally:
            self._recv_busy = False

    def _waiting_for_data(self) -> bool:
        """True while receive_some has nothing to return or raise yet."""
        return not self._buffered and self._can_receive and not self._closed_locally

    def _wake_receiver(self) -> None:
        """Something changed for a task waiting in receive_some: let it look again."""
        if self._recv_lot:
            self._recv_lot.unpark_all()
        elif self._muxer._borrower_waiting is self:
            self._muxer._wake_socket_waiters()  # it waits on the socket itself

    def _take(self, max_bytes: int | None) -> bytes:
        chunks = self._chunks
        data: bytes | bytearray
        if max_bytes is None or max_bytes >= self._buffered:
            if len(chunks) == 1:
                data = chunks[0][self._offset :] if self._offset else chunks[0]
            else:
                if self._offset:
                    chunks[0] = chunks[0][self._offset :]
                data = b"".join(chunks)
            chunks.clear()
            self._offset = 0
        else:
            pieces = []
            wanted = max_bytes
            while wanted:
                head = chunks[0]
                available = len(head) - self._offset
                if available <= wanted:
                    pieces.append(head[self._offset :] if self._offset else head)
                    chunks.popleft()
                    self._offset = 0
                    wanted -= available
                else:
                    pieces.append(head[self._offset : self._offset + wanted])
                    self._offset += wanted
                    wanted = 0
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if type(data) is not bytes:
            data = bytes(data)  # a merged chunk (see _deliver)
        self._buffered -= len(data)
        self._muxer._released(self, len(data))
        return data

    def _deliver(self, data: bytes) -> None:
        """Called by the muxer's reader for each (possibly merged) Message frame.

        Small pieces that pile up unread are merged into one chunk of up to
        ``_MERGE_BELOW`` bytes, so unread data costs about its size in memory, not an
        object per frame (a peer sending one byte per read would otherwise make the
        buffer limits count a twentieth of what is held)."""
        chunks = self._chunks
        if chunks and len(data) < _MERGE_BELOW and len(chunks[-1]) < _MERGE_BELOW:
            last = chunks[-1]
            if type(last) is bytes:
                last = chunks[-1] = bytearray(last)
            last += data
        else:
            chunks.append(data)
        self._buffered += len(data)
        self._wake_receiver()

    def _discard(self) -> int:
        """Drop unread data; return how much there was."""
        dropped = self._buffered
        if dropped:
            self._chunks.clear()
            self._offset = 0
            self._buffered = 0
            self._muxer._released(self, dropped)
        return dropped

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """See `trio.abc.AsyncResource.aclose`: closes both directions.

        Sends Close for our direction.  If unread data had to be thrown away while the
        peer was still sending, sends Reset instead, so the peer stops sending into
        the void (mplex has no "stop sending" frame); data that arrives later is
        answered with a Reset too.  Closes even when cancelled.
        """
        if not self._closed_locally:
            self._closed_locally = True
            dropped = self._discard()
            if dropped and self._state in _RECEIVABLE:
                self._send_reset()
            elif self._apply(StreamEvent.SEND_CLOSE) is Verdict.OK:
                self._muxer._queue_control(self.id, self._flag(Flag.CLOSE_INITIATOR))
            self._refresh()
            self._muxer._release_slot(self)
        await trio.lowlevel.checkpoint()

    def reset(self) -> None:
        """Abort the stream in both directions and tell the peer.  Idempotent.

        Unread data is dropped; later calls on this stream raise
        ``trio.ClosedResourceError``.
        """
        self._closed_locally = True
        self._discard()
        self._send_reset()
        self._refresh()
        self._muxer._release_slot(self)

    def _send_reset(self) -> None:
        if self._apply(StreamEvent.SEND_RESET) is Verdict.OK:
            self._muxer._queue_control(self.id, self._flag(Flag.RESET_INITIATOR))

    # -- events from the muxer's reader ----------------------------------------------------

    def _on_remote_close(self) -> bool:
        """The peer's Close arrived; False if it meant nothing (a repeat)."""
        if self._apply(StreamEvent.RECV_CLOSE) is not Verdict.OK:
            return False
        self._eof = True
        self._refresh()
        return True

    def _on_remote_reset(self) -> bool:
        """The peer's Reset arrived; False if it meant nothing (already finished)."""
        if self._apply(StreamEvent.RECV_RESET) is not Verdict.OK:
            return False
        message = f"stream {self.id} was reset by the peer"
        self._fail(StreamReset(message, stream_id=self.id, by_peer=True))
        return True

    def _on_late_data(self) -> None:
        """Data arrived after we closed locally: tell the peer to stop (once)."""
        if self._state in _RECEIVABLE:
            self._send_reset()
            self._refresh()

    def _reset_for_overflow(self) -> None:
        """The slow-reader policy gave up on this stream (the muxer freed its unread
        data first): reset it."""
        if self._apply(StreamEvent.SEND_RESET) is Verdict.OK:
            self._muxer._queue_control(self.id, self._flag(Flag.RESET_INITIATOR))
            self._muxer._stats.streams_reset_by_policy += 1
            self._fail(
                StreamReset(
                    f"stream {self.id} was reset by the slow-reader policy: its unread data "
                    f"went over Config.max_stream_buffer or max_connection_buffer",
                    stream_id=self.id,
                    by_peer=False,
                )
            )

    def _connection_lost(self, error: ConnectionLost | MuxerClosed) -> None:
        if self._failure is None:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        self._refresh()

    def _send_side_lost(self, error: ConnectionLost | MuxerClosed) -> None:
        """Nothing more can be sent on this connection (the muxer is closing);
        receiving goes on until the connection ends."""
        if self._send_failure is None:
            self._send_failure = error
            self._refresh()

    # -- state -----------------------------------------------------------------------------

    def _flag(self, initiator_flag: Flag) -> Flag:
        """The flag to send: the initiator's even flag, or the receiver's odd one."""
        return initiator_flag if self.is_initiator else Flag(initiator_flag - 1)

    def _apply(self, event: StreamEvent) -> Verdict:
        self._state, verdict = transition(self._state, event)
        return verdict

    def _refresh(self) -> None:
        """Recompute the derived flags, wake whoever must re-check, let go when finished."""
        alive = self._failure is None
        self._can_send = (
            alive and self._send_failure is None and not self._closed_locally and self._state in _SENDABLE
        )
        self._can_receive = (
            alive and not self._closed_locally and not self._eof and self._state in _RECEIVABLE
        )
        self._wake_receiver()
        m = self._muxer
        if m._writable_lot:
            m._writable_lot.unpark_all()
        if self._state in FINISHED_STATES or self._failure is not None:
            m._forget(self)

    def _failure_error(self) -> BaseException:
        """A fresh exception describing the failure (each raise gets its own traceback)."""
        return fresh_copy(self._failure, self.id)

    def _failure_cause(self) -> BaseException | None:
        return self._failure.__cause__ if self._failure is not None else None
