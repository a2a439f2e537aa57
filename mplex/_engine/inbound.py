"""The per-frame input path of a protocol connection (sans-IO): ``Inbound``.

What the transport delivered goes in (``receive``, ``resume``): the decoder turns it
into frames, and each frame is acted on: data to its stream's unread buffer (waking
its receiver), a NewStream to the accept backlog or refused, a Close or a Reset to the
stream's state, and frames nobody can use counted against the abuse budgets.  The
input state (the decoder, frames held back for the next step, views of the last
input) is this object's; the streams and the rules every change follows belong to the
``Connection`` that drives it, which hands itself to each call (so the two never
refer to each other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from .budget import AbuseBudgets
from .config import Config
from .decoder import Decoder, RawFrame
from .errors import ProtocolError
from .record import Broken, StreamRecord
from .states import RECEIVABLE_STATES, TRANSITIONS, Direction, StreamEvent, Verdict
from .stats import Counters
from .table import StreamTable
from .unread import ReceiveBuffer, UnreadAccount
from .wire import Flag

__all__ = ["ARRIVALS_PER_STEP", "HAND_ON_SIZE", "FrameTrace", "Inbound", "StreamRules"]

_NEW_STREAM = int(Flag.NEW_STREAM)
_MESSAGE_INITIATOR = int(Flag.MESSAGE_INITIATOR)
_RESET_RECEIVER = int(Flag.RESET_RECEIVER)
_OK = Verdict.OK
_RECV_CLOSE = StreamEvent.RECV_CLOSE
_OPEN, _ENDED, _RESET = Direction.OPEN, Direction.ENDED, Direction.RESET
_LOST, _CLOSED = Direction.LOST, Direction.CLOSED

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


class FrameTrace(Protocol):
    """Where received frames are traced (the layer above's log), given at construction."""

    def active(self) -> bool:
        """True while frames are traced (asked once per input)."""

    def received(self, frames: list[RawFrame]) -> None:
        """Frames decoded from one input (a stream's adjacent Message frames merged)."""

    def received_body(self, header: int, size: int) -> None:
        """``size`` bytes of the body of the frame ``header``, handed on before it ended."""


class StreamRules(Protocol):
    """What the input path uses of its connection (``Connection``): the streams, the
    accounts, and the rules every change of a stream follows."""

    table: StreamTable
    counters: Counters
    unread: UnreadAccount[StreamRecord]
    may_send: bool

    @property
    def budgets(self) -> AbuseBudgets: ...
    def apply(self, record: StreamRecord, event: StreamEvent) -> Verdict: ...
    def break_stream(self, record: StreamRecord, why: Broken, how: Direction) -> None: ...
    def changed(self, record: StreamRecord) -> None: ...
    def wake(self, record: StreamRecord) -> None: ...
    def arrived(self, record: StreamRecord) -> None: ...
    def send_reset(self, record: StreamRecord) -> None: ...
    def control(self, stream_id: int, flag: Flag, body: bytes = b"") -> None: ...
    def reset_by_policy(self, record: StreamRecord) -> bool: ...


class Inbound:
    """The input state of one connection: see the module docstring."""

    __slots__ = ("_clock", "_config", "_decoder", "_held", "_trace", "_tracing", "_viewing", "pending")

    def __init__(self, config: Config, clock: Callable[[], float], trace: FrameTrace | None) -> None:
        self._config = config
        #: The time, in seconds, for the abuse budgets' windows.
        self._clock = clock
        #: Decodes the input, at most ``Config.frames_per_yield`` frames per step.
        self._decoder = Decoder(
            config.max_message_size, coalesce=True, frames_per_feed=config.frames_per_yield, views=True
        )
        self._trace = trace
        #: Frames of the last input held back for ``resume`` (``ARRIVALS_PER_STEP``).
        self._held: Sequence[RawFrame] = ()
        #: True while the frames of the current input are traced.
        self._tracing = False
        #: Buffers handed a view of the last input (the decoder's ``views``): before
        #: the next input, those that still hold one get a copy of it instead.
        self._viewing: list[ReceiveBuffer] | None = None  # (made when first needed)
        #: True while part of the last input waits for ``resume`` (``frames_per_yield``,
        #: ``ARRIVALS_PER_STEP``).  An attribute, set as each input or step ends: the
        #: connection asks after every input.
        self.pending = False

    @property
    def frames_decoded(self) -> int:
        return self._decoder.frames_decoded

    def input_cut(self) -> int:
        """Bytes of an unfinished frame when the input ended (0: a clean end)."""
        return self._decoder.buffered

    def receive(self, conn: StreamRules, data: bytes | bytearray) -> bool:
        """Take what the transport delivered (see ``Connection.receive_data``); False
        when it only continued the body in progress (nothing to act on)."""
        if self._viewing:
            self._release_views()
        if not data:
            return True  # the end of the input: the layer above asks ``input_cut``
        if type(data) is not bytes:
            data = bytes(data)  # once, for the decoder and for a stream handed a piece
        conn.counters.bytes_received += len(data)
        if not self._held and len(data) < HAND_ON_SIZE and self._decoder.absorb(data):
            return False  # the middle of a large frame (a TLS record): kept, nothing else
        trace = self._trace
        self._tracing = trace is not None and trace.active()
        if not self._held and self._continues_body(conn, data):
            return True
        while self.pending:  # the rest of an earlier input comes first
            self.resume(conn)
        try:
            frames = self._decoder.feed_raw(data)
        except ProtocolError as exc:
            self._decoded(conn, exc.decoded)
            while self._held:  # every frame before the offending one is acted on
                self.resume(conn)
            raise
        self._decoded(conn, frames)
        self.pending = self._decoder.pending or bool(self._held)
        return True

    def _continues_body(self, conn: StreamRules, data: bytes) -> bool:
        """Take ``data`` if it only continues the body of the frame in progress: to its
        stream as it is if it is ``HAND_ON_SIZE`` or more and the stream receives (no
        copy, no wait for the frame's end); else kept until the frame is complete.
        The middle of a large frame: nothing for the layer above to act on."""
        decoder = self._decoder
        if len(data) >= HAND_ON_SIZE:  # (shorter middles were kept by ``receive``)
            header = decoder.body_header(data)  # -1 (flag 7) if it does not continue a body
            if 0 < header & 7 <= _MESSAGE_INITIATOR:
                record = conn.table.streams.get((header >> 3) << 1 | (header & 1))
                if record is not None and record.can_receive:
                    kept = decoder.pass_on(data)
                    if kept:
                        self._deliver(conn, record, kept)
                    self._deliver(conn, record, data)
                    if self._tracing:
                        self._trace.received_body(header, len(data) + len(kept or b""))  # type: ignore[union-attr]
                    return True
            return decoder.absorb(data)  # False: it completes the frame, or is no body
        return False

    def _release_views(self) -> None:
        """Give every buffer still holding a view of the last input a copy instead, so
        that unread data keeps no input alive but the current one."""
        for buffer in self._viewing or ():
            buffer.own()
        self._viewing = None

    def resume(self, conn: StreamRules) -> None:
        """The next part of an input left ``pending``: the frames held back after
        ``ARRIVALS_PER_STEP`` new streams, or the next ``Config.frames_per_yield``."""
        if self._held:
            frames, self._held = self._held, ()
            self._dispatch(conn, frames)
        else:
            self._decoded(conn, self._decoder.resume_raw())
        self.pending = self._decoder.pending or bool(self._held)

    def _decoded(self, conn: StreamRules, frames: list[RawFrame]) -> None:
        """Frames fresh from the decoder (held frames were traced already)."""
        if self._tracing:
            self._trace.received(frames)  # type: ignore[union-attr]
        self._dispatch(conn, frames)

    def _dispatch(self, conn: StreamRules, frames: Sequence[RawFrame]) -> None:
        now = 0.0  # the clock for the budgets: read once a step, when one is spent
        streams = conn.table.streams
        arrivals = 0
        rest = iter(frames)
        for header, body in rest:
            flag = header & 7
            record = streams.get((header >> 3) << 1 | (header & 1))
            if 0 < flag <= _MESSAGE_INITIATOR:
                if not body:  # ignored on receipt (spec 5.9): nothing to store or wake
                    now = now or self._clock()
                    conn.budgets.ignored.spend(now)
                elif record is not None and record.can_receive:
                    self._deliver(conn, record, body)
                elif record is None or not self._late_data(conn, record):
                    now = now or self._clock()
                    self._dropped(conn, header, record, now)
            elif flag == _NEW_STREAM:
                self._new_stream(conn, header >> 3, body)
                arrivals += 1
                if arrivals == ARRIVALS_PER_STEP:
                    self._held = list(rest)  # for the next step (see ARRIVALS_PER_STEP)
                    return
            else:
                reset = flag >= _RESET_RECEIVER
                if reset:
                    now = now or self._clock()
                    conn.counters.resets_received += 1
                    conn.budgets.reset.spend(now)
                if record is None:
                    now = now or self._clock()
                    self._dropped(conn, header, record, now)
                elif not (self._remote_reset(conn, record) if reset else self._remote_close(conn, record)):
                    conn.counters.frames_dropped += 1
                    now = now or self._clock()
                    conn.budgets.ignored.spend(now)  # a repeated Close

    def _deliver(self, conn: StreamRules, record: StreamRecord, body: bytes | memoryview) -> None:
        unread = record.unread
        unread.append(body)
        if type(body) is memoryview:
            if self._viewing is None:
                self._viewing = [unread]
            else:
                self._viewing.append(unread)
        account = conn.unread
        account.total += len(body)
        record.last_delivery = len(body)
        if record.waiter is not None:
            conn.wake(record)
        if unread.size > account.max_stream:
            if self._config.slow_reader_policy == "reset":
                conn.reset_by_policy(record)
            else:
                account.mark_overfull(record)

    def _late_data(self, conn: StreamRules, record: StreamRecord) -> bool:
        """Data for a stream that does not receive: if we closed it here, ask the peer
        to stop (once) and return True; else False (the frame is dropped)."""
        if record.receiving is not _CLOSED:
            return False
        if record.state in RECEIVABLE_STATES:
            conn.send_reset(record)
            conn.changed(record)
        return True

    def _remote_close(self, conn: StreamRules, record: StreamRecord) -> bool:
        """The peer's Close; False if it meant nothing (a repeat)."""
        record.state, verdict = TRANSITIONS[(record.state, _RECV_CLOSE)]  # apply(), inlined (see changed())
        if verdict is not _OK:
            return False
        if record.receiving is _OPEN:
            record.receiving = _ENDED
        conn.changed(record)
        return True

    def _remote_reset(self, conn: StreamRules, record: StreamRecord) -> bool:
        """The peer's Reset; False if it meant nothing (the stream had finished)."""
        if conn.apply(record, StreamEvent.RECV_RESET) is not _OK:
            return False
        conn.break_stream(record, Broken.PEER_RESET, _RESET)
        return True

    def _dropped(self, conn: StreamRules, header: int, record: StreamRecord | None, now: float) -> None:
        """A frame nobody can use.  On a live stream (data after the peer's Close) it
        changed nothing.  Late frames for a stream that finished are expected (they
        crossed our close or reset) but change nothing either: both are spent from
        ``budgets.ignored``, so a peer cannot flood a stream, finished or not, for
        free.  Frames for a stream that never existed are spent from ``budgets.unknown``."""
        conn.counters.frames_dropped += 1
        if record is not None or conn.table.finished(header):
            conn.budgets.ignored.spend(now)
        else:
            conn.budgets.unknown.spend(now)

    def _new_stream(self, conn: StreamRules, stream_id: int, name: bytes | memoryview) -> None:
        """The peer opens ``stream_id``: to the backlog, or refused with a Reset when a
        stream limit or the backlog is full.  A second NewStream for a stream the peer
        has open is a ``ProtocolError``."""
        key = stream_id << 1
        if key in conn.table.streams:
            raise ProtocolError(f"NewStream for stream {stream_id}, which the peer already has open")
        config, table = self._config, conn.table
        if table.inbound >= config.max_inbound_streams or len(table.backlog) >= config.accept_backlog:
            conn.budgets.refused.spend(self._clock())
            table.remember(key)
            conn.counters.streams_refused += 1
            conn.control(stream_id, Flag.RESET_RECEIVER)
            return
        # (only Message bodies come out as views, but the decoder's type says either)
        record = StreamRecord(stream_id, bytes(name[: config.max_stream_name_size]), is_initiator=False)
        if not conn.may_send:
            record.sending = _LOST
            record.refresh()
        conn.arrived(record)
