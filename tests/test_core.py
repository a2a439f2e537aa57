"""The sans-IO connection core: the stream table, ids, limits, backlog, tombstones and
abuse budgets, driven without trio (time is passed in)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

import mplex
from mplex._engine.table import ConnectionCore


@dataclass(frozen=True)
class Entry:
    """A stand-in for the trio layer's stream: the core needs only these two."""

    key: int
    is_initiator: bool


def ours(core: ConnectionCore[Entry]) -> Entry:
    entry = Entry(core.take_id() << 1 | 1, True)
    core.add_outbound(entry)
    return entry


def theirs(core: ConnectionCore[Entry], stream_id: int, now: float = 0.0) -> Entry | None:
    if core.refuses_inbound(stream_id, now):
        return None
    entry = Entry(stream_id << 1, False)
    core.add_inbound(entry)
    return entry


class TestIds:
    def test_our_ids_count_up_and_stop_at_two_to_the_sixty(self) -> None:
        core: ConnectionCore[Entry] = ConnectionCore(mplex.Config())
        assert [core.take_id() for _ in range(3)] == [0, 1, 2]
        core.next_id = mplex.MAX_STREAM_ID
        assert core.take_id() == mplex.MAX_STREAM_ID
        with pytest.raises(mplex.MplexError, match=r"2\*\*60"):
            core.take_id()

    def test_a_second_new_stream_for_an_open_id_is_a_protocol_error(self) -> None:
        core: ConnectionCore[Entry] = ConnectionCore(mplex.Config())
        assert theirs(core, 5) is not None
        with pytest.raises(mplex.ProtocolError, match="already has open"):
            core.refuses_inbound(5, 0.0)


class TestLimits:
    def test_outbound_slots_free_on_release_not_only_on_forget(self) -> None:
        core: ConnectionCore[Entry] = ConnectionCore(mplex.Config(max_outbound_streams=1))
        first = ours(core)
        assert not core.slot_free
        assert core.release_slot(first) and core.slot_free
        assert not core.release_slot(first)  # once
        assert core.forget(first) and not core.forget(first)
        assert core.streams == {}

    def test_inbound_beyond_the_limit_or_the_backlog_is_refused_and_counted(self) -> None:
        config = mplex.Config(max_inbound_streams=2, accept_backlog=1, max_refused_streams=2, abuse_window=10)
        core: ConnectionCore[Entry] = ConnectionCore(config)
        first = theirs(core, 0)
        assert first is not None and core.unaccepted(first)
        assert theirs(core, 1) is None  # the backlog is full
        core.backlog.popleft()  # accepted
        assert theirs(core, 2) is not None
        assert theirs(core, 3, now=1.0) is None  # two open: the limit
        with pytest.raises(mplex.ProtocolError, match="max_refused_streams"):
            theirs(core, 4, now=2.0)  # the third refusal inside the window
        # Refused ids are tombstones: their late frames are not abuse.
        core.dropped_unknown(1 << 3 | mplex.Flag.MESSAGE_INITIATOR, 3.0)


class TestTombstonesAndBudgets:
    def test_late_frames_for_finished_streams_are_free_and_unknown_ones_are_spent(self) -> None:
        core: ConnectionCore[Entry] = ConnectionCore(mplex.Config(max_unknown_stream_frames=1))
        entry = theirs(core, 7)
        assert entry is not None
        core.forget(entry)
        for _ in range(5):  # late frames for a stream that finished: expected
            core.dropped_unknown(7 << 3 | mplex.Flag.MESSAGE_INITIATOR, 0.0)
        mine = ours(core)
        core.forget(mine)
        core.dropped_unknown(mine.key >> 1 << 3 | mplex.Flag.MESSAGE_RECEIVER, 0.0)  # ours, finished
        core.dropped_unknown(99 << 3 | mplex.Flag.MESSAGE_INITIATOR, 0.0)  # never existed: spent
        with pytest.raises(mplex.ProtocolError, match="max_unknown_stream_frames"):
            core.dropped_unknown(98 << 3 | mplex.Flag.MESSAGE_INITIATOR, 0.0)

    def test_budgets_count_over_a_sliding_window_of_passed_in_time(self) -> None:
        core: ConnectionCore[Entry] = ConnectionCore(mplex.Config(max_ignored_frames=2, abuse_window=10))
        for now in (0.0, 1.0, 25.0, 25.1):  # two windows later, the first two are forgotten
            core.spend(core.ignored_budget, now)
        with pytest.raises(mplex.ProtocolError, match="max_ignored_frames"):
            core.spend(core.ignored_budget, 25.2)

    def test_the_tombstone_limit_covers_every_stream_both_sides_may_have_open_twice(self) -> None:
        config = mplex.Config(max_inbound_streams=5000, max_outbound_streams=3000)
        assert ConnectionCore(config).tombstone_limit == 16_000


def test_the_core_imports_no_trio() -> None:
    code = "import sys, mplex._engine.table; print([n for n in sys.modules if n.split('.')[0] == 'trio'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
