"""The send queue: whole frames waiting for the transport, and when they leave.

Streams append encoded frames to ``buffer``, one bytearray shared by the connection,
synchronously: a frame is in the queue whole or not at all, so cancellation can never
split one, and two streams' frames never interleave within a frame.  The muxer's
writer task takes everything queued in one piece (``next_batch``) and writes it with
one transport write.

When to write is the subtle part (the flush policy, all of it here):

* After a quiet spell, the first frame wakes the writer, which takes it at once
  together with whatever else that scheduler pass queued: a lone message waits for
  nothing.  Over the socket path the task that queues it may write it itself, saving
  the writer's scheduler pass, with one synchronous non-blocking write
  (``direct_write``).  Over any other transport only the writer writes: a sender that
  awaited the transport's ``send_all`` could neither be cancelled (a write cut short
  leaves half a frame on the wire) nor return while a peer that stopped reading held
  the write up.
* Frames that pile up *during* a write mean the program is busy sending.  Writing as
  soon as any sender yields would cost one transport write per message, so the writer
  waits until the program goes idle (``wait_for_idle``), then takes the whole buffer:
  a busy sender's messages leave in large writes.
* Two bounds keep that honest: the writer is woken early once ``FLUSH_AT`` bytes are
  queued, and never waits longer than ``Config.max_flush_delay`` for idleness.

Senders wait (``wait_for_room``) while ``high_water`` bytes or more are queued, so
memory stays bounded and the transport's backpressure reaches every sender.

The hot path of a sender is two lines: append, then ``if len(buffer) >= wake_at:
queued(0)``.  ``wake_at`` encodes the writer's situation in one number, so a sender
needs no other look at it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable

import trio
from trio.testing import wait_all_tasks_blocked

__all__ = ["FLUSH_AT", "SendQueue"]

#: Queued bytes that make the writer stop waiting for idleness and write now.
FLUSH_AT = 64 * 1024
_NEVER = sys.maxsize
#: Seconds without a write after which the task that queues a frame may write it
#: itself (socket path).  Far above the gap between the writes of a busy sender,
#: below a network round trip: a busy sender's frames still gather into the
#: writer's large writes.
QUIET = 50e-6

#: How the writer learns that the program has gone idle: every other task is blocked.
#: The one place idle detection lives.  Its cost is program-wide while the writer waits
#: in it: trio checks for it on every scheduler pass in which no task is runnable
#: (a few tenths of a microsecond each), and only then.
wait_for_idle: Callable[[], Awaitable[None]] = wait_all_tasks_blocked


class SendQueue:
    """Frames waiting for the transport, and the policy that decides when they go."""

    def __init__(self, high_water: int, max_flush_delay: float) -> None:
        #: Encoded frames, appended whole by senders.
        self.buffer = bytearray()
        #: Queued bytes from which senders wait (``Config.send_high_water``).
        self.high_water = high_water
        #: Frames queued since the connection started.
        self.frames = 0
        #: Bytes handed to the transport since the connection started.
        self.bytes_sent = 0
        #: A sender that makes ``len(buffer)`` reach this must call ``queued()``: 0
        #: while the writer is parked (any frame wakes it), ``FLUSH_AT`` while it waits
        #: for idleness, never while it is awake and will come back by itself.
        self.wake_at = 0
        #: True while the writer gathers a busy program's frames until it idles: a
        #: frame queued now leaves with that batch, however the sender yields.
        self.gathering = False
        #: Bytes of control frames (Close, Reset, NewStream) in ``buffer``: what the
        #: reader pauses for (a peer that never reads must not grow the queue).
        self.control = 0
        #: Bytes at the start of ``buffer`` that finish a frame a direct write began
        #: (-1: not known), so that tracing never parses what is not a frame.
        self.trace_skip = 0
        #: True while a batch is being written.
        self.writing = False
        #: Bytes that large sends handed to the transport without a copy into the queue.
        self.bytes_sent_without_copy = 0
        #: ``time.perf_counter()`` of the last write to the transport.
        self.last_write = 0.0
        #: Set by a transport path that can write from the sending task: called when
        #: a frame arrives for a parked writer; True if it wrote everything queued.
        self.direct_write: Callable[[], bool] | None = None
        self._delay = max_flush_delay
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._writer_parked = False
        self._idle_scope: trio.CancelScope | None = None
        self._room_lot = trio.lowlevel.ParkingLot()

    # -- senders ---------------------------------------------------------------------------

    def queued(self, frames: int) -> None:
        """``frames`` frames were appended to ``buffer``: make sure they leave."""
        self.frames += frames
        if self._writer_parked:
            if self.direct_write is not None and self.direct_write():
                return
            self._wake_writer()
        elif self._idle_scope is not None and len(self.buffer) >= FLUSH_AT:
            self.flush_now()

    def _wake_writer(self) -> None:
        self._writer_parked = False
        self.wake_at = _NEVER
        self._writer_lot.unpark_all()

    def append_control(self, frame: bytes) -> None:
        """Queue a control frame (it goes out whatever the queue holds)."""
        self.buffer += frame
        self.control += len(frame)
        self.queued(1)

    def flush_now(self) -> None:
        """Stop waiting for idleness: write what is queued now."""
        if self._idle_scope is not None:
            self.wake_at = _NEVER
            self._idle_scope.cancel()

    @property
    def writer_state(self) -> str:
        """``"parked"``, ``"gathering"`` or ``"writing"`` (see ``MuxerStats.writer``)."""
        if self.writing:
            return "writing"
        return "gathering" if self.gathering else "parked"

    @property
    def has_room(self) -> bool:
        """True while less than ``high_water`` bytes are queued."""
        return len(self.buffer) < self.high_water

    async def wait_for_room(self) -> None:
        """Wait until the writer has sent something, or ``wake_senders`` is called
        (the caller looks at its situation again)."""
        await self._room_lot.park()

    def wake_senders(self) -> None:
        """Let every waiting sender look at its situation again."""
        if self._room_lot:
            self._room_lot.unpark_all()

    # -- the writer ------------------------------------------------------------------------

    async def next_batch(self) -> tuple[bytearray, int]:
        """Wait until frames should be written; take them all.  Returns the frames
        and their ``trace_skip``."""
        while True:
            if not self.buffer or self.writing:
                self._writer_parked = True
                self.wake_at = 0 if not self.writing else _NEVER
                await self._writer_lot.park()
                # Woken by the first frame after a quiet spell: take it now, with
                # whatever else the same scheduler pass queued.
                if not self.buffer or self.writing:
                    continue
            elif len(self.buffer) < FLUSH_AT:
                # Frames piled up during the last write: the program is busy sending.
                with trio.move_on_after(self._delay) as scope:
                    self._idle_scope = scope
                    self.gathering = True
                    self.wake_at = FLUSH_AT
                    await wait_for_idle()
                self._idle_scope = None
                self.gathering = False
            self.wake_at = _NEVER
            data, skip = self.buffer, self.trace_skip
            self.buffer = bytearray()
            self.control = 0
            self.trace_skip = 0
            return data, skip

    def sent(self, count: int) -> None:
        """``count`` bytes went to the transport just now."""
        self.bytes_sent += count
        self.last_write = time.perf_counter()

    def batch_written(self) -> None:
        """The writer finished a batch: senders waiting for room may go on."""
        self.wake_senders()

    def detach(self) -> None:
        """Drop the transport path's hook (it holds this queue): the connection ended."""
        self.direct_write = None

    def clear(self) -> None:
        """Drop everything queued (the send side ended) and wake every waiter."""
        self.buffer = bytearray()
        self.control = 0
        self.trace_skip = 0
        self._writer_lot.unpark_all()
        self._room_lot.unpark_all()
