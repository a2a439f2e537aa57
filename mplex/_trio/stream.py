"""MplexStream: one mplex stream as a ``trio.abc.HalfCloseableStream``.

A stream is a handle on the engine's record of it (``StreamRecord``: its state on the
wire, its directions, its unread data) and talks to its connection only through
``StreamHost`` (the driver implements it).  Every byte it sends is appended to the engine's
outbox as whole frames, synchronously, so two streams' frames never interleave within
a frame and a cancelled ``send_all`` leaves only whole frames behind; the writer sends
them in order.  A receiving task with nothing buffered may read the transport itself
(``StreamHost.receive_for``).

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
from typing import final

import trio

from .._engine.record import StreamRecord
from .._engine.states import Direction
from .._engine.wire import frame_prefix
from ._util import Buffer, byte_buffer, protected, protected_if_free
from .stream_host import StreamHost

__all__ = ["MplexStream"]

_ENDED, _CLOSED = Direction.ENDED, Direction.CLOSED
_SEND_BUSY = "another task is sending on this stream"
_RECEIVE_BUSY = "another task is receiving on this stream"
# send_all's checkpoints, bound once: the 32-byte send_all loop calls them millions of times.
_checkpoint = trio.lowlevel.checkpoint
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_yield = trio.lowlevel.cancel_shielded_checkpoint


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

    # fmt: off
    __slots__ = (
        "__weakref__", "_frame_size", "_frames", "_host", "_outbox", "_prefix", "_prefix_size", "_receiving",
        "_record", "_sending", "_writer",
    )
    # fmt: on

    def __init__(self, host: StreamHost, record: StreamRecord, frame_size: int) -> None:
        self._host = host
        self._record = record
        self._outbox = host.outbox
        self._writer = host.writer
        self._frame_size = frame_size
        # Message frames queued by the small-send path and not yet counted in the
        # outbox's ``frames`` (counted when this stream next wakes the writer, sends
        # its Close or is closed: a count per send would cost the hot path a call).
        self._frames = 0
        # The prefix of the last Message frame sent, for a run of equal sizes.
        self._prefix_size = -1
        self._prefix = b""
        # trio's conflict-detector idiom as two flags (guard objects cost allocations):
        # a task is in send_all, send_eof or wait_send_all_might_not_block; in receive_some.
        self._sending = False
        self._receiving = False

    # -- identity --------------------------------------------------------------------------
    # (Read from the stream's record, not kept twice: a node holds many streams.)

    @property
    def id(self) -> int:
        """The stream number (unique per opener, not per connection)."""
        return self._record.id

    @property
    def is_initiator(self) -> bool:
        """True if this side opened the stream."""
        return self._record.is_initiator

    @property
    def key(self) -> int:
        """Unique within the connection (each side numbers its own streams):
        ``id << 1 | is_initiator``."""
        return self._record.key

    @property
    def name_bytes(self) -> bytes:
        """The raw name from the NewStream frame (at most ``Config.max_stream_name_size``)."""
        return self._record.name

    @property
    def name(self) -> str:
        """The stream's name as text (invalid UTF-8 is replaced, never an error)."""
        return self.name_bytes.decode("utf-8", errors="replace")

    @property
    def closed(self) -> bool:
        """True once neither direction can carry more data: both sides closed the
        stream, either side reset it, it was closed here, or the connection ended.
        (Data that arrived before may still wait in ``receive_some``.)"""
        return self._record.closed

    @property
    def unread_bytes(self) -> int:
        """Bytes received on this stream and not read yet (they count against
        ``Config.max_stream_buffer`` and ``max_connection_buffer``)."""
        return self._record.unread.size

    def __repr__(self) -> str:
        side = "ours" if self.is_initiator else "theirs"
        return f"<MplexStream id={self.id} ({side}) name={self.name!r} {self._record.state.value}>"

    # -- sending ---------------------------------------------------------------------------

    @protected_if_free
    def send_nowait(self, data: Buffer) -> None:
        """Queue ``data`` for sending without yielding.

        Raises ``trio.WouldBlock`` (queuing nothing) when the connection's send buffer
        already holds ``Config.send_high_water`` bytes or more (one call may pass the
        mark by its own size); wait with ``wait_send_all_might_not_block`` or fall
        back to ``send_all``.  Otherwise the same errors as ``send_all``.
        """
        outbox = self._outbox
        buffer = outbox.buffer
        if self._sending or not self._record.can_send or len(buffer) >= outbox.high_water:
            self._refuse_send_nowait()
        if data.__class__ is not bytes:
            data = byte_buffer(data)  # len() must count bytes, before anything is queued
        size = len(data)
        if size == self._prefix_size:
            # _queue_small for a run of equal sizes, inlined: the call costs 32 B
            # send_nowait a fifth of its time (A/B in benchmarks/RESULTS.md, issue 40).
            buffer += self._prefix
            buffer += data
            self._frames += 1
            if len(buffer) >= self._writer.wake_at:
                self._outbox.count_frames(self._frames)
                self._frames = 0
                self._writer.queued(lone=not self._record.peer_finished)
        elif size <= self._frame_size:
            if size and self._queue_small(data, size):
                self._writer.queued(lone=not self._record.peer_finished)
        else:
            self._host.queue_data(self._record, memoryview(data).cast("B"))

    def _queue_small(self, data: Buffer, size: int) -> bool:
        """The small-send path: ``data`` (``size`` bytes, at most a frame's) queued as
        one Message frame, its prefix cached for a run of equal sizes.  True when the
        writer must be told (``Writer.queued``)."""
        if size != self._prefix_size:
            self._prefix_size = size
            self._prefix = frame_prefix(self._record.id, self._record.data_flag, size)
        buffer = self._outbox.buffer
        buffer += self._prefix
        buffer += data
        self._frames += 1
        if len(buffer) >= self._writer.wake_at:
            self._outbox.count_frames(self._frames)
            self._frames = 0
            return True
        return False

    def _refuse_send_nowait(self) -> None:
        if self._sending:
            raise trio.BusyResourceError(_SEND_BUSY)
        if not self._record.can_send:
            raise self._host.send_error(self._record)
        raise trio.WouldBlock

    @protected
    async def send_all(self, data: Buffer) -> None:
        """See `trio.abc.SendStream.send_all`.

        If cancelled, whole frames of ``data`` may have been queued; never part of one.
        """
        if self._sending:
            raise trio.BusyResourceError(_SEND_BUSY)
        self._sending = True
        try:
            if data.__class__ is not bytes:
                data = byte_buffer(data)  # len() must count bytes, before anything is queued
            if not self._writer.gathering:
                # trio's socket idiom: raise if already cancelled, queue, then yield
                # without cancellation (a cancelled call has queued nothing).
                await _checkpoint_if_cancelled()
                yielded = False
            else:  # nothing leaves before the program idles: one call, not two
                await _checkpoint()
                yielded = True
            if not self._record.can_send:
                if not yielded:
                    await _yield()
                raise self._host.send_error(self._record)
            size = len(data)
            if size > self._frame_size:
                yielded = await self._send_frames(memoryview(data).cast("B")) or yielded
            elif size:
                outbox = self._outbox
                while len(outbox.buffer) >= outbox.high_water:  # not has_room: see changed()
                    yielded = await self._wait_for_writer()
                if self._queue_small(data, size):
                    lone = not self._record.peer_finished
                    if self._writer.queued(lone=lone, yielding=not yielded):
                        await _yield()
                        self._writer.queued(lone=lone)
                        return
            if not yielded:
                await _yield()
        finally:
            self._sending = False

    async def _send_frames(self, view: memoryview) -> bool:
        """send_all's part for data longer than one frame; True if it yielded.  Where
        the transport allows it and nothing is queued, the frames go to the kernel from
        this task without a copy; otherwise copies are queued up to the high-water mark,
        like everyone else's, so it is never starved."""
        host, outbox, record, writer = self._host, self._outbox, self._record, self._writer
        step = self._frame_size
        pos, end = 0, len(view)
        direct = writer.sends_directly()
        waited = yielded = False
        while pos < end:
            written = writer.write_frames(record, view, pos) if direct else None
            if written is not None:
                pos = written
                waited = False
            elif direct and not waited:
                writer.flush_now()  # write now, not when the program idles
                yielded = waited = await self._wait_for_writer()
            elif not outbox.has_room:
                yielded = await self._wait_for_writer()
            else:
                host.queue_data(record, view[pos : pos + step])
                pos += step
        return yielded

    async def _wait_for_writer(self) -> bool:
        """Wait until the writer has sent something (or the stream broke); True."""
        if self._record.can_send:  # else nothing would wake us: the failure woke everyone
            await self._writer.wait_for_room()
        if not self._record.can_send:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise self._host.send_error(self._record)
        return True

    @protected
    async def wait_send_all_might_not_block(self) -> None:
        """See `trio.abc.SendStream.wait_send_all_might_not_block`."""
        if self._sending:
            raise trio.BusyResourceError(_SEND_BUSY)
        self._sending = True
        try:
            if not self._record.can_send or self._outbox.has_room:
                await trio.lowlevel.checkpoint()
            else:
                await self._writer.wait_for_room()
            if not self._record.can_send:
                raise self._host.send_error(self._record)
        finally:
            self._sending = False

    @protected
    async def send_eof(self) -> None:
        """See `trio.abc.HalfCloseableStream.send_eof`: sends an mplex Close."""
        if self._sending:
            raise trio.BusyResourceError(_SEND_BUSY)
        self._sending = True
        try:
            await _checkpoint_if_cancelled()  # queue, then yield: as send_all does
            self._count_frames()
            error = None if self._host.send_close(self._record) else self._host.send_error(self._record)
            await _yield()
            if error is not None:
                raise error
        finally:
            self._sending = False

    # -- receiving -------------------------------------------------------------------------

    @protected
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
        if self._receiving:
            raise trio.BusyResourceError(_RECEIVE_BUSY)
        self._receiving = True
        try:
            record = self._record
            unread = record.unread
            if unread.size or not record.can_receive:
                await trio.lowlevel.checkpoint()
            else:
                # What we queued first (the peer may wait for it); then one read in
                # this task, or (if it brought nothing for us) wait for the reader.
                self._writer.send_owed()
                host = self._host
                if host.may_lend(record):
                    await host.receive_for(record)
                while not unread.size and record.can_receive:
                    record.park(trio.lowlevel.current_task())
                    await trio.lowlevel.wait_task_rescheduled(self._abort_receive)
            if record.receiving is _CLOSED:
                raise trio.ClosedResourceError("this stream was closed")
            if unread.size:
                return self._host.take(record, max_bytes)
            if record.receiving is _ENDED:
                return b""
            raise self._host.receive_error(record)
        finally:
            self._receiving = False

    def _abort_receive(self, _: object) -> trio.lowlevel.Abort:
        self._record.unpark()
        return trio.lowlevel.Abort.SUCCEEDED

    # -- closing ---------------------------------------------------------------------------

    @protected
    async def aclose(self) -> None:
        """See `trio.abc.AsyncResource.aclose`: closes both directions.

        Sends Close for our direction.  If unread data had to be thrown away while the
        peer was still sending, sends Reset instead, so the peer stops sending into
        the void (mplex has no "stop sending" frame); data that arrives later is
        answered with a Reset too.  Closes even when cancelled.
        """
        self.close()
        await trio.lowlevel.checkpoint()

    @protected
    def close(self) -> None:
        """``aclose`` without the checkpoint, for synchronous code (like the ``close``
        of trio's memory channels).  Idempotent."""
        self._count_frames()
        self._host.close(self._record)

    @protected
    def reset(self) -> None:
        """Abort the stream in both directions and tell the peer.  Idempotent.

        Unread data is dropped; later calls on this stream raise
        ``trio.ClosedResourceError``.
        """
        self._count_frames()
        self._host.reset(self._record)

    def _count_frames(self) -> None:
        """Count the small-send path's frames in the outbox (see ``_frames``)."""
        if self._frames:
            self._outbox.count_frames(self._frames)
            self._frames = 0
