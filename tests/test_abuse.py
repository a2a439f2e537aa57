"""Abuse budgets: floods close the connection with a named error; legitimate late
frames never count."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from mplex._budget import SlidingBudget
from tests.helpers import frame, raw_pair, settle


class TestSlidingBudget:
    def test_counts_up_to_the_limit_within_a_window(self) -> None:
        budget = SlidingBudget("b", limit=3, window=10.0)
        assert [budget.add(1.0), budget.add(2.0), budget.add(3.0), budget.add(4.0)] == [
            True,
            True,
            True,
            False,
        ]

    def test_the_previous_window_fades_out_as_time_passes(self) -> None:
        budget = SlidingBudget("b", limit=10, window=10.0)
        for t in range(10):
            budget.add(float(t))  # ten events in the first window
        assert budget.add(15.0)  # rolls into the next bucket: 10 events behind it
        assert budget.estimate(15.0) == pytest.approx(10 * 0.5 + 1)  # half of them still overlap
        assert budget.estimate(19.99) == pytest.approx(10 * 0.001 + 1)

    def test_a_long_silence_forgets_everything(self) -> None:
        budget = SlidingBudget("b", limit=2, window=1.0)
        budget.add(0.0)
        budget.add(0.5)
        assert budget.add(100.0)
        assert budget.estimate(100.0) == 1


async def lost_because(muxer: mplex.Muxer) -> str:
    with trio.fail_after(10), pytest.raises(mplex.ConnectionLost) as info:
        await muxer.accept_stream()
    assert isinstance(info.value.__cause__, mplex.ProtocolError)
    return str(info.value.__cause__)


class TestBudgetsCloseFloods:
    async def test_frames_for_streams_that_never_existed(self) -> None:
        async with raw_pair(mplex.Config(max_unknown_stream_frames=20)) as (muxer, peer):
            await peer.send(*(frame(1000 + i, Flag.MESSAGE_INITIATOR, b"?") for i in range(21)))
            assert "Config.max_unknown_stream_frames" in await lost_because(muxer)

    async def test_refused_open_storms(self) -> None:
        config = mplex.Config(max_inbound_streams=1, max_refused_streams=5)
        async with raw_pair(config) as (muxer, peer):
            await peer.send(*(frame(i, Flag.NEW_STREAM) for i in range(7)))
            await muxer.accept_stream()  # the one stream within the limit is still handed out
            assert "Config.max_refused_streams" in await lost_because(muxer)

    async def test_reset_storms(self) -> None:
        async with raw_pair(mplex.Config(max_resets_received=5)) as (muxer, peer):
            for i in range(6):
                await peer.send(frame(i, Flag.NEW_STREAM), frame(i, Flag.RESET_INITIATOR))
            for _ in range(6):
                await muxer.accept_stream()
            assert "Config.max_resets_received" in await lost_because(muxer)


class TestNoFalsePositives:
    async def test_late_frames_for_finished_streams_never_count(self) -> None:
        async with raw_pair(mplex.Config(max_unknown_stream_frames=5)) as (muxer, peer):
            for stream in (await muxer.open_stream(), await muxer.open_stream()):
                stream.reset()  # the peer has not seen the resets yet and keeps sending
            # Alternating streams, so that no two frames merge: 100 separate late frames.
            await peer.send(*(frame(i % 2, Flag.MESSAGE_RECEIVER, b"late") for i in range(100)))
            await peer.send(frame(0, Flag.CLOSE_RECEIVER))
            await settle()
            assert not muxer.closed
            assert muxer.stats.frames_dropped == 101

    async def test_data_racing_a_refusal_never_counts(self) -> None:
        config = mplex.Config(max_inbound_streams=1, max_unknown_stream_frames=5)
        async with raw_pair(config) as (muxer, peer):
            await peer.send(frame(0, Flag.NEW_STREAM), frame(1, Flag.NEW_STREAM))
            await peer.send(*(frame(1, Flag.MESSAGE_INITIATOR, b"sent before the reset") for _ in range(50)))
            await settle()
            assert not muxer.closed

    async def test_a_steady_trickle_under_the_rate_is_fine(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        config = mplex.Config(max_unknown_stream_frames=10, abuse_window=1.0)
        async with raw_pair(config) as (muxer, peer):
            for i in range(50):  # 5 per second against a budget of 10 per second
                await peer.send(frame(5000 + i, Flag.MESSAGE_INITIATOR, b"."))
                await trio.sleep(0.2)
            assert not muxer.closed
