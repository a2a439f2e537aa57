"""The per-stream transition table, checked over every (state, event) pair."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from mplex._state import TRANSITIONS, StreamEvent, StreamState, Verdict, transition

S, E, V = StreamState, StreamEvent, Verdict
REMOTE = [E.RECV_DATA, E.RECV_CLOSE, E.RECV_RESET]
LOCAL = [E.SEND_DATA, E.SEND_CLOSE, E.SEND_RESET]


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


def test_data_after_the_peers_close_is_ignored_and_ours_after_our_close_refused() -> None:
    assert transition(S.REMOTE_CLOSED, E.RECV_DATA) == (S.REMOTE_CLOSED, V.IGNORE)
    assert transition(S.LOCAL_CLOSED, E.SEND_DATA)[1] is V.CLOSED
    assert transition(S.RESET, E.SEND_DATA)[1] is V.BROKEN


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
