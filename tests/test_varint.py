"""Varints: minimal encoding, 9-byte cap, and agreement with the `varint` package."""

from __future__ import annotations

import pytest
import varint
from hypothesis import given
from hypothesis import strategies as st

from mplex import InvalidVarintError, decode_uvarint, encode_uvarint

BOUNDARIES = [
    0,
    1,
    127,
    128,
    255,
    16383,
    16384,
    2**21 - 1,
    2**21,
    2**28,
    2**35,
    2**56 - 1,
    2**56,
    2**63 - 1,
]


@pytest.mark.parametrize("value", BOUNDARIES)
def test_encoding_matches_the_varint_package_at_boundaries(value: int) -> None:
    assert encode_uvarint(value) == varint.encode(value)
    assert decode_uvarint(varint.encode(value)) == (value, len(varint.encode(value)))


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_encoding_matches_the_varint_package_for_any_value(value: int) -> None:
    encoded = encode_uvarint(value)
    assert encoded == varint.encode(value)
    assert decode_uvarint(encoded) == (value, len(encoded))


@given(st.integers(min_value=2**14, max_value=2**21 - 1))
def test_three_byte_encodings_match_the_varint_package(value: int) -> None:
    assert encode_uvarint(value) == varint.encode(value)


def test_every_table_entry_matches_the_varint_package() -> None:
    for value in range(1 << 14):
        assert encode_uvarint(value) == varint.encode(value)


@given(st.integers(min_value=0, max_value=2**63 - 1), st.binary(max_size=4))
def test_decoding_stops_at_the_end_of_the_varint(value: int, trailing: bytes) -> None:
    encoded = encode_uvarint(value)
    assert decode_uvarint(b"\xaa" + encoded + trailing, 1) == (value, 1 + len(encoded))


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_every_proper_prefix_needs_more_data(value: int) -> None:
    encoded = encode_uvarint(value)
    for cut in range(len(encoded)):
        assert decode_uvarint(encoded[:cut]) is None


def test_a_varint_longer_than_nine_bytes_is_rejected_at_the_ninth_byte() -> None:
    with pytest.raises(InvalidVarintError):
        decode_uvarint(b"\xff" * 9)  # no tenth byte needed to know it is invalid


@pytest.mark.parametrize("data", [b"\x80\x00", b"\x81\x00", b"\xff\x80\x00", b"\x80" * 8 + b"\x00"])
def test_non_minimal_encodings_are_rejected(data: bytes) -> None:
    with pytest.raises(InvalidVarintError):
        decode_uvarint(data)


@pytest.mark.parametrize("value", [-1, 2**63])
def test_values_outside_63_bits_cannot_be_encoded(value: int) -> None:
    with pytest.raises(ValueError):
        encode_uvarint(value)
