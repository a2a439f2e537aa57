"""The input half of the protocol engine (sans-IO): ``Inbound``, which ``Engine``
extends.

What the transport delivered goes in (``receive``, ``absorb``, ``resume``): the decoder
turns it into frames, and each frame is acted on: data to its stream's unread buffer
(waking its receiver), a NewStream to the accept backlog or refused, a Close or a
Reset to the stream's state, and frames nobody can use counted against the abuse
budgets.  The per-frame path lives here; the stream table, the program's actions and
the rules they share (``_changed``, ``_control``, ...) are ``Engine``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from .budget import AbuseBudgets
from .config import Config
from .decoder import Decoder, RawFrame
from .errors import ProtocolError
from .record import Broken, StreamRecord
from .states import TRANSITIONS, Direction, StreamEvent, StreamState, Verdict
from .stats import Counters
from .table import StreamTable
from .unread import ReceiveBuffer, UnreadAccount
from .wire import Flag

__all__ = ["ARRIVALS_PER_STEP", "HAND_ON_SIZE", "Inbound"]

_NEW_STREAM = int(Flag.NEW_STREAM)
_MESSAGE_INITIATOR = int(Flag.MESSAGE_INITIATOR)
_RESET_RECEIVER = int(Flag.RESET_RECEIVER)
_OK = Verdict.OK
_RECV_CLOSE = StreamEvent.RECV_CLOSE
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


class Inbound:
    """The engine's input side: see the module docstring.  ``Engine`` sets up the
    state named below and defines the rules named after it."""

    config: Config
    decoder: Decoder
    streams: dict[int, StreamRecord]
    table: StreamTable
    budgets: AbuseBudgets
    counters: Counters
    unread: UnreadAccount[StreamRecord]
    woken: list[StreamRecord]
    arrived: bool
    may_send: bool
    _apply: Callable[[StreamRecord, StreamEvent], Verdict]
    _break: Callable[[StreamRecord, Broken, Direction], None]
    _changed: Callable[[StreamRecord], None]
    _control: Callable[[int, Flag], None]
    _send_reset: Callable[[StreamRecord], None]
    reset_by_policy: Callable[[StreamRecord], bool]

    def __init__(self) -> None:
        #: Frames of the last input held back for ``resume`` (``ARRIVALS_PER_STEP``).
        self._held: list[RawFrame] = []
        #: While True, the frames of each input are kept in ``traced`` (for a log of
        #: every frame): the layer above sets it and empties the list.
        self.tracing = False
        self.traced: list[RawFrame] = []
        #: Buffers handed a view of the last input (the decoder's ``views``): before
        #: the next input, those that still hold one get a copy of it instead.
        self._viewing: list[ReceiveBuffer] = []

    @property
    def pending(self) -> bool:
        """True while part of the last input waits for ``resume`` (``frames_per_yield``,
        ``ARRIVALS_PER_STEP``)."""
        return self.decoder.pending or bool(self._held)

    def absorb(self, data: bytes | bytearray) -> bool:
        """Take ``data`` if it only continues the body of the frame in progress: to its
        stream as it is if it is ``HAND_ON_SIZE`` or more and the stream receives (no
        copy, no wait for the frame's end); else kept until the frame is complete.
        The first engine call for every input that ``keep`` did not take (``receive``
        starts here too), so it first lets go of the last input (``_release_views``);
        ``keep`` takes nothing while views of the last input are held."""
        if self._viewing:
            self._release_views()
        if self._held:
            return False  # held frames come first
        decoder = self.decoder
        if len(data) >= HAND_ON_SIZE and not self.tracing:
            header = decoder.body_header(data)  # -1 (flag 7) if it does not continue a body
            if 0 < header & 7 <= _MESSAGE_INITIATOR and type(data) is bytes:
                record = self.streams.get((header >> 3) << 1 | (header & 1))
                if record is not None and record.can_receive:
                    kept = decoder.pass_on(data)
                    if kept:
                        self._deliver(record, kept)
                    self._deliver(record, data)
                    self.counters.bytes_received += len(data)
                    return True
        if not decoder.absorb(data):
            return False  # it completes the frame, or is no body: feed it
        self.counters.bytes_received += len(data)
        return True

    def keep(self, data: bytes | bytearray) -> bool:
        """``absorb`` where it changes nothing the layer above acts on: keep ``data``
        if it only continues the body in progress, is too short to hand on, and the
        last input holds nothing back; else return False (then ``absorb``).  The
        middle of a large frame over TLS, one 16 KiB record after another."""
        if self._viewing or self._held or len(data) >= HAND_ON_SIZE or not self.decoder.absorb(data):
            return False
        self.counters.bytes_received += len(data)
        return True

    def _release_views(self) -> None:
        """Give every buffer still holding a view of the last input a copy instead, so
        that unread data keeps no input alive but the current one."""
        for buffer in self._viewing:
            buffer.own()
        self._viewing.clear()

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

    def _deliver(self, record: StreamRecord, body: bytes | memoryview) -> None:
        unread = record.unread
        unread.append(body)
        if type(body) is memoryview:
            self._viewing.append(unread)
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
        record.state, verdict = TRANSITIONS[(record.state, _RECV_CLOSE)]  # _apply, inlined
        if verdict is not _OK:
            return False
        if record.receiving is _OPEN:  # end_direction(receiving, ENDED), inlined
            record.receiving = _ENDED
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

    def _new_stream(self, stream_id: int, name: bytes | memoryview, now: float) -> None:
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
        # (only Message bodies come out as views, but the decoder's type says either)
        record = StreamRecord(stream_id, bytes(name[: config.max_stream_name_size]), is_initiator=False)
        if not self.may_send:
            record.sending = _LOST
            record.refresh()
        table.add_theirs(record)
        self.arrived = True
