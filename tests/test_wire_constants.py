"""Wire constants pinned: changing any of these breaks interoperability."""

from __future__ import annotations

import mplex
from mplex import Flag


def test_protocol_id() -> None:
    assert mplex.PROTOCOL_ID == "/mplex/6.7.0"


def test_flag_values_follow_the_spec() -> None:
    assert {f.name: int(f) for f in Flag} == {
        "NEW_STREAM": 0,
        "MESSAGE_RECEIVER": 1,
        "MESSAGE_INITIATOR": 2,
        "CLOSE_RECEIVER": 3,
        "CLOSE_INITIATOR": 4,
        "RESET_RECEIVER": 5,
        "RESET_INITIATOR": 6,
    }


def test_even_flags_come_from_the_opener() -> None:
    assert [f.from_initiator for f in Flag] == [True, False, True, False, True, False, True]


def test_limits() -> None:
    assert mplex.MAX_MESSAGE_SIZE == 1_048_576
    assert mplex.MAX_STREAM_ID == 2**60 - 1
    assert mplex.Config().max_message_size == 1_048_576
    assert mplex.Config().max_send_frame_size <= 1_048_576


def test_header_is_id_shifted_by_three_or_flag() -> None:
    assert mplex.Encoder().frame(5, Flag.CLOSE_RECEIVER) == bytes([5 << 3 | 3, 0])
    assert mplex.Frame(5, Flag.CLOSE_RECEIVER, b"").header == 43
