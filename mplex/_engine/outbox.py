"""The bytes waiting for the transport (sans-IO): ``Outbox``.

Every frame the connection sends is appended to ``buffer``, one bytearray, whole and
synchronously: a frame is queued entirely or not at all, so cancellation can never
split one, and two streams' frames never interleave within a frame.  The layer above
takes what is queued (``take``) and tells what left (``sent``, ``sent_part``,
``sent_directly``); only the outbox's own methods change it.
"""

from __future__ import annotations

from .wire import Encoder

__all__ = ["Outbox"]


class Outbox:
    """Encoded frames waiting for the transport, and what was sent so far."""

    __slots__ = (
        "buffer",
        "bytes_sent",
        "bytes_sent_without_copy",
        "control",
        "frames",
        "high_water",
        "starts_at_frame",
        "writes",
    )

    def __init__(self, high_water: int) -> None:
        #: Encoded frames, appended whole: through the methods below, or by a small
        #: send's two in-place ``+=`` (prefix, body), which never replace the object.
        self.buffer = bytearray()
        #: Queued bytes from which senders wait (``Config.send_high_water``).
        self.high_water = high_water
        #: Frames queued since the connection started.
        self.frames = 0
        #: Bytes handed to the transport since the connection started.
        self.bytes_sent = 0
        #: Of those, bytes a large send handed to the socket from the caller's buffer.
        self.bytes_sent_without_copy = 0
        #: Writes that handed bytes to the transport since the connection started.
        self.writes = 0
        #: Bytes of control frames (NewStream, Close, Reset) in ``buffer``: what the
        #: reader pauses for (a peer that never reads must not grow the queue).
        self.control = 0
        #: False while ``buffer`` starts inside a frame, the rest of one a write cut
        #: short (a frame trace parses only from a frame's start).
        self.starts_at_frame = True

    @property
    def has_room(self) -> bool:
        """True while less than ``high_water`` bytes are queued."""
        return len(self.buffer) < self.high_water

    # -- queuing --------------------------------------------------------------------------------

    def append_frame(self, prefix: bytes, body: bytes | bytearray | memoryview) -> int:
        """Queue one Message frame, ``prefix`` then ``body``; the bytes now queued.
        (Every small send comes here: ``prefix`` is the caller's cached one.)"""
        buffer = self.buffer
        buffer += prefix
        buffer += body
        self.frames += 1
        return len(buffer)

    def append_frames(self, encoder: Encoder, stream_id: int, flag: int, data: memoryview) -> int:
        """Queue ``data`` as Message frames of at most the encoder's frame size; how many."""
        count = encoder.append(self.buffer, stream_id, flag, data)  # type: ignore[arg-type]
        self.frames += count
        return count

    def count_frames(self, count: int) -> None:
        """``count`` frames that a sender appended to ``buffer`` itself, with one
        ``+=`` for the prefix and one for the body (the small-send path of the layer
        above, which counts them and hands the count over here)."""
        self.frames += count

    def append_control(self, frame: bytes) -> None:
        """Queue a control frame (it goes out whatever the queue holds)."""
        self.buffer += frame
        self.control += len(frame)
        self.frames += 1

    # -- taking and sending -------------------------------------------------------------------

    def take(self) -> tuple[bytearray, bool]:
        """Everything queued, and whether it starts at a frame; the outbox is empty
        afterwards."""
        data, at_frame = self.buffer, self.starts_at_frame
        self.buffer = bytearray()
        self.control = 0
        self.starts_at_frame = True  # an empty queue ends with a whole frame
        return data, at_frame

    def take_whole(self, unit: int) -> tuple[bytearray, bool]:
        """Like ``take``, but a whole number of ``unit`` bytes when that is some but not
        all of what is queued: the rest stays queued, first."""
        buffer = self.buffer
        size = len(buffer) - len(buffer) % unit
        if not size or size == len(buffer):
            return self.take()
        at_frame = self.starts_at_frame
        self.buffer = buffer[size:]  # the short rest is copied, not the batch
        del buffer[size:]
        self.starts_at_frame = False  # the rest starts inside some frame
        self.control = min(self.control, len(self.buffer))
        return buffer, at_frame

    def clear(self) -> None:
        """Drop everything queued (nothing more can be sent)."""
        self.take()

    def sent(self, count: int) -> None:
        """``count`` bytes that ``take`` handed out reached the transport."""
        self.bytes_sent += count
        self.writes += 1

    def sent_part(self, count: int) -> None:
        """The first ``count`` bytes of ``buffer`` reached the transport from the
        sending task (the rest stays queued)."""
        self.bytes_sent += count
        self.writes += 1
        if count == len(self.buffer):
            self.take()
        elif count:
            del self.buffer[:count]
            self.starts_at_frame = False

    def sent_directly(self, count: int, frames: int) -> None:
        """``frames`` frames (``count`` bytes of them) went to the transport from the
        caller's buffer, never queued; ``queue_unsent`` queues the rest of the last."""
        self.bytes_sent += count
        self.bytes_sent_without_copy += count
        self.frames += frames
        if count:
            self.writes += 1

    def queue_unsent(self, head: bytes, body: memoryview, sent: int) -> None:
        """Queue what a direct write left of one frame: ``sent`` bytes of ``head`` then
        ``body`` went (queued only while nothing else is)."""
        buffer = self.buffer
        if sent < len(head):
            buffer += head[sent:]
        buffer += body[max(0, sent - len(head)) :]
        if sent:
            self.starts_at_frame = False
