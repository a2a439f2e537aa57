"""The bytes waiting for the transport (sans-IO): ``Outbox``.

Every frame the connection sends is appended to ``buffer``, one bytearray, whole and
synchronously: a frame is queued entirely or not at all, so cancellation can never
split one, and two streams' frames never interleave within a frame.  The trio layer's
writer takes everything queued in one piece and writes it with one transport write.

``wake_at`` and ``gathering`` belong to the writer's flush policy (``mplex._trio.writer``),
which keeps them here so that a sender's hot path reads one object: append, then
``if len(buffer) >= wake_at:`` tell the writer.
"""

from __future__ import annotations

import sys

__all__ = ["NEVER", "Outbox"]

#: A ``wake_at`` no buffer reaches.
NEVER = sys.maxsize


class Outbox:
    """Encoded frames waiting for the transport, and what was sent so far."""

    __slots__ = (
        "buffer",
        "bytes_sent",
        "bytes_sent_without_copy",
        "control",
        "frames",
        "gathering",
        "high_water",
        "trace_skip",
        "wake_at",
    )

    def __init__(self, high_water: int) -> None:
        #: Encoded frames, appended whole.
        self.buffer = bytearray()
        #: Queued bytes from which senders wait (``Config.send_high_water``).
        self.high_water = high_water
        #: Frames queued since the connection started.
        self.frames = 0
        #: Bytes handed to the transport since the connection started.
        self.bytes_sent = 0
        #: Of those, bytes a large send handed to the socket from the caller's buffer.
        self.bytes_sent_without_copy = 0
        #: Bytes of control frames (NewStream, Close, Reset) in ``buffer``: what the
        #: reader pauses for (a peer that never reads must not grow the queue).
        self.control = 0
        #: Bytes at the start of ``buffer`` that finish a frame a direct write began
        #: (-1: not known), so that tracing never parses what is not a frame.
        self.trace_skip = 0
        #: A sender that makes ``len(buffer)`` reach this tells the writer (see the
        #: module docstring).
        self.wake_at = 0
        #: True while the writer gathers a busy program's frames until it idles.
        self.gathering = False

    @property
    def has_room(self) -> bool:
        """True while less than ``high_water`` bytes are queued."""
        return len(self.buffer) < self.high_water

    def append_control(self, frame: bytes) -> None:
        """Queue a control frame (it goes out whatever the queue holds)."""
        self.buffer += frame
        self.control += len(frame)
        self.frames += 1

    def take(self) -> tuple[bytearray, int]:
        """Everything queued, and how many of its first bytes finish a frame a direct
        write began; the outbox is empty afterwards."""
        data, skip = self.buffer, self.trace_skip
        self.buffer = bytearray()
        self.control = 0
        self.trace_skip = 0
        return data, skip

    def take_whole(self, unit: int) -> tuple[bytearray, int]:
        """Like ``take``, but a whole number of ``unit`` bytes when that is some but not
        all of what is queued: the rest stays queued, first."""
        buffer = self.buffer
        size = len(buffer) - len(buffer) % unit
        if not size or size == len(buffer):
            return self.take()
        skip = self.trace_skip
        self.buffer = buffer[size:]  # the short rest is copied, not the batch
        del buffer[size:]
        self.trace_skip = -1  # the rest starts inside some frame
        self.control = min(self.control, len(self.buffer))
        return buffer, skip

    def clear(self) -> None:
        """Drop everything queued (nothing more can be sent)."""
        self.take()

    def sent_part(self, count: int) -> None:
        """The first ``count`` bytes of ``buffer`` left from the sending task."""
        self.bytes_sent += count
        if count == len(self.buffer):
            self.take()
        elif count:
            del self.buffer[:count]
            self.trace_skip = -1  # the buffer now starts inside some frame
