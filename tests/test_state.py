"""The per-stream state machine: the wire table over every (state, event) pair, and
the rule by which a direction ends."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from mplex._engine.states import (
    TRANSITIONS,
    Direction,
    StreamEvent,
    StreamState,
    Verdict,
    end_direction,
    transition,
)

S, E, V = StreamState, StreamEvent, Verdict
D = Direction
REMOTE = [E.RECV_CLOSE, E.RECV_RESET]
LOCAL = [E.SEND_CLOSE, E.SEND_RESET]


def test_every_state_and_event_pair_is_defined() -> None:
    assert set(TRANSITIONS) == set(itertools.product(StreamState, StreamEvent))


def test_the_peer_can_never_cause_an_error_verdict() -> None:
    for state, event in itertools.product(StreamState, REMOTE):
        assert transition(state, event)[1] in (V.OK, V.IGNORE)


def test_finished_states_are_final() -> None:
    for state in (S.CLOSED, S.RESET):
        for event in StreamEvent:
            assert transition(state, event)[0] is state


def test_a_reset_from_either_side_ends_a_live_stream() -> None:
    for state in (S.OPEN, S.LOCAL_CLOSED, S.REMOTE_CLOSED):
        assert transition(state, E.SEND_RESET) == (S.RESET, V.OK)
        assert transition(state, E.RECV_RESET) == (S.RESET, V.OK)


def test_half_closes_combine_into_closed() -> None:
    state, _ = transition(S.OPEN, E.SEND_CLOSE)
    assert state is S.LOCAL_CLOSED
    assert transition(state, E.RECV_CLOSE) == (S.CLOSED, V.OK)
    state, _ = transition(S.OPEN, E.RECV_CLOSE)
    assert state is S.REMOTE_CLOSED
    assert transition(state, E.SEND_CLOSE) == (S.CLOSED, V.OK)


def test_repeated_closes_are_ignored_and_a_close_after_a_reset_is_broken() -> None:
    assert transition(S.REMOTE_CLOSED, E.RECV_CLOSE) == (S.REMOTE_CLOSED, V.IGNORE)
    assert transition(S.LOCAL_CLOSED, E.SEND_CLOSE) == (S.LOCAL_CLOSED, V.IGNORE)
    assert transition(S.RESET, E.SEND_CLOSE) == (S.RESET, V.BROKEN)


def test_every_table_row_is_reachable_from_open() -> None:
    reachable, frontier = {S.OPEN}, [S.OPEN]
    while frontier:
        state = frontier.pop()
        for event in StreamEvent:
            after = transition(state, event)[0]
            if after not in reachable:
                reachable.add(after)
                frontier.append(after)
    assert reachable == set(StreamState)


def test_a_direction_ends_once_for_the_first_reason() -> None:
    for first in (D.ENDED, D.RESET, D.LOST):
        ended = end_direction(D.OPEN, first)
        assert ended is first
        for later in (D.ENDED, D.RESET, D.LOST):
            assert end_direction(ended, later) is first


def test_a_local_close_overrides_every_other_reason() -> None:
    for direction in Direction:
        assert end_direction(direction, D.CLOSED) is D.CLOSED
    for later in (D.ENDED, D.RESET, D.LOST):
        assert end_direction(D.CLOSED, later) is D.CLOSED


@given(st.lists(st.sampled_from(list(StreamEvent)), max_size=20))
def test_any_sequence_keeps_each_direction_closed_once_closed(events: list[StreamEvent]) -> None:
    state = S.OPEN
    sent_close = got_close = reset = False
    for event in events:
        state, verdict = transition(state, event)
        if verdict is V.OK:
            sent_close |= event is E.SEND_CLOSE
            got_close |= event is E.RECV_CLOSE
            reset |= event in (E.SEND_RESET, E.RECV_RESET)
        if reset:
            assert state is S.RESET
        elif sent_close and got_close:
            assert state is S.CLOSED
        elif sent_close:
            assert state is S.LOCAL_CLOSED
        elif got_close:
            assert state is S.REMOTE_CLOSED
        else:
            assert state is S.OPEN
