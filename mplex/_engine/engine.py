"""The mplex protocol engine (sans-IO): ``Engine``.

Bytes from the peer go in (``receive``); what they mean comes out as changes to the
stream records, bytes queued in the ``Outbox`` (the control frames the input calls for)
and notices for the layer above: the records whose waiting receiver must be woken
(``woken``), and whether senders, acceptors or tasks waiting for a stream slot should
look again.  The program's own actions on streams (``open``, ``send_close``, ``close``,
``reset``) go through the engine too, which owns every rule: the stream table, ids,
limits, the accept backlog, tombstones of finished streams, the abuse budgets, and
what may be sent.  Nothing here waits, wakes or reads a clock: time is passed in.

Streams are keyed by ``id << 1 | opened_by_us``: the same number opened by each side
names two different streams.  A frame with an even flag comes from the stream's
opener, so it names a stream the peer opened; an odd flag names one we opened.
"""

from __future__ import annotations

from .budget import AbuseBudgets
from .config import Config
from .decoder import Decoder, RawFrame
from .errors import ProtocolError
from .outbox import Outbox
from .record import Broken, StreamRecord
from .states import FINISHED_STATES, Direction, StreamEvent, StreamState, Verdict, end_direction, transition
from .stats import Counters
from .table import StreamTable
from .unread import UnreadAccount
from .wire import Encoder, Flag

__all__ = ["Engine"]

_NEW_STREAM = int(Flag.NEW_STREAM)
_MESSAGE_INITIATOR = int(Flag.MESSAGE_INITIATOR)
_RESET_RECEIVER = int(Flag.RESET_RECEIVER)
_OK = Verdict.OK
_OPEN, _ENDED, _RESET = Direction.OPEN, Direction.ENDED, Direction.RESET
_LOST, _CLOSED = Direction.LOST, Direction.CLOSED
#: States whose direction from the peer is still open on the wire.
_RECEIVABLE = frozenset({StreamState.OPEN, StreamState.LOCAL_CLOSED})


#: New streams one step of input dispatches; the rest of the input waits for the next
#: step.  A server's handlers then start in groups, and the replies of one group can
#: leave while the next is worked on, instead of all of a read's replies together,
#: which leaves the peer idle meanwhile.
ARRIVALS_PER_STEP = 32

#: A read of at least this much of a frame's body goes to its stream as it is, before
#: the frame is complete: no copy, the program starts on it sooner, and it counts
#: against the stream's buffer limits.  Smaller reads (a TLS record brings 16 KiB) are
#: collected and the body is joined once: waking the reader of the stream per record
#: would cost more than the copy.
HAND_ON_SIZE = 64 * 1024


class Engine:
    """One connection's protocol state: see the module docstring."""

    def __init__(self, config: Config) -> None:
        self.config = config
        #: The one encoder of every frame this connection sends.
        self.encoder = Encoder(config.max_send_frame_size)
        #: The longest name ``open`` sends: ``Config.max_stream_name_size`` within one frame.
        self.name_limit = min(config.max_stream_name_size, config.max_send_frame_size)
        #: Decodes the input, at most ``Config.frames_per_yield`` frames per step.
        self.decoder = Decoder(
            config.max_message_size, coalesce=True, frames_per_feed=config.frames_per_yield
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
        #: Frames of the last input held back for ``resume`` (``ARRIVALS_PER_STEP``).
        self._held: list[RawFrame] = []
        #: While True, the frames of each input are kept in ``traced`` (for a log of
        #: every frame): the layer above sets it and empties the list.
        self.tracing = False
        self.traced: list[RawFrame] = []

    # -- input ----------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """True while part of the last input waits for ``resume`` (``frames_per_yield``,
        ``ARRIVALS_PER_STEP``)."""
        return self.decoder.pending or bool(self._held)

    def absorb(self, data: bytes | bytearray) -> bool:
        """Take ``data`` if it only continues the body of the frame in progress: to its
        stream as it is if it is ``HAND_ON_SIZE`` or more and the stream receives (no
        copy, no wait for the frame's end); else kept until the frame is complete."""
        decoder = self.decoder
        header = decoder.body_header(data)  # -1 (flag 7) if it does not continue a body
        if header < 0 or type(data) is not bytes or self._held:
            return False  # (feed_raw copies a bytearray first; held frames come first)
        record = None
        if len(data) >= HAND_ON_SIZE and 0 < header & 7 <= _MESSAGE_INITIATOR and not self.tracing:
            record = self.streams.get((header >> 3) << 1 | (header & 1))
        if record is not None and record.can_receive:
            kept = decoder.pass_on(data)
            if kept:
                self._deliver(record, kept)
            self._deliver(record, data)
        elif not decoder.absorb(data):
            return False  # it completes the frame, or is no body: feed it
        self.counters.bytes_received += len(data)
        return True

    def receive(self, data: bytes | bytearray, now: float) -> None:
        """Take what the transport delivered (not its end: see ``input_cut``).  Raises
        ``ProtocolError`` when it breaks the protocol or a budget, after acting on the
        frames before the offending one."""
        if type(data) is not bytes:
            data = bytes(data)  # once, for the decoder and for a stream handed a piece
        if self.absorb(data):
            return
        self.counters.bytes_received += len(data)
        decoder = self.decoder
        while self.pending:  # the rest of an earlier input comes first
            self.resume(now)
        try:
            frames = decoder.feed_raw(data)
        except ProtocolError as exc:
            self._decoded(exc.decoded, now)
            while self._held:  # every frame before the offending one is acted on
                self.resume(now)
            raise
        self._decoded(frames, now)

    def resume(self, now: float) -> None:
        """The next part of an input left ``pending``: the frames held back after
        ``ARRIVALS_PER_STEP`` new streams, or the next ``Config.frames_per_yield``."""
        if self._held:
            frames, self._held = self._held, []
            self._dispatch(frames, now)
        else:
            self._decoded(self.decoder.resume_raw(), now)

    def _decoded(self, frames: list[RawFrame], now: float) -> None:
        """Frames fresh from the decoder (held frames were traced already)."""
        if self.tracing:
            self.traced.extend(frames)
        self._dispatch(frames, now)

    def input_cut(self) -> int:
        """Bytes of an unfinished frame when the input ended (0: a clean end)."""
        return self.decoder.buffered

    def _dispatch(self, frames: list[RawFrame], now: float) -> None:
        streams = self.streams
        arrivals = 0
        rest = iter(frames)
        for header, body in rest:
            flag = header & 7
            record = streams.get((header >> 3) << 1 | (header & 1))
            if 0 < flag <= _MESSAGE_INITIATOR:
                if not body:  # ignored on receipt (spec 5.9): nothing to store or wake
                    self.budgets.ignored.spend(now)
                elif record is not None and record.can_receive:
                    self._deliver(record, body)
                elif record is None or not self._late_data(record):
                    self._dropped(header, record, now)
            elif flag == _NEW_STREAM:
                self._new_stream(header >> 3, body, now)
                arrivals += 1
                if arrivals == ARRIVALS_PER_STEP:
                    self._held = list(rest)  # for the next step (see ARRIVALS_PER_STEP)
                    return
            else:
                reset = flag >= _RESET_RECEIVER
                if reset:
                    self.counters.resets_received += 1
                    self.budgets.reset.spend(now)
                if record is None:
                    self._dropped(header, record, now)
                elif not (self._remote_reset(record) if reset else self._remote_close(record)):
                    self.counters.frames_dropped += 1
                    self.budgets.ignored.spend(now)  # a repeated Close

    def _deliver(self, record: StreamRecord, body: bytes) -> None:
        unread = record.unread
        unread.append(body)
        account = self.unread
        account.total += len(body)
        record.last_delivery = len(body)
        if record.waiter is not None:
            self.woken.append(record)
        if unread.size > account.max_stream:
            if self.config.slow_reader_policy == "reset":
                self.reset_by_policy(record)
            else:
                account.overfull.add(record)

    def _late_data(self, record: StreamRecord) -> bool:
        """Data for a stream that does not receive: if we closed it here, ask the peer
        to stop (once) and return True; else False (the frame is dropped)."""
        if record.receiving is not _CLOSED:
            return False
        if record.state in _RECEIVABLE:
            self._send_reset(record)
            self._changed(record)
        return True

    def _remote_close(self, record: StreamRecord) -> bool:
        """The peer's Close; False if it meant nothing (a repeat)."""
        if self._apply(record, StreamEvent.RECV_CLOSE) is not _OK:
            return False
        record.receiving = end_direction(record.receiving, _ENDED)
        self._changed(record)
        return True

    def _remote_reset(self, record: StreamRecord) -> bool:
        """The peer's Reset; False if it meant nothing (the stream had finished)."""
        if self._apply(record, StreamEvent.RECV_RESET) is not _OK:
            return False
        self._break(record, Broken.PEER_RESET, _RESET)
        return True

    def _dropped(self, header: int, record: StreamRecord | None, now: float) -> None:
        """A frame nobody can use.  On a live stream (data after the peer's Close) it
        changed nothing.  Late frames for a stream that finished are expected (they
        crossed our close or reset) but change nothing either: both are spent from
        ``budgets.ignored``, so a peer cannot flood a stream, finished or not, for
        free.  Frames for a stream that never existed are spent from ``budgets.unknown``."""
        self.counters.frames_dropped += 1
        if record is not None or self.table.finished(header):
            self.budgets.ignored.spend(now)
        else:
            self.budgets.unknown.spend(now)

    def _new_stream(self, stream_id: int, name: bytes, now: float) -> None:
        """The peer opens ``stream_id``: to the backlog, or refused with a Reset when a
        stream limit or the backlog is full.  A second NewStream for a stream the peer
        has open is a ``ProtocolError``."""
        key = stream_id << 1
        if key in self.streams:
            raise ProtocolError(f"NewStream for stream {stream_id}, which the peer already has open")
        config, table = self.config, self.table
        if table.inbound >= config.max_inbound_streams or len(table.backlog) >= config.accept_backlog:
            self.budgets.refused.spend(now)
            table.remember(key)
            self.counters.streams_refused += 1
            self._control(stream_id, Flag.RESET_RECEIVER)
            return
        record = StreamRecord(stream_id, name[: config.max_stream_name_size], is_initiator=False)
        if not self.may_send:
            record.sending = _LOST
            record.refresh()
        table.add_theirs(record)
        self.arrived = True

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
        if record.sending is not _OPEN or self._apply(record, StreamEvent.SEND_CLOSE) is not _OK:
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
        dropped = self._discard(record)
        if dropped and record.state in _RECEIVABLE:
            self._send_reset(record)
        elif self._apply(record, StreamEvent.SEND_CLOSE) is _OK:
            self._control(record.id, record.flag(Flag.CLOSE_INITIATOR))
        self._changed(record)
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
        record.state, verdict = transition(record.state, event)
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
        record.refresh()
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
        if flag >= Flag.RESET_RECEIVER:
            self.counters.resets_sent += 1
        self.outbox.append_control(self.encoder.frame(stream_id, flag, body))
        self.control_queued += 1
