"""The mplex protocol engine (sans-IO): ``Engine``.

Bytes from the peer go in (``receive``: the input side, ``Inbound``, which the engine
extends); what they mean comes out as changes to the stream records, bytes queued in
the ``Outbox`` (the control frames the input calls for) and notices for the layer
above: the records whose waiting receiver must be woken (``woken``), and whether
senders, acceptors or tasks waiting for a stream slot should look again.  The
program's own actions on streams (``open``, ``send_close``, ``close``, ``reset``) go
through the engine too, which owns every rule: the stream table, ids, limits, the
accept backlog, tombstones of finished streams, the abuse budgets, and what may be
sent.  Nothing here waits, wakes or reads a clock: time is passed in.

Streams are keyed by ``id << 1 | opened_by_us``: the same number opened by each side
names two different streams.  A frame with an even flag comes from the stream's
opener, so it names a stream the peer opened; an odd flag names one we opened.
"""

from __future__ import annotations

from .budget import AbuseBudgets
from .config import Config
from .decoder import Decoder
from .inbound import ARRIVALS_PER_STEP, HAND_ON_SIZE, Inbound
from .outbox import Outbox
from .record import Broken, StreamRecord
from .states import FINISHED_STATES, TRANSITIONS, Direction, StreamEvent, StreamState, Verdict, end_direction
from .stats import Counters
from .table import StreamTable
from .unread import UnreadAccount
from .varint import encode_uvarint
from .wire import Encoder, Flag

__all__ = ["ARRIVALS_PER_STEP", "HAND_ON_SIZE", "Engine"]

_OK = Verdict.OK
_SEND_CLOSE = StreamEvent.SEND_CLOSE
_RESET_RECEIVER = int(Flag.RESET_RECEIVER)
_OPEN, _ENDED, _RESET = Direction.OPEN, Direction.ENDED, Direction.RESET
_LOST, _CLOSED = Direction.LOST, Direction.CLOSED
#: States whose direction from the peer is still open on the wire.
_RECEIVABLE = frozenset({StreamState.OPEN, StreamState.LOCAL_CLOSED})


class Engine(Inbound):
    """One connection's protocol state: see the module docstring."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        #: The one encoder of every frame this connection sends.
        self.encoder = Encoder(config.max_send_frame_size)
        #: The longest name ``open`` sends: ``Config.max_stream_name_size`` within one frame.
        self.name_limit = min(config.max_stream_name_size, config.max_send_frame_size)
        #: Decodes the input, at most ``Config.frames_per_yield`` frames per step.
        self.decoder = Decoder(
            config.max_message_size, coalesce=True, frames_per_feed=config.frames_per_yield, views=True
        )
        self.outbox = Outbox(config.send_high_water)
        #: Every stream's unread bytes.
        self.unread: UnreadAccount[StreamRecord] = UnreadAccount(
            config.max_stream_buffer, config.max_connection_buffer
        )
        self.counters = Counters()
        #: Which streams exist: ids, slots, backlog, tombstones.
        self.table = table = StreamTable(config.max_inbound_streams, config.max_outbound_streams)
        #: Live streams by key, and those waiting to be accepted (the table's own).
        self.streams = table.streams
        self.backlog = table.backlog
        self.budgets = AbuseBudgets(config)
        #: False once nothing more may be queued; control frames are then dropped.
        self.may_send = True
        #: What ended the send side, and the connection: the layer above's errors,
        #: kept for it (records broken ``LOST`` refer to ``end_error``).
        self.send_error: object = None
        self.end_error: object = None
        # Notices for the layer above, which acts on them and clears them.
        #: Records whose ``waiter`` must be woken.
        self.woken: list[StreamRecord] = []
        #: A stream's state changed: senders waiting for room should look again.
        self.changed = False
        #: New streams arrived in the backlog.
        self.arrived = False
        #: A ``max_outbound_streams`` slot came free.
        self.slot_freed = False
        #: Control frames queued in the outbox.
        self.control_queued = 0
        #: Unread bytes were dropped (a reader paused for the buffers may go on).
        self.released = False

    # -- the program's actions --------------------------------------------------------------

    def open(self, name: bytes | None) -> StreamRecord:
        """A new stream of ours (its NewStream queued); the caller made sure a slot is
        free and the outbox has room.  ``MplexError`` once every id is used."""
        stream_id = self.table.take_id()
        if name is None:
            name = str(stream_id).encode()
        record = StreamRecord(stream_id, name, is_initiator=True)
        self.table.add_ours(record)
        self.counters.streams_opened += 1
        self._control(stream_id, Flag.NEW_STREAM, name)
        return record

    def accept(self) -> StreamRecord:
        """The oldest stream of the backlog (the caller checked there is one)."""
        self.counters.streams_accepted += 1
        return self.backlog.popleft()

    def take(self, record: StreamRecord, max_bytes: int | None) -> bytes:
        """Up to ``max_bytes`` of ``record``'s unread data (it must have some)."""
        return self.unread.take(record.unread, record, max_bytes)

    def send_close(self, record: StreamRecord) -> bool:
        """``send_eof``: end our direction with a Close; False when the stream cannot
        send (the caller raises why)."""
        if record.sending is _ENDED:
            return True  # repeating it is harmless
        if record.sending is not _OPEN:
            return False
        record.state, verdict = TRANSITIONS[(record.state, _SEND_CLOSE)]  # _apply, inlined
        if verdict is not _OK:
            return False
        record.sending = _ENDED
        self._control(record.id, record.flag(Flag.CLOSE_INITIATOR))
        self._changed(record)
        return True

    def close(self, record: StreamRecord) -> None:
        """``aclose``: close both directions here.  If unread data had to be dropped
        while the peer still sends, Reset instead of Close, so the peer stops sending
        into the void (mplex has no "stop sending" frame)."""
        if record.receiving is _CLOSED:
            return
        record.sending = record.receiving = _CLOSED
        if record.unread.size and self._discard(record) and record.state in _RECEIVABLE:
            self._send_reset(record)
        else:
            record.state, verdict = TRANSITIONS[(record.state, _SEND_CLOSE)]  # _apply, inlined
            if verdict is _OK:
                self._control(record.id, record.flag(Flag.CLOSE_INITIATOR))
        self._changed(record)
        if record.is_initiator:  # (_changed released it if the stream finished)
            self._release_slot(record)

    def reset(self, record: StreamRecord) -> None:
        """``reset()``: abort both directions and tell the peer."""
        record.sending = record.receiving = _CLOSED
        self._discard(record)
        self._send_reset(record)
        self._changed(record)
        self._release_slot(record)

    def reset_by_policy(self, record: StreamRecord) -> bool:
        """Give up on a slow (or never accepted) stream: free its unread data, reset
        it, and take it out of the backlog.  False if it had finished already."""
        self._discard(record)
        if self.table.unaccepted(record):
            self.backlog.remove(record)  # nobody wants a stream reset unseen
        if self._apply(record, StreamEvent.SEND_RESET) is not _OK:
            return False
        self._control(record.id, record.flag(Flag.RESET_INITIATOR))
        self.counters.streams_reset_by_policy += 1
        self._break(record, Broken.POLICY_RESET, _RESET)
        return True

    def stop_sending(self, error: object) -> None:
        """Nothing more may be queued (the connection is closing, or a write failed):
        every stream's sending direction ends, and ``error`` is why."""
        if not self.may_send:
            return
        self.may_send = False
        self.send_error = error
        for record in list(self.streams.values()):
            record.sending = end_direction(record.sending, _LOST)
            self._changed(record)
        self.slot_freed = True  # tasks waiting for a slot must learn it too

    def end(self, error: object) -> None:
        """The connection ended: every stream breaks (``error`` is why)."""
        self.may_send = False
        self.end_error = error
        self.outbox.clear()
        for record in list(self.streams.values()):
            if record.broken is None:
                self._break(record, Broken.LOST, _LOST)
        self.arrived = self.slot_freed = True

    # -- bookkeeping --------------------------------------------------------------------------

    def _apply(self, record: StreamRecord, event: StreamEvent) -> Verdict:
        record.state, verdict = TRANSITIONS[(record.state, event)]  # transition(), inlined
        return verdict

    def _break(self, record: StreamRecord, why: Broken, how: Direction) -> None:
        """``record`` broke in both directions (``how``: RESET or LOST)."""
        record.broken = why
        record.sending = end_direction(record.sending, how)
        record.receiving = end_direction(record.receiving, how)
        self._changed(record)

    def _changed(self, record: StreamRecord) -> None:
        """After a change of ``record``'s state: wake whoever must look again, and let
        the stream go once it needs no more frames."""
        record.can_send = record.sending is _OPEN  # record.refresh(), inlined
        record.can_receive = record.receiving is _OPEN
        if record.waiter is not None:
            self.woken.append(record)
        self.changed = True
        if (record.state in FINISHED_STATES or record.broken is not None) and self.table.forget(record):
            self._release_slot(record)

    def _release_slot(self, record: StreamRecord) -> None:
        """Our ``record`` stops counting against ``max_outbound_streams``."""
        if self.table.release_slot(record):
            self.slot_freed = True

    def _discard(self, record: StreamRecord) -> int:
        """Drop ``record``'s unread data; how much there was."""
        dropped = self.unread.drop(record.unread, record)
        if dropped:
            self.released = True
        return dropped

    def _send_reset(self, record: StreamRecord) -> None:
        if self._apply(record, StreamEvent.SEND_RESET) is _OK:
            self._control(record.id, record.flag(Flag.RESET_INITIATOR))

    def _control(self, stream_id: int, flag: Flag, body: bytes = b"") -> None:
        """Queue a control frame, unless nothing may be sent any more."""
        if not self.may_send:
            return
        if flag >= _RESET_RECEIVER:
            self.counters.resets_sent += 1
        # Not Encoder.frame: its range checks hold by construction (ids come from the
        # table or a decoded header; a name was cut to the name limit).
        length = encode_uvarint(len(body)) if body else b"\0"
        self.outbox.append_control(encode_uvarint(stream_id << 3 | flag) + length + body)
        self.control_queued += 1
