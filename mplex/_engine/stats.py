"""A connection's counters and their public snapshot, ``MuxerStats`` (sans-IO)."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Counters", "MuxerStats"]


@dataclasses.dataclass(frozen=True)
class MuxerStats:
    """A read-only snapshot of one muxer's counters (``Muxer.stats``), for monitoring."""

    #: Bytes handed to the transport (frames whole: headers, lengths and bodies).
    bytes_sent: int = 0
    #: Bytes read from the transport.
    bytes_received: int = 0
    #: Frames queued for the transport, control frames included.
    frames_sent: int = 0
    #: Writes handed to the transport (each one ``send_all`` or system call, however
    #: many frames it carried): ``frames_sent / writes`` is how well frames coalesce.
    writes: int = 0
    #: Frames decoded from the transport (before adjacent Message frames are merged).
    frames_received: int = 0
    #: Streams this side opened.
    streams_opened: int = 0
    #: Streams the peer opened that a task took with ``accept_stream``.
    streams_accepted: int = 0
    #: Inbound streams answered with Reset because a limit was reached.
    streams_refused: int = 0
    #: Reset frames sent (by ``reset()``, a refusal or the slow-reader policy).
    resets_sent: int = 0
    #: Reset frames received.
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
    #: Streams in the connection's table: open in at least one direction, or
    #: waiting for the peer's half of a close.  0 once every stream has finished.
    live_streams: int = 0
    #: Of ``bytes_sent``, those a large send handed to the socket straight from the
    #: caller's buffer (the socket fast path's ``writev``), never copied into the queue.
    bytes_sent_without_copy: int = 0
    #: What the writer task is doing: ``"parked"`` (nothing to send), ``"gathering"``
    #: (a busy program's frames, until it goes idle), ``"writing"`` (in a transport
    #: write), or ``"stopped"`` (the send side ended).
    writer: str = "parked"
    #: What the reader task is doing: ``"reading"``, ``"waiting"`` (for the
    #: transport), ``"lent"`` (a task in ``receive_some`` holds the read turn and
    #: reads the socket itself: the socket fast path), ``"paused"`` (held up by slow
    #: readers or by unsent control frames), or ``"stopped"``.
    reader: str = "reading"
    #: While the reader is ``"lent"``: the ``MplexStream.key`` of the stream whose
    #: receiving task holds the read turn.
    reader_lent_to: int | None = None
    #: Tasks in ``receive_some`` waiting for the peer's data (parked, or reading the
    #: transport themselves).
    receivers_waiting: int = 0
    #: Tasks waiting for room in the send buffer (in ``send_all``, ``open_stream`` or
    #: ``aclose``'s flush): for the peer or the transport to take what is queued.
    senders_waiting: int = 0


class Counters:
    """The muxer's live counters (mutable, private); ``MuxerStats`` is their snapshot."""

    # fmt: off
    __slots__ = (
        "bytes_received", "frames_dropped", "resets_received", "resets_sent", "streams_accepted",
        "streams_opened", "streams_refused", "streams_reset_by_policy"
    )
    # fmt: on

    def __init__(self) -> None:
        self.bytes_received = 0
        self.streams_opened = 0
        self.streams_accepted = 0
        self.streams_refused = 0
        self.resets_sent = 0
        self.resets_received = 0
        self.streams_reset_by_policy = 0
        self.frames_dropped = 0

    def snapshot(self, **elsewhere: Any) -> MuxerStats:
        """A frozen copy, with the counters and gauges that live elsewhere passed in."""
        return MuxerStats(
            **elsewhere,
            bytes_received=self.bytes_received,
            streams_opened=self.streams_opened,
            streams_accepted=self.streams_accepted,
            streams_refused=self.streams_refused,
            resets_sent=self.resets_sent,
            resets_received=self.resets_received,
            streams_reset_by_policy=self.streams_reset_by_policy,
            frames_dropped=self.frames_dropped,
        )
