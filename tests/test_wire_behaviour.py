"""What the muxer puts on the wire, and what it does with each odd thing a peer sends.

The far end here is a RawPeer speaking frames directly, so every assertion is about
exact bytes, not about what another copy of this library happens to accept.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag, Frame
from tests.helpers import frame, raw_pair, read_all, settle

F = Flag


class TestWhatWeSend:
    async def test_open_send_close_reset_use_the_initiator_flags(self) -> None:
        async with raw_pair() as (muxer, peer):
            stream = await muxer.open_stream("n")
            await stream.send_all(b"hi")
            await stream.send_eof()
            stream.reset()
            assert await peer.receive_frames(4) == [
                Frame(0, F.NEW_STREAM, b"n"),
                Frame(0, F.MESSAGE_INITIATOR, b"hi"),
                Frame(0, F.CLOSE_INITIATOR, b""),
                Frame(0, F.RESET_INITIATOR, b""),
            ]

    async def test_an_accepted_stream_answers_with_the_receiver_flags(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(9, F.NEW_STREAM, b"x"))
            stream = await muxer.accept_stream()
            await stream.send_all(b"ok")
            await stream.send_eof()
            stream.reset()
            assert await peer.receive_frames(3) == [
                Frame(9, F.MESSAGE_RECEIVER, b"ok"),
                Frame(9, F.CLOSE_RECEIVER, b""),
                Frame(9, F.RESET_RECEIVER, b""),
            ]

    async def test_empty_sends_put_nothing_on_the_wire(self) -> None:
        async with raw_pair() as (muxer, peer):
            stream = await muxer.open_stream()
            await stream.send_all(b"")
            stream.send_nowait(b"")
            await stream.send_all(b"x")
            assert await peer.receive_frames(2) == [
                Frame(0, F.NEW_STREAM, b"0"),
                Frame(0, F.MESSAGE_INITIATOR, b"x"),
            ]

    async def test_the_largest_stream_id_works_both_ways(self) -> None:
        top = mplex.MAX_STREAM_ID
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(top, F.NEW_STREAM), frame(top, F.MESSAGE_INITIATOR, b"q"))
            stream = await muxer.accept_stream()
            assert stream.id == top
            assert await stream.receive_some() == b"q"
            await stream.send_all(b"a")
            assert await peer.receive_frames(1) == [Frame(top, F.MESSAGE_RECEIVER, b"a")]


class TestWhatWeAccept:
    async def test_data_sent_before_accept_is_kept(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(
                frame(3, F.NEW_STREAM, b"early"),
                frame(3, F.MESSAGE_INITIATOR, b"sent "),
                frame(3, F.MESSAGE_INITIATOR, b"right away"),
                frame(3, F.CLOSE_INITIATOR),
            )
            await settle()
            stream = await muxer.accept_stream()
            assert stream.name == "early"
            assert await read_all(stream) == b"sent right away"

    async def test_zero_length_messages_are_not_eof(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(
                frame(0, F.NEW_STREAM),
                frame(0, F.MESSAGE_INITIATOR),
                frame(0, F.MESSAGE_INITIATOR, b"data"),
                frame(0, F.MESSAGE_INITIATOR),
                frame(0, F.CLOSE_INITIATOR),
            )
            assert await read_all(await muxer.accept_stream()) == b"data"

    async def test_close_and_reset_bodies_are_ignored(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(0, F.NEW_STREAM), frame(0, F.CLOSE_INITIATOR, b"junk"))
            first = await muxer.accept_stream()
            assert await first.receive_some() == b""
            await peer.send(frame(1, F.NEW_STREAM), frame(1, F.RESET_INITIATOR, b"junk"))
            second = await muxer.accept_stream()
            with pytest.raises(mplex.StreamReset):
                await second.receive_some()

    async def test_data_after_the_peers_close_is_dropped(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(
                frame(0, F.NEW_STREAM),
                frame(0, F.MESSAGE_INITIATOR, b"good"),
                frame(0, F.CLOSE_INITIATOR),
                frame(0, F.MESSAGE_INITIATOR, b"bad"),
            )
            stream = await muxer.accept_stream()
            assert await read_all(stream) == b"good"
            assert muxer.stats.frames_dropped == 1

    async def test_duplicate_close_and_unknown_ids_are_ignored(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(
                frame(0, F.NEW_STREAM),
                frame(0, F.CLOSE_INITIATOR),
                frame(0, F.CLOSE_INITIATOR),
                frame(77, F.MESSAGE_INITIATOR, b"nobody"),
                frame(78, F.RESET_RECEIVER),
                frame(79, F.CLOSE_INITIATOR),
            )
            stream = await muxer.accept_stream()
            assert await stream.receive_some() == b""
            assert muxer.stats.frames_dropped == 4
            assert not muxer.closed
            other = await muxer.open_stream()  # the connection still works
            await other.send_all(b"!")
            assert (await peer.receive_frames(2))[1] == Frame(0, F.MESSAGE_INITIATOR, b"!")

    async def test_a_reused_id_after_the_stream_finished_is_a_new_stream(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(5, F.NEW_STREAM), frame(5, F.RESET_INITIATOR))
            first = await muxer.accept_stream()
            await peer.send(frame(5, F.NEW_STREAM, b"again"), frame(5, F.MESSAGE_INITIATOR, b"2"))
            second = await muxer.accept_stream()
            assert first is not second
            assert await second.receive_some() == b"2"

    async def test_late_data_for_a_stream_we_closed_is_answered_with_one_reset(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(0, F.NEW_STREAM))
            stream = await muxer.accept_stream()
            await stream.aclose()
            assert await peer.receive_frames(1) == [Frame(0, F.CLOSE_RECEIVER, b"")]
            await peer.send(frame(0, F.MESSAGE_INITIATOR, b"late"), frame(0, F.MESSAGE_INITIATOR, b"later"))
            assert await peer.receive_frames(1) == [Frame(0, F.RESET_RECEIVER, b"")]
            await settle()
            assert peer.frames == []
            assert muxer.stats.live_streams == 0

    async def test_closing_with_unread_data_resets_at_once(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(0, F.NEW_STREAM), frame(0, F.MESSAGE_INITIATOR, b"unread"))
            stream = await muxer.accept_stream()
            await settle()
            await stream.aclose()
            assert await peer.receive_frames(1) == [Frame(0, F.RESET_RECEIVER, b"")]


class TestProtocolErrors:
    @pytest.mark.parametrize(
        ("wire", "cause"),
        [
            (b"\x07\x00", mplex.UnknownFlagError),
            (b"\x02\x81\x80\x40", mplex.FrameTooLargeError),
            (b"\x82\x00\x00", mplex.InvalidVarintError),
            (frame(0, F.NEW_STREAM), mplex.ProtocolError),  # a duplicate of the open stream 0
        ],
        ids=["flag-7", "oversized", "non-minimal", "duplicate-new-stream"],
    )
    async def test_a_protocol_error_closes_the_connection_and_every_stream_learns_why(
        self, wire: bytes, cause: type[Exception]
    ) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(frame(0, F.NEW_STREAM), frame(0, F.MESSAGE_INITIATOR, b"kept"))
            stream = await muxer.accept_stream()
            await peer.send(wire)
            await peer.expect_eof()  # the muxer closed the transport
            assert muxer.closed
            assert await stream.receive_some() == b"kept"  # nothing valid is lost
            with pytest.raises(mplex.ConnectionLost) as info:
                await stream.receive_some()
            assert isinstance(info.value.__cause__, cause)
            with pytest.raises(mplex.ConnectionLost):
                await stream.send_all(b"x")
            with pytest.raises(mplex.ConnectionLost):
                await muxer.accept_stream()

    async def test_async_for_ends_when_the_connection_broke_and_the_muxer_says_why(self) -> None:
        async with raw_pair() as (muxer, peer):
            await peer.send(b"\x07\x00")
            assert [s async for s in muxer] == []
            assert muxer.end_reason is mplex.EndReason.PROTOCOL_ERROR
            assert isinstance(muxer.end_error, mplex.ConnectionLost)
            assert isinstance(muxer.end_error.__cause__, mplex.UnknownFlagError)
            with pytest.raises(mplex.ConnectionLost) as info:  # accept_stream still raises
                await muxer.accept_stream()
            assert isinstance(info.value.__cause__, mplex.UnknownFlagError)


class TestLimits:
    async def test_a_full_accept_backlog_resets_only_the_new_stream(self) -> None:
        async with raw_pair(mplex.Config(accept_backlog=2)) as (muxer, peer):
            await peer.send(*(frame(i, F.NEW_STREAM) for i in range(3)))
            assert await peer.receive_frames(1) == [Frame(2, F.RESET_RECEIVER, b"")]
            assert muxer.stats.streams_refused == 1
            assert [(await muxer.accept_stream()).id for _ in range(2)] == [0, 1]
            await peer.send(frame(2, F.MESSAGE_INITIATOR, b"after refusal"))  # dropped quietly
            await peer.send(frame(3, F.NEW_STREAM))
            assert (await muxer.accept_stream()).id == 3

    async def test_over_the_inbound_limit_the_new_stream_is_reset(self) -> None:
        async with raw_pair(mplex.Config(max_inbound_streams=1)) as (muxer, peer):
            await peer.send(frame(0, F.NEW_STREAM), frame(1, F.NEW_STREAM))
            assert await peer.receive_frames(1) == [Frame(1, F.RESET_RECEIVER, b"")]
            first = await muxer.accept_stream()
            await peer.send(frame(0, F.RESET_INITIATOR), frame(2, F.NEW_STREAM))
            assert (await muxer.accept_stream()).id == 2
            assert first.id == 0

    async def test_at_the_outbound_limit_open_stream_waits_for_a_slot(self) -> None:
        async with raw_pair(mplex.Config(max_outbound_streams=1)) as (muxer, peer):
            first = await muxer.open_stream()
            with trio.move_on_after(0.05) as scope:  # it honours cancellation
                await muxer.open_stream()
            assert scope.cancelled_caught
            opened: list[mplex.MplexStream] = []

            async def opener() -> None:
                opened.append(await muxer.open_stream())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(opener)
                await settle()
                assert opened == []
                await peer.send(frame(0, F.RESET_RECEIVER))  # the peer ends our stream 0
            assert [s.id for s in opened] == [1]
            assert first.id == 0
