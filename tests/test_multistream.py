"""multistream-select 1.0.0: the sans-IO machines, their limits, and the trio helpers.

The byte strings here are written out by hand from the message format (varint length
counting the newline, UTF-8 id, newline), not produced by our encoder.  The same
machines are tested against js-libp2p and py-libp2p in tests/test_interop_matrix.py.
"""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import mplex
from mplex import DialerNegotiation, ListenerNegotiation, NegotiationError, ProtocolNotSupportedError
from mplex._engine.multistream import encode_message

HEADER = b"\x13/multistream/1.0.0\n"
MPLEX = b"\x0d/mplex/6.7.0\n"
NA = b"\x03na\n"


def feed_in_chunks(negotiation: DialerNegotiation | ListenerNegotiation, data: bytes) -> bytes:
    """Feed ``data`` as an I/O layer would, reading only ``bytes_wanted``; return what is left."""
    while not negotiation.done:
        if not data:
            raise EOFError("the script ended before the negotiation did")
        wanted = negotiation.bytes_wanted
        negotiation.receive_data(data[:wanted])
        data = data[wanted:]
    return data


class TestWireFormat:
    def test_constants_are_pinned(self) -> None:
        assert mplex.MULTISTREAM_PROTOCOL_ID == "/multistream/1.0.0"
        assert mplex.MAX_PROTOCOL_MESSAGE_SIZE == 1024

    def test_messages_are_length_prefixed_and_newline_terminated(self) -> None:
        assert encode_message("/multistream/1.0.0") == HEADER
        assert encode_message("/mplex/6.7.0") == MPLEX
        assert encode_message("na") == NA

    def test_a_long_id_takes_a_two_byte_length(self) -> None:
        assert encode_message("a" * 200) == b"\xc9\x01" + b"a" * 200 + b"\n"

    def test_the_longest_sendable_id_is_1023_bytes(self) -> None:
        assert len(encode_message("x" * 1023)) == 2 + 1024
        with pytest.raises(ValueError, match="over the limit of 1023"):
            encode_message("x" * 1024)

    def test_an_id_with_a_newline_is_refused(self) -> None:
        with pytest.raises(ValueError, match="newline"):
            encode_message("/a\n/b")


class TestDialer:
    def test_sends_header_and_first_proposal_together(self) -> None:
        assert DialerNegotiation(["/mplex/6.7.0"]).data_to_send() == HEADER + MPLEX

    def test_selects_the_echoed_protocol(self) -> None:
        dialer = DialerNegotiation(["/mplex/6.7.0"])
        dialer.data_to_send()
        dialer.receive_data(HEADER + MPLEX)
        assert dialer.selected == "/mplex/6.7.0"
        assert dialer.data_to_send() == b""

    def test_falls_back_after_na(self) -> None:
        dialer = DialerNegotiation(["/yamux/1.0.0", "/mplex/6.7.0"])
        dialer.data_to_send()
        dialer.receive_data(HEADER + NA)
        assert not dialer.done
        assert dialer.data_to_send() == MPLEX
        dialer.receive_data(MPLEX)
        assert dialer.selected == "/mplex/6.7.0"

    def test_refusal_of_every_proposal_names_them(self) -> None:
        dialer = DialerNegotiation(["/a", "/b"])
        with pytest.raises(ProtocolNotSupportedError, match="'/a', '/b'") as info:
            dialer.receive_data(HEADER + NA + NA)
        assert info.value.protocols == ["/a", "/b"]

    def test_an_unexpected_answer_is_an_error(self) -> None:
        with pytest.raises(NegotiationError, match=r"expected '/mplex/6\.7\.0' or 'na'"):
            DialerNegotiation(["/mplex/6.7.0"]).receive_data(HEADER + b"\x07/other\n")

    def test_a_peer_without_the_header_is_refused(self) -> None:
        with pytest.raises(NegotiationError, match=r"does not speak /multistream/1\.0\.0"):
            DialerNegotiation(["/mplex/6.7.0"]).receive_data(MPLEX)

    def test_an_unsendable_proposal_fails_before_anything_is_sent(self) -> None:
        with pytest.raises(ValueError, match="over the limit"):
            DialerNegotiation(["/ok", "y" * 2000])
        with pytest.raises(ValueError, match="at least one"):
            DialerNegotiation([])


class TestListener:
    def test_sends_its_header_at_once(self) -> None:
        assert ListenerNegotiation(["/mplex/6.7.0"]).data_to_send() == HEADER

    def test_echoes_a_supported_proposal(self) -> None:
        listener = ListenerNegotiation(["/mplex/6.7.0"])
        listener.data_to_send()
        listener.receive_data(HEADER + MPLEX)
        assert listener.selected == "/mplex/6.7.0"
        assert listener.data_to_send() == MPLEX

    def test_answers_na_then_accepts_a_later_proposal(self) -> None:
        listener = ListenerNegotiation(["/mplex/6.7.0"])
        listener.data_to_send()
        listener.receive_data(HEADER + b"\x0d/yamux/1.0.0\n")
        assert listener.data_to_send() == NA
        listener.receive_data(MPLEX)
        assert listener.data_to_send() == MPLEX

    def test_ls_lists_each_protocol_as_a_message(self) -> None:
        listener = ListenerNegotiation(["/a", "/bc"])
        listener.data_to_send()
        listener.receive_data(HEADER + b"\x03ls\n")
        assert listener.data_to_send() == b"\x0a" + b"\x03/a\n" + b"\x04/bc\n" + b"\n"

    def test_gives_up_after_max_proposals(self) -> None:
        listener = ListenerNegotiation(["/mplex/6.7.0"], max_proposals=3)
        listener.receive_data(HEADER + NA * 3)
        with pytest.raises(NegotiationError, match="more than 3 proposals"):
            listener.receive_data(NA)

    def test_leaves_the_bytes_after_the_agreement_unread(self) -> None:
        listener = ListenerNegotiation(["/echo/1"])
        rest = feed_in_chunks(listener, HEADER + b"\x08/echo/1\n" + b"first app bytes")
        assert listener.selected == "/echo/1"
        assert rest == b"first app bytes"
        assert listener.bytes_wanted == 0

    def test_trailing_data_holds_what_an_eager_reader_fed_too_much(self) -> None:
        listener = ListenerNegotiation(["/echo/1"])
        listener.receive_data(HEADER + b"\x08/echo/1\n" + b"app")
        assert listener.trailing_data == b"app"


class TestMalformedInput:
    def test_an_over_long_length_is_refused_before_its_body_arrives(self) -> None:
        listener = ListenerNegotiation(["/mplex/6.7.0"])
        with pytest.raises(NegotiationError, match="1025 bytes, over the limit of 1024"):
            listener.receive_data(b"\x81\x08")  # 1025: the length alone

    def test_a_three_byte_length_is_refused_at_its_second_byte(self) -> None:
        with pytest.raises(NegotiationError, match="more than 16383"):
            ListenerNegotiation(["/a"]).receive_data(b"\x80\x80")

    def test_a_non_minimal_length_is_refused(self) -> None:
        with pytest.raises(NegotiationError, match="malformed message length"):
            ListenerNegotiation(["/a"]).receive_data(b"\x93\x00")

    def test_an_empty_message_is_refused(self) -> None:
        with pytest.raises(NegotiationError, match="empty message"):
            ListenerNegotiation(["/a"]).receive_data(b"\x00")

    def test_a_message_without_its_newline_is_refused(self) -> None:
        with pytest.raises(NegotiationError, match="newline"):
            ListenerNegotiation(["/a"]).receive_data(b"\x02/a")

    def test_an_id_that_is_not_utf8_is_refused(self) -> None:
        with pytest.raises(NegotiationError, match="not UTF-8"):
            ListenerNegotiation(["/a"]).receive_data(HEADER + b"\x03\xff\xfe\n")

    def test_feeding_a_finished_negotiation_is_a_bug(self) -> None:
        listener = ListenerNegotiation(["/a"])
        listener.receive_data(HEADER + b"\x03/a\n")
        with pytest.raises(RuntimeError):
            listener.receive_data(b"x")

    @given(st.binary(max_size=300))
    def test_arbitrary_bytes_end_in_a_result_or_a_negotiation_error(self, data: bytes) -> None:
        listener = ListenerNegotiation(["/a"])
        try:
            feed_in_chunks(listener, data)
        except (NegotiationError, EOFError):
            return
        assert listener.selected == "/a"


@given(st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=40))
def test_any_chunking_gives_the_same_outcome(cuts: list[int]) -> None:
    script = HEADER + b"\x03/x\n" + b"\x03ls\n" + MPLEX + b"tail"
    listener = ListenerNegotiation(["/mplex/6.7.0"])
    position = 0
    for cut in itertools.cycle(cuts):
        if listener.done:
            break
        step = min(cut, listener.bytes_wanted)
        listener.receive_data(script[position : position + step])
        position += step
    assert listener.selected == "/mplex/6.7.0"
    assert script[position:] == b"tail"
    assert listener.data_to_send() == HEADER + NA + b"\x0f\x0d/mplex/6.7.0\n\n" + MPLEX


class TestTrioHelpers:
    async def test_negotiate_mplex_then_run_the_muxer_on_the_same_connection(self) -> None:
        left, right = trio.testing.memory_stream_pair()
        results: dict[str, object] = {}
        async with trio.open_nursery() as nursery:

            async def listener() -> None:
                results["listener"] = await mplex.accept_protocol(right, [mplex.PROTOCOL_ID])
                async with mplex.open_muxer(right) as muxer:
                    stream = await muxer.accept_stream()
                    await stream.send_all(await stream.receive_some())
                    await stream.aclose()

            nursery.start_soon(listener)
            results["dialer"] = await mplex.select_protocol(left, ["/yamux/1.0.0", mplex.PROTOCOL_ID])
            async with mplex.open_muxer(left) as muxer:
                stream = await muxer.open_stream()
                await stream.send_all(b"ping")
                results["echo"] = await stream.receive_some()
        assert results == {"listener": "/mplex/6.7.0", "dialer": "/mplex/6.7.0", "echo": b"ping"}

    async def test_application_protocols_are_negotiated_per_stream(self) -> None:
        left, right = trio.testing.memory_stream_pair()
        async with (
            mplex.open_muxer(left) as ours,
            mplex.open_muxer(right) as theirs,
            trio.open_nursery() as nursery,
        ):

            async def serve() -> None:
                stream = await theirs.accept_stream()
                protocol = await mplex.accept_protocol(stream, ["/echo/1.0.0", "/ping/1.0.0"])
                await stream.send_all(protocol.encode())
                await stream.aclose()

            nursery.start_soon(serve)
            stream = await ours.open_stream()
            assert await mplex.select_protocol(stream, ["/ping/1.0.0"]) == "/ping/1.0.0"
            assert await stream.receive_some() == b"/ping/1.0.0"

    async def test_refusal_raises_protocol_not_supported_on_the_dialer(self) -> None:
        left, right = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mplex.accept_protocol, right, ["/only/this"])
            with pytest.raises(ProtocolNotSupportedError):
                await mplex.select_protocol(left, ["/a", "/b"])
            nursery.cancel_scope.cancel()

    async def test_a_peer_that_hangs_up_mid_negotiation_gives_a_clear_error(self) -> None:
        left, right = trio.testing.memory_stream_pair()
        await right.send_all(HEADER)
        await right.send_eof()
        with pytest.raises(NegotiationError, match="closed the stream during protocol negotiation"):
            await mplex.select_protocol(left, [mplex.PROTOCOL_ID])

    async def test_the_helper_reads_nothing_past_the_agreement(self) -> None:
        left, right = trio.testing.memory_stream_pair()
        await right.send_all(HEADER + MPLEX + b"\x00\x01a")  # the muxer's first frame, early
        assert await mplex.accept_protocol(left, [mplex.PROTOCOL_ID]) == mplex.PROTOCOL_ID
        assert await left.receive_some() == b"\x00\x01a"
