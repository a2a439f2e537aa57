"""The protocol's rules, checked on the sans-IO protocol connection alone: two paired
by hand (what one queues, the other receives), as h11's tests pair two connections.
No trio is imported here or by the engine; time is passed in."""

from __future__ import annotations

import pytest

from mplex import Config, Flag, MplexError, ProtocolError
from mplex._engine.connection import Connection, Notice
from mplex._engine.inbound import ARRIVALS_PER_STEP
from mplex._engine.record import Broken, StreamRecord
from mplex._engine.states import Direction, StreamState
from tests.helpers import frame


class Clock:
    """The time the protocol connections of these tests see (set ``now``)."""

    now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


def connection(config: Config | None = None) -> Connection:
    return Connection(config or Config(), clock=CLOCK)


def receive(engine: Connection, data: bytes, now: float = 0.0) -> None:
    """``data`` from the peer, at ``now``."""
    CLOCK.now = now
    engine.receive_data(data)


class Pair:
    """Two protocol connections, ``a`` and ``b``, and the wire between them."""

    def __init__(self, config: Config | None = None, config_b: Config | None = None) -> None:
        self.a = connection(config)
        self.b = connection(config_b or config)
        self.now = 0.0

    def deliver(self, source: Connection, target: Connection) -> bytes:
        """What ``source`` queued, received by ``target``; the bytes."""
        data, _ = source.outbox.take()
        if data:
            receive(target, bytes(data), self.now)
        return bytes(data)

    def exchange(self) -> None:
        """Until neither side has anything queued."""
        while self.a.outbox.buffer or self.b.outbox.buffer:
            self.deliver(self.a, self.b)
            self.deliver(self.b, self.a)

    def send(self, engine: Connection, record: StreamRecord, data: bytes) -> None:
        """What ``MplexStream.send_all`` does: whole Message frames into the outbox."""
        engine.queue_data(record, memoryview(data))

    def opened(self, name: bytes | None = None) -> tuple[StreamRecord, StreamRecord]:
        """A stream ``a`` opens, and ``b``'s record of it, accepted."""
        ours = self.a.open(name)
        self.deliver(self.a, self.b)
        return ours, self.b.accept()


class TestOpening:
    def test_the_peer_learns_a_new_stream_with_its_name(self) -> None:
        pair = Pair()
        ours, theirs = pair.opened(b"chat")
        assert (ours.id, ours.is_initiator, theirs.id, theirs.is_initiator) == (0, True, 0, False)
        events, _ = pair.b.take_notice()
        assert theirs.name == b"chat" and events & Notice.ARRIVED
        assert pair.a.open(None).name == b"1"  # the default name is the number

    def test_each_side_numbers_its_own_streams_from_zero(self) -> None:
        pair = Pair()
        mine, theirs = pair.a.open(None), pair.b.open(None)
        pair.exchange()
        assert mine.id == theirs.id == 0
        assert mine.key != pair.a.accept().key  # stream 0 each way: two streams

    def test_ids_stop_at_two_to_the_sixty(self) -> None:
        engine = connection(Config())
        engine.table.next_id = (1 << 60) - 1
        assert engine.open(None).id == (1 << 60) - 1
        with pytest.raises(MplexError, match=r"2\*\*60"):
            engine.open(None)

    def test_a_second_new_stream_for_an_open_id_breaks_the_protocol(self) -> None:
        engine = connection(Config())
        receive(engine, frame(5, Flag.NEW_STREAM), 0.0)
        with pytest.raises(ProtocolError, match="already has open"):
            receive(engine, frame(5, Flag.NEW_STREAM), 0.0)

    def test_a_peers_long_name_is_cut_to_the_limit(self) -> None:
        engine = connection(Config(max_stream_name_size=4))
        receive(engine, frame(0, Flag.NEW_STREAM, b"a long name"), 0.0)
        assert engine.accept().name == b"a lo"


class TestData:
    def test_data_reaches_the_peers_record_and_wakes_its_receiver(self) -> None:
        pair = Pair()
        ours, theirs = pair.opened()
        theirs.park("a task")
        pair.b.take_notice()
        pair.send(pair.a, ours, b"hello")
        pair.deliver(pair.a, pair.b)
        _, woken = pair.b.take_notice()
        assert woken == ["a task"] and theirs.waiter is None
        events, woken = pair.b.take_notice()
        assert events == 0 and not woken  # handed over once
        assert pair.b.take(theirs, None) == b"hello" and pair.b.unread.total == 0

    def test_half_close_ends_one_direction_and_both_closes_finish_the_stream(self) -> None:
        pair = Pair()
        ours, theirs = pair.opened()
        assert pair.a.send_close(ours)
        pair.deliver(pair.a, pair.b)
        assert theirs.receiving is Direction.ENDED and theirs.can_send
        pair.send(pair.b, theirs, b"reply")
        assert pair.b.send_close(theirs)
        pair.deliver(pair.b, pair.a)
        assert pair.a.take(ours, None) == b"reply"
        assert ours.state is theirs.state is StreamState.CLOSED
        assert pair.a.streams == {} and pair.b.streams == {}  # both sides let go
        assert ours.closed and theirs.closed

    def test_zero_length_messages_and_repeated_closes_are_ignored_frames(self) -> None:
        pair = Pair(config_b=Config(max_ignored_frames=2))
        ours, _ = pair.opened()
        pair.a.outbox.append_control(frame(0, Flag.MESSAGE_INITIATOR))  # zero-length
        pair.deliver(pair.a, pair.b)
        pair.a.send_close(ours)
        pair.deliver(pair.a, pair.b)
        pair.a.outbox.append_control(frame(0, Flag.CLOSE_INITIATOR))  # a repeated Close
        pair.deliver(pair.a, pair.b)
        with pytest.raises(ProtocolError, match="max_ignored_frames"):
            receive(pair.b, frame(0, Flag.CLOSE_INITIATOR), 0.0)


class TestResets:
    def test_a_reset_reaches_the_peer_after_the_data_before_it(self) -> None:
        pair = Pair()
        ours, theirs = pair.opened()
        pair.send(pair.a, ours, b"kept")
        pair.a.reset(ours)
        pair.deliver(pair.a, pair.b)
        assert theirs.broken is Broken.PEER_RESET
        assert pair.b.take(theirs, None) == b"kept"  # the data first
        assert pair.b.counters.resets_received == 1 and pair.a.counters.resets_sent == 1

    def test_closing_with_unread_data_resets_so_the_peer_stops_sending(self) -> None:
        pair = Pair()
        ours, theirs = pair.opened()
        pair.send(pair.b, theirs, b"unread")
        pair.deliver(pair.b, pair.a)
        pair.a.close(ours)
        pair.deliver(pair.a, pair.b)
        assert theirs.broken is Broken.PEER_RESET

    def test_data_after_our_close_is_answered_with_one_reset(self) -> None:
        pair = Pair()
        ours, theirs = pair.opened()
        pair.a.close(ours)  # nothing unread: a Close
        pair.deliver(pair.a, pair.b)
        pair.send(pair.b, theirs, b"late")
        pair.deliver(pair.b, pair.a)
        assert pair.deliver(pair.a, pair.b) == frame(0, Flag.RESET_INITIATOR)
        assert theirs.broken is Broken.PEER_RESET

    def test_the_slow_reader_policy_reset_frees_the_data_and_tells_the_peer(self) -> None:
        config = Config(slow_reader_policy="reset", max_stream_buffer=4, max_connection_buffer=4)
        pair = Pair(config_b=config)
        ours, theirs = pair.opened()
        pair.send(pair.a, ours, b"too much")
        pair.deliver(pair.a, pair.b)
        assert theirs.broken is Broken.POLICY_RESET and pair.b.unread.total == 0
        pair.deliver(pair.b, pair.a)
        assert ours.broken is Broken.PEER_RESET
        assert pair.b.counters.streams_reset_by_policy == 1


class TestLimits:
    def test_our_slot_frees_when_we_close_not_only_when_the_stream_finishes(self) -> None:
        engine = connection(Config(max_outbound_streams=1))
        record = engine.open(None)
        assert not engine.slot_free
        engine.close(record)
        events, _ = engine.take_notice()
        assert engine.slot_free and events & Notice.SLOT_FREED
        assert record.key in engine.streams  # the peer's half is still open

    def test_inbound_beyond_the_limit_or_the_backlog_is_refused(self) -> None:
        config = Config(max_inbound_streams=2, accept_backlog=1, max_refused_streams=2, abuse_window=10)
        engine = connection(config)
        receive(engine, frame(0, Flag.NEW_STREAM), 0.0)
        receive(engine, frame(1, Flag.NEW_STREAM), 0.0)  # the backlog is full
        assert engine.outbox.take()[0] == frame(1, Flag.RESET_RECEIVER)
        engine.accept()
        receive(engine, frame(2, Flag.NEW_STREAM), 1.0)
        receive(engine, frame(3, Flag.NEW_STREAM), 1.0)  # two open: the limit
        assert engine.counters.streams_refused == 2
        with pytest.raises(ProtocolError, match="max_refused_streams"):
            receive(engine, frame(4, Flag.NEW_STREAM), 2.0)


class TestBudgets:
    def test_frames_for_unknown_streams_are_spent_from_their_budget(self) -> None:
        engine = connection(Config(max_unknown_stream_frames=1))
        receive(engine, frame(99, Flag.MESSAGE_INITIATOR, b"x"), 0.0)
        with pytest.raises(ProtocolError, match="max_unknown_stream_frames"):
            receive(engine, frame(98, Flag.MESSAGE_INITIATOR, b"x"), 0.0)

    def test_frames_for_finished_streams_count_as_ignored_frames(self) -> None:
        pair = Pair(config_b=Config(max_ignored_frames=3, max_unknown_stream_frames=1))
        ours, theirs = pair.opened()
        pair.a.reset(ours)
        pair.deliver(pair.a, pair.b)
        assert theirs.key not in pair.b.streams  # finished: a tombstone
        for _ in range(3):  # late frames for it: expected, but not free
            receive(pair.b, frame(0, Flag.MESSAGE_INITIATOR, b"late"), 0.0)
        with pytest.raises(ProtocolError, match="max_ignored_frames"):
            receive(pair.b, frame(0, Flag.CLOSE_INITIATOR), 0.0)

    def test_budgets_count_over_a_sliding_window_of_passed_in_time(self) -> None:
        engine = connection(Config(max_unknown_stream_frames=2, abuse_window=10))
        for number, now in enumerate((0.0, 1.0, 25.0, 25.1)):  # the first two are forgotten
            receive(engine, frame(100 + number, Flag.MESSAGE_INITIATOR, b"x"), now)
        with pytest.raises(ProtocolError, match="max_unknown_stream_frames"):
            receive(engine, frame(200, Flag.MESSAGE_INITIATOR, b"x"), 25.2)

    def test_the_tombstone_limit_covers_every_stream_both_sides_may_have_open_twice(self) -> None:
        config = Config(max_inbound_streams=5000, max_outbound_streams=3000)
        assert connection(config).table.tombstone_limit == 16_000


class TestWorkPerInput:
    def test_one_input_is_dispatched_at_most_frames_per_yield_frames_at_a_time(self) -> None:
        engine = connection(Config(frames_per_yield=10, max_ignored_frames=10**6))
        receive(engine, frame(0, Flag.NEW_STREAM), 0.0)
        record = engine.accept()
        # A zero-length frame between two data frames keeps them from merging into one.
        pieces = frame(0, Flag.MESSAGE_INITIATOR, b"x") + frame(0, Flag.MESSAGE_INITIATOR)
        noise = pieces * 50
        receive(engine, noise, 0.0)
        assert engine.input_pending and record.unread.size < 50
        while engine.input_pending:
            engine.resume_input()
        assert record.unread.size == 50

    def test_one_input_opens_at_most_arrivals_per_step_streams_at_a_time(self) -> None:
        """A read full of requests starts their handlers in groups, so the replies of
        one group can leave while the next is worked on."""
        engine = connection(Config())
        count = 2 * ARRIVALS_PER_STEP + 5
        requests = (frame(i, Flag.NEW_STREAM) + frame(i, Flag.MESSAGE_INITIATOR, b"q") for i in range(count))
        receive(engine, b"".join(requests), 0.0)
        assert len(engine.backlog) == ARRIVALS_PER_STEP and engine.input_pending
        steps = 1
        while engine.input_pending:
            engine.resume_input()
            steps += 1
        assert steps == 3
        assert [r.id for r in engine.backlog] == list(range(count))
        assert all(r.unread.size == 1 for r in engine.backlog)  # no frame lost or repeated

    def test_frames_before_a_broken_one_are_all_acted_on_however_many_streams_they_open(self) -> None:
        engine = connection(Config(max_message_size=100))
        count = ARRIVALS_PER_STEP + 5
        opening = b"".join(frame(i, Flag.NEW_STREAM) for i in range(count))
        too_long = frame(0, Flag.MESSAGE_INITIATOR, b"x" * 101)
        with pytest.raises(ProtocolError):
            receive(engine, opening + too_long, 0.0)
        assert len(engine.backlog) == count and not engine.input_pending


class TestEnding:
    def test_the_end_breaks_every_stream_and_queues_nothing_more(self) -> None:
        pair = Pair()
        ours, _ = pair.opened()
        pair.a.end()
        assert ours.broken is Broken.LOST and ours.closed
        pair.a.reset(ours)
        assert not pair.a.outbox.buffer

    def test_stopping_sends_ends_every_sending_direction_only(self) -> None:
        pair = Pair()
        ours, _ = pair.opened()
        pair.a.stop_sending()
        assert ours.sending is Direction.LOST and ours.can_receive and not pair.a.may_send
        pair.a.reset(ours)  # no control frame goes out any more
        assert not pair.a.outbox.buffer
