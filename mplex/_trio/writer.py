"""The connection's writes: the writer, and when what was queued leaves.

The writer is a task of its own while the connection writes: it starts when frames
need it and ends once it has idled for a while, so an idle connection holds no
writer task (``mplex._trio.writer_task``).

Streams append whole frames to the protocol's ``Outbox``; the writer takes everything
queued in one piece and writes it with one transport write.  It is the only task that
awaits a write.  Where the transport can write without waiting (the socket path), a
sending task may write on the writer's behalf, with one synchronous, non-blocking
write that nothing can cancel half-way: a conversation's message after a quiet spell
(``queued``), frames their task is done with (``send_owed``), and the frames of a
large send from the caller's own buffer (``write_frames``).  Whatever the kernel does
not take stays queued, in order.

When to write is the flush policy, all of it here (the decisions are per connection;
only the wait for idleness below looks at the whole program):

* After a quiet spell (``QUIET``), a message on a stream whose peer still sends (a
  conversation: the peer may be waiting for it) leaves at once: from the task that
  queued it over the socket path, else through the writer.
* Other frames after a quiet spell (a NewStream, a Close, a reply to a peer that has
  finished sending) are likely followed by more from the same task: a request is
  NewStream, Message and Close; a reply is Message, then Close.  They leave when
  their task is done with them (``send_owed``): as it ends a stream's sending side
  (``send_eof``, ``aclose``, ``reset``) or is about to wait in ``receive_some``, the
  task writes everything queued (socket path) or ends the writer's wait.  So a
  request leaves in one write, and so does a reply.  In case the task does neither,
  the writer wakes and writes them itself once a scheduler pass has gone by (kept
  by the run's settler, ``mplex._trio.writer_task``); ``send_all`` asks for that
  pass only after its own yield, which counts as one more.  No timer is involved:
  nothing waits for the program.
* Over the socket path the writer's own write is non-blocking too.  It yields after
  it only when a second batch of data in a row left (a streaming sender's next
  frames then pile up, see below); a request's or a reply's frames cost it no yield.
* Frames that pile up *during* a write mean the program is busy sending.  Writing as
  soon as any sender yields would cost one transport write per message, so the writer
  waits until the program goes idle (``wait_for_idle``), then takes the whole buffer.
* Two bounds keep that honest: the writer is woken early once ``FLUSH_AT`` bytes are
  queued, and never waits longer than ``Config.max_flush_delay`` for idleness.
* Over the socket path, input from the peer ends the wait too (the reader calls
  ``flush_now``): what is queued answers earlier input, and the peer may be idle
  until it arrives.
* A control frame (NewStream, Close, Reset) waits at most ``CONTROL_WAIT`` for a
  busy program: the peer may be waiting on it to accept a stream or to see a reply
  end.  With many tasks running (a stream per request) a scheduler pass is long, and
  waiting for idleness would leave each side waiting for the other's whole batch.
  The task that queues it writes what is queued (socket path, in the middle of the
  pass), or ends the writer's wait (other transports).  Data alone is not hurried:
  a busy sender's frames still gather into large writes.
* Over TLS, while the program sends in bulk (senders waited for room, or
  ``FLUSH_AT`` bytes are queued), a batch ends on a whole 16 KiB record and the rest
  leaves with the next: a short record would cost the receiver a read of its own.

Senders wait (``wait_for_room``) while ``send_high_water`` bytes or more are queued, so
memory stays bounded and the transport's backpressure reaches every sender.
"""

from __future__ import annotations

import sys
import time

import trio

from .._engine.connection import Connection
from .._engine.record import StreamRecord
from .._engine.wire import frame_prefix
from ._util import protected, wait_for_idle
from .tracer import FrameTracer
from .transport import Transport
from .writer_task import FailureHost, WriteFailed, WriterTask

__all__ = ["CONTROL_WAIT", "FLUSH_AT", "QUIET", "Writer"]

#: Queued bytes that make the writer stop waiting for idleness and write now.
FLUSH_AT = 64 * 1024
#: Seconds without a write after which the task that queues a frame may write it
#: itself.  Far above the gap between the writes of a busy sender, below a network
#: round trip: a busy sender's frames still gather into the writer's large writes.
QUIET = 50e-6
#: Seconds since the last write after which a control frame queued while the program
#: is busy goes out without waiting for idleness (see the module docstring).
CONTROL_WAIT = 100e-6
#: A ``wake_at`` no queue reaches.
NEVER = sys.maxsize
#: Most payload bytes handed to one ``writev``: a few socket buffers' worth, so a large
#: send does not build a huge list of frames the kernel cannot take yet.
_DIRECT_BATCH = 1024 * 1024


class Writer(WriterTask):
    """The send side of one connection; ``run()`` is the writer task's loop."""

    # fmt: off
    __slots__ = (
        "_batch_control", "_carried_data", "_frame_size", "_idle_scope", "_outbox", "_protocol", "_refilling",
        "_trace", "_transport", "direct", "gathering", "wake_at", "writing"
    )
    # fmt: on

    def __init__(self, protocol: Connection, transport: Transport, trace: FrameTracer) -> None:
        super().__init__()
        self._protocol = protocol
        self._outbox = protocol.outbox
        self._frame_size = protocol.encoder.frame_size
        self._transport = transport
        #: True where a sending task may write on the writer's behalf.
        self.direct = transport.writes_without_waiting
        self._trace = trace
        #: A sender that makes the outbox hold this many bytes calls ``queued`` (a
        #: sender's hot path: append, then compare with this).
        self.wake_at = 0
        #: True while the writer gathers a busy program's frames until it idles.
        self.gathering = False
        #: True while a batch is being written.
        self.writing = False
        #: ``time.perf_counter()`` of the last write to the transport.
        self.last_write = 0.0
        self._parked = False
        self._idle_scope: trio.CancelScope | None = None
        # True when senders waited for room as the last write ended (they refill now).
        self._refilling = False
        # Bytes of control frames in the batch being written (the rest is data).
        self._batch_control = 0
        # True when the last batch written without waiting carried data.
        self._carried_data = False

    # -- senders --------------------------------------------------------------------------

    def queued(self, *, lone: bool = False, yielding: bool = False) -> bool:
        """Frames were appended to the outbox: make sure they leave.

        ``lone``: data on a stream whose peer still sends (a conversation: the peer
        may be waiting for this message).  After a quiet spell it leaves at once, from
        the calling task where the transport allows it.  Other frames (a NewStream, a
        Close, a reply to a peer that has finished sending) are likely followed by
        more from the same task: they settle for a pass first (``WriterTask.resume``).

        ``yielding``: the caller yields next and calls ``queued`` again after it, so
        that its own yield is the first pass of settling.  True when it must.
        """
        if self._parked:
            if lone and self.direct and time.perf_counter() - self.last_write >= QUIET:
                self._write_queued(time.perf_counter())
                if not self._outbox.buffer:
                    return False
            if yielding:
                return True
            self._wake(settle=not lone)
        elif self._idle_scope is not None:
            if len(self._outbox.buffer) >= FLUSH_AT:
                self.flush_now()
            elif self._outbox.control:
                self._hurry()
        return False

    def _wake(self, *, settle: bool) -> None:
        self._parked = False
        self.wake_at = NEVER
        self.resume(settle=settle)

    def start(self, nursery: trio.Nursery, failure_host: FailureHost, *, hosted: bool) -> None:
        """The connection runs: the writer task starts in ``nursery`` when frames need
        it (now, if some were queued before); see ``WriterTask.start``."""
        super().start(nursery, failure_host, hosted=hosted)
        if self._outbox.buffer:
            self._wake(settle=False)

    def settled(self) -> None:
        """Frames were let settle: if their task has not written them, the writer task
        wakes (or starts) and writes them at once."""
        if self._outbox.buffer:
            self.start_task()
        else:
            self._parked = True
            self.wake_at = 0

    def settling_frames(self) -> bool:
        return bool(self._outbox.buffer)

    def send_owed(self) -> None:
        """The calling task is done with what it queued for now: it ended a stream's
        sending side, or is about to wait for the peer, who may be waiting for those
        frames.  Where the transport allows it they go to the kernel from this task;
        elsewhere the writer task writes them without waiting for a pass.  Not while
        a busy program's frames are being gathered or written: the writer is on its
        way."""
        outbox = self._outbox
        if not outbox.buffer or self.writing or self._idle_scope is not None:
            return
        if self.direct:
            self._write_queued(time.perf_counter())
        elif self._settling or self._parked:
            self._wake(settle=False)  # no pass to wait for: the writer task writes them now

    def _write_queued(self, now: float) -> None:
        """Hand what is queued to the kernel from the calling task (one non-blocking
        write); what it does not take stays queued, first."""
        self.last_write = now
        outbox = self._outbox
        at_frame = outbox.starts_at_frame
        sent = self._transport.write_nowait(outbox.buffer)
        if sent:
            self._trace.sent(outbox.buffer, at_frame, sent)
            outbox.sent_part(sent)
            if self.senders_waiting:  # a large send waits for the queue to empty
                self.wake_senders()

    def _hurry(self) -> None:
        """A control frame is queued while the program is busy: once ``CONTROL_WAIT``
        has passed since the last write, write what is queued (from the calling task
        where the transport allows it, else by ending the writer's wait for idleness)."""
        now = time.perf_counter()
        if now - self.last_write < CONTROL_WAIT:
            return
        if self.direct:
            self._write_queued(now)
        else:
            self.flush_now()

    def flush_now(self) -> None:
        """Stop waiting for idleness: write what is queued now."""
        if self._idle_scope is not None:
            self.wake_at = NEVER
            self._idle_scope.cancel()

    @property
    def state(self) -> str:
        """``"parked"``, ``"gathering"`` or ``"writing"`` (see ``MuxerStats.writer``)."""
        if self.writing:
            return "writing"
        return "gathering" if self.gathering else "parked"

    def drop_queued(self) -> None:
        """A write failed: what is queued will never leave (senders waiting for room,
        ``aclose``'s flush among them, look again)."""
        self._outbox.clear()
        self.wake_senders()

    def stop(self) -> None:
        """Nothing more will be sent: wake the writer and every sender; no writer task
        starts again."""
        self.stop_task()
        self.wake_senders()

    # -- large sends from the caller's buffer ---------------------------------------------

    def _frames_direct(self) -> bool:
        """True where a large send may go from the caller's buffers (two a frame)."""
        return self.direct and self._transport.max_buffers >= 2

    def sends_directly(self) -> bool:
        """True if a large send may go to the kernel from the sending task at all: the
        transport allows it and the send side is open."""
        return self._frames_direct() and self._protocol.may_send

    def write_frames(self, record: StreamRecord, view: memoryview, pos: int) -> int | None:
        """Frames of ``view[pos:]`` for ``record`` to the kernel with one ``writev``, if
        nothing is queued or being written (so order holds) and the send side is open;
        how far in ``view`` they reach, or None.  The kernel takes whole frames and at
        most part of one more, whose rest is queued; if it takes nothing, the first
        frame is queued, so the caller always progresses."""
        if not self._frames_direct() or self._outbox.buffer or self.writing or not self._protocol.may_send:
            return None
        step = self._frame_size
        most = self._transport.max_buffers // 2  # two buffers a frame
        end = min(len(view), pos + _DIRECT_BATCH, pos + step * most)
        pieces = [view[start : start + step] for start in range(pos, end, step)]
        heads = [frame_prefix(record.id, record.data_flag, len(piece)) for piece in pieces]
        parts = [part for pair in zip(heads, pieces, strict=True) for part in pair]
        sent = self._transport.writev_nowait(parts)
        self.last_write = time.perf_counter()
        if sent:
            self._trace.sent(parts, True, sent)
        outbox = self._outbox
        left, frames = sent, 0
        for head, piece in zip(heads, pieces, strict=True):
            size = len(head) + len(piece)
            frames += 1
            pos += len(piece)
            if left < size:  # the kernel took part of this frame at most: queue the rest
                outbox.queue_unsent(head, piece, left)
                break
            left -= size
        outbox.sent_directly(sent, frames)
        if outbox.buffer:
            self.queued(lone=True)
        return pos

    # -- the writer task --------------------------------------------------------------------

    async def next_batch(self, started: bool = False) -> tuple[bytearray, bool] | None:
        """Wait until frames should be written; take them all (and whether they start
        at a frame).  ``started``: the task has just started, as a parked one wakes.
        None once the task should end (it idled: ``sweep``)."""
        outbox = self._outbox
        while True:
            if started or not outbox.buffer or self.writing:
                if started:
                    started = False  # as if woken: the frames are not a busy program's
                else:
                    self._parked = True
                    self.wake_at = 0 if not self.writing else NEVER
                    if not await self.park():
                        return None
                # Woken by frames after a quiet spell, once they have settled
                # (``resume``), or by a task done with them (``send_owed``).
                if not outbox.buffer or self.writing:
                    continue
            elif len(outbox.buffer) < FLUSH_AT:
                # Frames piled up during the last write: the program is busy sending.
                with trio.move_on_after(self._protocol.config.max_flush_delay) as scope:
                    self._idle_scope = scope
                    self.gathering = True
                    self.wake_at = FLUSH_AT
                    await wait_for_idle()
                self._idle_scope = None
                self.gathering = False
                if not outbox.buffer:
                    continue  # a task that queued a control frame wrote it all meanwhile
            self.wake_at = NEVER
            control = outbox.control
            # When more follows this batch at once, it ends on a whole record: a short
            # last record would cost the receiver a read of its own.
            record_size = self._transport.record_size
            batch = outbox.take_whole(record_size) if record_size and self._bulk() else outbox.take()
            self._batch_control = control - outbox.control
            return batch

    def _bulk(self) -> bool:
        """True while the program sends in bulk: senders waited for room as the last
        write ended (they refill the queue now), or ``FLUSH_AT`` bytes are queued."""
        return self._refilling or len(self._outbox.buffer) >= FLUSH_AT

    @protected
    async def run(self, write_failed: WriteFailed) -> None:
        """The writer task: write batches until it idles (``sweep``) or a write fails;
        then it awaits ``write_failed(error, lost_data)``: ``lost_data`` is True when
        Message frames were lost with it (in the batch or still queued), not only
        control frames."""
        send_all = self._transport.writer_send_all()
        outbox = self._outbox
        sweeper = self.task_started()
        started = True
        try:
            while (batch := await self.next_batch(started)) is not None:
                started = False
                data, at_frame = batch
                self._trace.sent(data, at_frame, len(data))
                self.writing = True
                try:
                    # Where the transport allows it, one non-blocking write first.  After
                    # the second batch of data in a row the writer yields, as a
                    # transport's send_all does, so that a streaming sender's next frames
                    # pile up meanwhile (and the writer gathers them); a request's or a
                    # reply's batch costs no yield of its own.
                    sent = self._transport.write_nowait(data) if self.direct else 0
                    if sent < len(data):
                        await send_all(data[sent:] if sent else data)
                    else:
                        carried_data = self._batch_control < sent
                        if carried_data and self._carried_data:
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        self._carried_data = carried_data
                except Exception as exc:  # any failure of any transport: the send side is lost
                    self.writing = False
                    lost = len(data) + len(outbox.buffer) - self._batch_control - outbox.control
                    await write_failed(exc, lost > 0)
                    return
                finally:
                    self.writing = False
                outbox.sent(len(data))
                self.last_write = time.perf_counter()
                self._refilling = self.senders_waiting > 0
                self.wake_senders()
        finally:
            self.task_ended(sweeper)
