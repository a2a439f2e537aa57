"""One mplex connection's protocol state (sans-IO): ``Connection``, and the ``Notice``
it hands the layer above.

Like h11's and h2's connection objects, it answers through methods and never waits
or wakes (the time comes from the ``clock`` it is given, asked only when a frame is
acted on):

* bytes from the peer go in through ``receive_data`` (``b""``: the input ended), and
  the rest of a large input through ``resume_input`` while ``input_pending``;
* the program's actions on streams go in through ``open``, ``accept``, ``take``,
  ``send_close``, ``close`` and ``reset``; the program's Message frames are appended
  to the ``outbox`` (``wire.frame_prefix``, ``queue_data``);
* what the layer above must act on comes out of ``take_notice``: the tasks to wake and
  the events (``Notice``) that say who else should look again; the bytes to send come
  out of the ``outbox`` (``Outbox.take``).

It owns every rule: the stream table, ids, limits, the accept backlog, tombstones of
finished streams, the abuse budgets, and what may be sent.  The per-frame input path is
an ``Inbound``, which it drives and which applies the rules below through it.

Streams are keyed by ``id << 1 | opened_by_us``: the same number opened by each side
names two different streams.  A frame with an even flag comes from the stream's
opener, so it names a stream the peer opened; an odd flag names one we opened.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from .budget import AbuseBudgets
from .config import Config
from .inbound import FrameTrace, Inbound
from .outbox import Outbox
from .record import Broken, StreamRecord
from .states import (
    FINISHED_STATES,
    RECEIVABLE_STATES,
    TRANSITIONS,
    Direction,
    StreamEvent,
    Verdict,
    end_direction,
)
from .stats import Counters
from .table import StreamTable
from .unread import UnreadAccount
from .wire import Encoder, Flag, frame_prefix

__all__ = ["Connection", "Notice"]

_OK = Verdict.OK
_SEND_CLOSE = StreamEvent.SEND_CLOSE
_RESET_RECEIVER = int(Flag.RESET_RECEIVER)
_OPEN, _ENDED, _RESET = Direction.OPEN, Direction.ENDED, Direction.RESET
_LOST, _CLOSED = Direction.LOST, Direction.CLOSED


class Notice:
    """The events of a notice (``Connection.take_notice``): bits of one ``int``."""

    #: A stream's state changed: senders waiting for room should look again.
    CHANGED = 1
    #: New streams arrived in the backlog.
    ARRIVED = 2
    #: A ``max_outbound_streams`` slot came free (or none ever will).
    SLOT_FREED = 4
    #: Control frames were queued in the outbox: they must leave.
    CONTROL = 8
    #: Unread bytes were dropped (a reader paused for the buffers may go on).
    RELEASED = 16


_CHANGED, _ARRIVED, _SLOT_FREED = Notice.CHANGED, Notice.ARRIVED, Notice.SLOT_FREED
_CONTROL, _RELEASED = Notice.CONTROL, Notice.RELEASED
#: ``take_notice`` when nothing happened.
_NOTHING: tuple[int, Sequence[object]] = (0, ())


class Connection:
    """One connection's protocol state: see the module docstring."""

    # fmt: off
    __slots__ = (
        "_budgets", "_events", "_inbound", "_woken", "config", "counters", "encoder", "input_pending",
        "may_send", "outbox", "table", "unread"
    )
    # fmt: on

    def __init__(
        self, config: Config, *, clock: Callable[[], float], trace: FrameTrace | None = None
    ) -> None:
        self.config = config
        #: The encoder of the frames this connection sends in pieces (it keeps no state
        #: of a connection's: one for every connection with the same frame size).
        self.encoder = _encoder(config.max_send_frame_size)
        #: Encoded frames waiting for the transport.
        self.outbox = Outbox(config.send_high_water)
        #: Every stream's unread bytes.
        self.unread: UnreadAccount[StreamRecord] = UnreadAccount(
            config.max_stream_buffer, config.max_connection_buffer
        )
        self.counters = Counters()
        #: Which streams exist: ids, slots, backlog, tombstones.
        self.table = StreamTable(config.max_inbound_streams, config.max_outbound_streams)
        # Made when a budget is first spent: most connections never spend one.
        self._budgets: AbuseBudgets | None = None
        #: False once nothing more may be queued; control frames are then dropped.
        self.may_send = True
        # What the layer above must act on, handed over by ``take_notice``.
        self._events = 0
        # (None while no task is to wake: an idle connection holds no list.)
        self._woken: list[object] | None = None
        self._inbound = Inbound(config, clock, trace)
        #: True while part of the last input waits for ``resume_input`` (an attribute,
        #: set after each input: the reader asks several times a request).
        self.input_pending = False

    @property
    def streams(self) -> dict[int, StreamRecord]:
        """Live streams by key (the table's)."""
        return self.table.streams

    @property
    def backlog(self) -> dict[StreamRecord, None]:
        """Inbound streams waiting to be accepted, oldest first (the table's)."""
        return self.table.backlog

    @property
    def budgets(self) -> AbuseBudgets:
        """The abuse budgets the peer's frames are spent from."""
        budgets = self._budgets
        if budgets is None:
            budgets = self._budgets = AbuseBudgets(self.config)
        return budgets

    # -- what the layer above acts on ---------------------------------------------------------

    def take_notice(self) -> tuple[int, Sequence[object]]:
        """What changed since the last call: the events (``Notice`` bits; 0 if none) and
        the tasks parked on records (``StreamRecord.park``) that must run again."""
        events, woken = self._events, self._woken
        if woken is None:
            if not events:
                return _NOTHING
            self._events = 0
            return events, ()
        self._events = 0
        self._woken = None
        return events, woken

    # -- input ----------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray) -> bool:
        """What the transport delivered; ``b""`` when its input ended (then see
        ``input_cut``).  Raises ``ProtocolError`` when it breaks the protocol or a budget,
        after acting on the frames before the offending one.  At most
        ``Config.frames_per_yield`` frames are acted on: the rest waits for
        ``resume_input`` (``input_pending``).  False when ``data`` only continued the
        body of a frame (a TLS record in the middle of a large one): then nothing
        changed that the layer above acts on, and nothing is pending."""
        try:
            return self._inbound.receive(self, data)
        finally:
            self.input_pending = self._inbound.pending

    def resume_input(self) -> None:
        """Act on the next part of an input left pending."""
        try:
            self._inbound.resume(self)
        finally:
            self.input_pending = self._inbound.pending

    def input_cut(self) -> int:
        """Bytes of an unfinished frame when the input ended (0: a clean end)."""
        return self._inbound.input_cut()

    @property
    def frames_received(self) -> int:
        """Frames decoded since the connection started."""
        return self._inbound.frames_decoded

    # -- the program's actions --------------------------------------------------------------

    @property
    def slot_free(self) -> bool:
        """True if another stream of ours may open now (``max_outbound_streams``)."""
        return self.table.slot_free

    def open(self, name: bytes | None) -> StreamRecord:
        """A new stream of ours (its NewStream queued); the caller made sure a slot is
        free and the outbox has room.  ``MplexError`` once every id is used."""
        stream_id = self.table.take_id()
        if name is None:
            name = str(stream_id).encode()
        record = StreamRecord(stream_id, name, is_initiator=True)
        self.table.add_ours(record)
        self.counters.streams_opened += 1
        self.control(stream_id, Flag.NEW_STREAM, name)
        return record

    def accept(self) -> StreamRecord:
        """The oldest stream of the backlog (the caller checked there is one)."""
        self.counters.streams_accepted += 1
        backlog = self.backlog
        record = next(iter(backlog))
        del backlog[record]
        if not backlog:
            backlog.clear()  # an emptied one keeps its table: memory an idle connection holds
        return record

    def take(self, record: StreamRecord, max_bytes: int | None) -> bytes:
        """Up to ``max_bytes`` of ``record``'s unread data (it must have some)."""
        return self.unread.take(record.unread, record, max_bytes)

    def queue_data(self, record: StreamRecord, view: memoryview) -> int:
        """Queue ``view`` as Message frames on ``record``; how many."""
        return self.outbox.append_frames(self.encoder, record.id, record.data_flag, view)

    def send_close(self, record: StreamRecord) -> bool:
        """``send_eof``: end our direction with a Close; False when the stream cannot
        send (the caller raises why)."""
        if record.sending is _ENDED:
            return True  # repeating it is harmless
        if record.sending is not _OPEN:
            return False
        record.state, verdict = TRANSITIONS[(record.state, _SEND_CLOSE)]  # apply(), inlined
        if verdict is not _OK:
            return False
        record.sending = _ENDED
        self.control(record.id, record.flag(Flag.CLOSE_INITIATOR))
        self.changed(record)
        return True

    def close(self, record: StreamRecord) -> None:
        """``aclose``: close both directions here.  If unread data had to be dropped
        while the peer still sends, Reset instead of Close, so the peer stops sending
        into the void (mplex has no "stop sending" frame)."""
        if record.receiving is _CLOSED:
            return
        record.sending = record.receiving = _CLOSED
        if record.unread.size and self.discard(record) and record.state in RECEIVABLE_STATES:
            self.send_reset(record)
        else:
            record.state, verdict = TRANSITIONS[(record.state, _SEND_CLOSE)]  # apply(), inlined
            if verdict is _OK:
                self.control(record.id, record.flag(Flag.CLOSE_INITIATOR))
        self.changed(record)
        if record.holds_slot:  # ours, unless changed() released it as the stream finished
            self._release_slot(record)

    def reset(self, record: StreamRecord) -> None:
        """``reset()``: abort both directions and tell the peer."""
        record.sending = record.receiving = _CLOSED
        self.discard(record)
        self.send_reset(record)
        self.changed(record)
        self._release_slot(record)

    def reset_by_policy(self, record: StreamRecord) -> bool:
        """Give up on a slow (or never accepted) stream: free its unread data, reset
        it, and take it out of the backlog.  False if it had finished already."""
        self.discard(record)
        if self.table.unaccepted(record):
            del self.backlog[record]  # nobody wants a stream reset unseen
        if self.apply(record, StreamEvent.SEND_RESET) is not _OK:
            return False
        self.control(record.id, record.flag(Flag.RESET_INITIATOR))
        self.counters.streams_reset_by_policy += 1
        self.break_stream(record, Broken.POLICY_RESET, _RESET)
        return True

    def stop_sending(self) -> None:
        """Nothing more may be queued (the connection is closing, or a write failed):
        every stream's sending direction ends (the layer above keeps why)."""
        if not self.may_send:
            return
        self.may_send = False
        for record in list(self.streams.values()):
            record.sending = end_direction(record.sending, _LOST)
            self.changed(record)
        self._events |= _SLOT_FREED  # tasks waiting for a slot must learn it too

    def end(self) -> None:
        """The connection ended: every stream breaks (the layer above keeps why)."""
        self.may_send = False
        self.outbox.clear()
        for record in list(self.streams.values()):
            if record.broken is None:
                self.break_stream(record, Broken.LOST, _LOST)
        self._events |= _ARRIVED | _SLOT_FREED

    # -- the rules every change follows (the program's actions and ``Inbound``) ----------------

    def apply(self, record: StreamRecord, event: StreamEvent) -> Verdict:
        """``event`` moves ``record``'s state on the wire; whether it was allowed."""
        record.state, verdict = TRANSITIONS[(record.state, event)]
        return verdict

    def break_stream(self, record: StreamRecord, why: Broken, how: Direction) -> None:
        """``record`` broke in both directions (``how``: RESET or LOST)."""
        record.broken = why
        record.sending = end_direction(record.sending, how)
        record.receiving = end_direction(record.receiving, how)
        self.changed(record)

    def changed(self, record: StreamRecord) -> None:
        """After a change of ``record``'s state: wake whoever must look again, and let
        the stream go once it needs no more frames."""
        # record.refresh() and apply() are inlined on the per-request path: with the
        # calls, request/response took 1.09x the time in an A/B (issue 40).
        record.can_send = record.sending is _OPEN
        record.can_receive = record.receiving is _OPEN
        if record.waiter is not None:
            self.wake(record)
        self._events |= _CHANGED
        if (
            (record.state in FINISHED_STATES or record.broken is not None)
            and self.table.forget(record)
            and record.holds_slot
        ):
            self._release_slot(record)

    def wake(self, record: StreamRecord) -> None:
        """The task parked on ``record``, if any, must run again."""
        task = record.waiter  # record.unpark(), inlined (see changed())
        if task is not None:
            record.waiter = None
            woken = self._woken
            if woken is None:
                self._woken = [task]
            else:
                woken.append(task)

    def arrived(self, record: StreamRecord) -> None:
        """The peer opened ``record``, which waits in the backlog."""
        self.table.add_theirs(record)
        self._events |= _ARRIVED

    def discard(self, record: StreamRecord) -> int:
        """Drop ``record``'s unread data; how much there was."""
        dropped = self.unread.drop(record.unread, record)
        if dropped:
            self._events |= _RELEASED
        return dropped

    def send_reset(self, record: StreamRecord) -> None:
        if self.apply(record, StreamEvent.SEND_RESET) is _OK:
            self.control(record.id, record.flag(Flag.RESET_INITIATOR))

    def control(self, stream_id: int, flag: Flag, body: bytes = b"") -> None:
        """Queue a control frame, unless nothing may be sent any more."""
        if not self.may_send:
            return
        if flag >= _RESET_RECEIVER:
            self.counters.resets_sent += 1
        self.outbox.append_control(frame_prefix(stream_id, flag, len(body)) + body)
        self._events |= _CONTROL

    def _release_slot(self, record: StreamRecord) -> None:
        """Our ``record`` stops counting against ``max_outbound_streams``."""
        if self.table.release_slot(record):
            self._events |= _SLOT_FREED


@functools.lru_cache(maxsize=16)
def _encoder(frame_size: int) -> Encoder:
    return Encoder(frame_size)
