"""MplexStream: one mplex stream as a ``trio.abc.HalfCloseableStream``.

The stream owns its state and its ``ReceiveBuffer``.  Its send side (``SendSide``, in
``_sending``) appends every byte, as whole frames, to the connection's ``SendQueue``,
which the writer sends in order; so two streams' frames never interleave within a
frame, and a cancelled ``send_all`` leaves only whole frames behind.  A receiving task
with nothing buffered may read the transport itself (``Reader.receive_for``).

What the stream asks of its connection is the small interface listed in the muxer's
theory of operation; what the connection's reader tells the stream are the methods
under "events from the muxer's reader" below.

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
import weakref
from typing import TYPE_CHECKING, NoReturn, final

import trio

from ._endings import ConnectionLost, MuxerClosed, StreamReset, fresh_copy
from ._engine.states import (
    FINISHED_STATES,
    Direction,
    StreamEvent,
    StreamState,
    Verdict,
    end_direction,
    transition,
)
from ._engine.unread import ReceiveBuffer, UnreadData
from ._engine.wire import Encoder, Flag
from ._guard import ConflictGuard
from ._sending import SendSide
from ._sendqueue import SendQueue

if TYPE_CHECKING:
    from ._reader import Reader
    from ._streams import Streams
    from ._writer import Writer

__all__ = ["MplexStream"]

#: A delivered piece this large means the stream is taking a bulk transfer (see
#: receive_some): over the generic path its reader then keeps the read turn.
_BULK_DELIVERY = 4096
_RECEIVABLE = frozenset({StreamState.OPEN, StreamState.LOCAL_CLOSED})  # their direction open on the wire
_OPEN, _ENDED, _RESET, _LOST, _CLOSED = (
    Direction.OPEN,
    Direction.ENDED,
    Direction.RESET,
    Direction.LOST,
    Direction.CLOSED,
)


@final
class MplexStream(SendSide, trio.abc.HalfCloseableStream):
    """One stream of an mplex connection.

    See `trio.abc.HalfCloseableStream` for the contract; the differences are:

    * ``send_all`` returns once the data is queued in the connection's send buffer
      (bounded by ``Config.send_high_water``), not once the peer has it;
    * ``send_nowait`` queues without yielding, for senders of many tiny messages;
    * ``reset`` aborts the stream in both directions and tells the peer.

    Streams come from ``Muxer.open_stream`` and ``Muxer.accept_stream``; do not build
    them yourself.
    """

    # Slots with docstrings, so that help() and the API reference list what a stream is.
    __slots__ = {
        "id": "The stream number (unique per opener, not per connection).",
        "is_initiator": "True if this side opened the stream.",
        "key": "Unique within the connection (each side numbers its own streams): ``id << 1 | is_initiator``",
        "name_bytes": "The raw name from the NewStream frame (at most ``Config.max_stream_name_size``).",
    }

    def __init__(
        self,
        streams: Streams,
        reader: Reader,
        writer: Writer,
        stream_id: int,
        name: bytes,
        *,
        is_initiator: bool,
        queue: SendQueue,
        encoder: Encoder,
        unread: UnreadData[MplexStream],
    ) -> None:
        super().__init__(
            writer, queue, encoder, Flag.MESSAGE_INITIATOR if is_initiator else Flag.MESSAGE_RECEIVER
        )
        # Weak: the connection's table holds its streams, and a stream the program keeps
        # must not keep an ended connection alive (nor form a cycle with it).
        self._streams = weakref.ref(streams)
        self._reader = reader
        self.id = stream_id
        self.name_bytes = name
        self.is_initiator = is_initiator
        self.key = stream_id << 1 | is_initiator
        self._state = StreamState.OPEN
        # What the program may do in each direction (see _state.Direction).
        self._sending = _OPEN
        self._receiving = _OPEN
        self._can_send = True  # self._sending is OPEN (read by every send)
        self._can_receive = True  # self._receiving is OPEN (read for every frame)
        self._failure: BaseException | None = None  # why the stream broke, if it did
        self._send_failure: ConnectionLost | MuxerClosed | None = None  # why sends cannot go
        self._buffer = ReceiveBuffer(unread, self)
        self._last_delivery = 0  # bytes of the last piece the reader delivered
        # The task waiting in receive_some (one at most: the busy guard), for a
        # direct reschedule: a ParkingLot costs more, once for each frame delivered.
        self._recv_waiter: trio.lowlevel.Task | None = None
        self._recv_guard = ConflictGuard("another task is receiving on this stream")

    # -- identity --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The stream's name as text (invalid UTF-8 is replaced, never an error)."""
        return self.name_bytes.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        side = "ours" if self.is_initiator else "theirs"
        return f"<MplexStream id={self.id} ({side}) name={self.name!r} {self._state.value}>"

    # -- sending (the rest is SendSide's, in _sending) -------------------------------------

    async def send_eof(self) -> None:
        """See `trio.abc.HalfCloseableStream.send_eof`: sends an mplex Close."""
        with self._send_guard:
            await trio.lowlevel.checkpoint()
            if self._sending is _ENDED:
                return  # repeating send_eof is harmless, whatever happened since
            # An open sending direction is open on the wire too, so Close is due.
            if self._sending is not _OPEN or self._apply(StreamEvent.SEND_CLOSE) is not Verdict.OK:
                self._raise_send_error()
            self._sending = _ENDED
            self._writer.send_control(self.id, self._flag(Flag.CLOSE_INITIATOR))
            self._refresh()

    def _raise_send_error(self) -> NoReturn:
        # Local reasons win (see Direction): sending after our own close or EOF is the
        # caller's mistake (trio's ClosedResourceError) even if the peer reset since.
        if self._sending is _CLOSED:
            raise trio.ClosedResourceError("this stream was closed")
        if self._sending is _ENDED:
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
        with self._recv_guard:
            buffer = self._buffer
            if buffer.size or not self._can_receive:  # not _waiting_for_data(), inlined
                await trio.lowlevel.checkpoint()
            else:
                # Read the transport in this task (once: see Reader.receive_for);
                # otherwise, or if that read brought nothing for us, let the
                # muxer's reader task deliver.
                if self._reader.may_lend(bulk=self._last_delivery >= _BULK_DELIVERY):
                    await self._reader.receive_for(self)
                while not buffer.size and self._can_receive:
                    await self._park_receiver()
            if self._receiving is _CLOSED:
                raise trio.ClosedResourceError("this stream was closed")
            if buffer.size:
                return buffer.take(max_bytes)
            if self._receiving is _ENDED:
                return b""
            raise self._failure_error() from self._failure_cause()

    @property
    def closed(self) -> bool:
        """True once neither direction can carry more data: both sides closed the
        stream, either side reset it, it was closed here, or the connection ended.
        (Data that arrived before may still wait in ``receive_some``.)"""
        return not self._can_send and not self._can_receive

    @property
    def unread_bytes(self) -> int:
        """Bytes received on this stream and not read yet (they count against
        ``Config.max_stream_buffer`` and ``max_connection_buffer``)."""
        return self._buffer.size

    def _waiting_for_data(self) -> bool:
        """True while receive_some has nothing to return or raise yet."""
        return not self._buffer.size and self._can_receive

    async def _park_receiver(self) -> None:
        """Wait in receive_some until ``_wake_receiver`` (or cancellation)."""
        self._recv_waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort_receive)

    def _abort_receive(self, _: object) -> trio.lowlevel.Abort:
        self._recv_waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _wake_receiver(self) -> None:
        """Something changed for a task waiting in receive_some: let it look again."""
        task = self._recv_waiter
        if task is not None:
            self._recv_waiter = None
            trio.lowlevel.reschedule(task)
        else:
            self._reader.wake_borrower(self)  # it may wait on the transport itself

    def _deliver(self, data: bytes) -> bool:
        """The reader's delivery of one (possibly merged) Message frame; True if the
        stream now holds more than ``Config.max_stream_buffer`` unread bytes."""
        over = self._buffer.append(data)
        self._last_delivery = len(data)
        self._wake_receiver()
        return over

    def _discard(self) -> int:
        """Drop unread data; return how much there was."""
        return self._buffer.discard()

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """See `trio.abc.AsyncResource.aclose`: closes both directions.

        Sends Close for our direction.  If unread data had to be thrown away while the
        peer was still sending, sends Reset instead, so the peer stops sending into
        the void (mplex has no "stop sending" frame); data that arrives later is
        answered with a Reset too.  Closes even when cancelled.
        """
        if self._receiving is not _CLOSED:
            self._sending = self._receiving = _CLOSED
            dropped = self._discard()
            if dropped and self._state in _RECEIVABLE:
                self._send_reset()
            elif self._apply(StreamEvent.SEND_CLOSE) is Verdict.OK:
                self._writer.send_control(self.id, self._flag(Flag.CLOSE_INITIATOR))
            self._refresh()
            self._release_slot()
        await trio.lowlevel.checkpoint()

    def reset(self) -> None:
        """Abort the stream in both directions and tell the peer.  Idempotent.

        Unread data is dropped; later calls on this stream raise
        ``trio.ClosedResourceError``.
        """
        self._sending = self._receiving = _CLOSED
        self._discard()
        self._send_reset()
        self._refresh()
        self._release_slot()

    def _release_slot(self) -> None:
        streams = self._streams()
        if streams is not None:
            streams.release_slot(self)

    def _send_reset(self) -> None:
        if self._apply(StreamEvent.SEND_RESET) is Verdict.OK:
            self._writer.send_control(self.id, self._flag(Flag.RESET_INITIATOR))

    # -- events from the muxer's reader ----------------------------------------------------

    def _on_remote_close(self) -> bool:
        """The peer's Close arrived; False if it meant nothing (a repeat)."""
        if self._apply(StreamEvent.RECV_CLOSE) is not Verdict.OK:
            return False
        self._receiving = end_direction(self._receiving, _ENDED)
        self._refresh()
        return True

    def _on_remote_reset(self) -> bool:
        """The peer's Reset arrived; False if it meant nothing (already finished)."""
        if self._apply(StreamEvent.RECV_RESET) is not Verdict.OK:
            return False
        message = f"stream {self.id} was reset by the peer"
        self._fail(StreamReset(message, stream_id=self.id, by_peer=True), _RESET)
        return True

    def _on_late_data(self) -> bool:
        """Data arrived that this stream does not receive: if we closed it here, tell
        the peer to stop (once) and return True; else False (the frame is dropped)."""
        if self._receiving is not _CLOSED:
            return False
        if self._state in _RECEIVABLE:
            self._send_reset()
            self._refresh()
        return True

    def _reset_for_overflow(self) -> bool:
        """The slow-reader policy gave up on this stream (the muxer freed its unread
        data first): reset it.  False if it was reset already."""
        if self._apply(StreamEvent.SEND_RESET) is not Verdict.OK:
            return False
        self._writer.send_control(self.id, self._flag(Flag.RESET_INITIATOR))
        self._fail(
            StreamReset(
                f"stream {self.id} was reset by the slow-reader policy: its unread data "
                f"went over Config.max_stream_buffer or max_connection_buffer",
                stream_id=self.id,
                by_peer=False,
            ),
            _RESET,
        )
        return True

    def _connection_lost(self, error: ConnectionLost | MuxerClosed) -> None:
        if self._failure is None:
            self._fail(error, _LOST)

    def _fail(self, error: BaseException, how: Direction) -> None:
        """The stream broke (``how``: RESET or LOST) with ``error``, for both directions."""
        self._failure = error
        self._sending = end_direction(self._sending, how)
        self._receiving = end_direction(self._receiving, how)
        self._refresh()

    def _send_side_lost(self, error: ConnectionLost | MuxerClosed) -> None:
        """Nothing more can be sent on this connection (the muxer is closing);
        receiving goes on until the connection ends."""
        if self._send_failure is None:
            self._send_failure = error
            self._sending = end_direction(self._sending, _LOST)
            self._refresh()

    # -- state -----------------------------------------------------------------------------

    def _flag(self, initiator_flag: Flag) -> Flag:
        """The flag to send: the initiator's even flag, or the receiver's odd one."""
        return initiator_flag if self.is_initiator else Flag(initiator_flag - 1)

    def _apply(self, event: StreamEvent) -> Verdict:
        self._state, verdict = transition(self._state, event)
        return verdict

    def _refresh(self) -> None:
        """After a change of state: wake whoever must re-check, let go when finished."""
        self._can_send = self._sending is _OPEN
        self._can_receive = self._receiving is _OPEN
        self._wake_receiver()
        self._queue.wake_senders()
        if self._state in FINISHED_STATES or self._failure is not None:
            streams = self._streams()
            if streams is not None:
                streams.forget(self)

    def _failure_error(self) -> BaseException:
        """A fresh exception describing the failure (each raise gets its own traceback)."""
        return fresh_copy(self._failure, self.id)

    def _failure_cause(self) -> BaseException | None:
        return self._failure.__cause__ if self._failure is not None else None
