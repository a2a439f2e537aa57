"""Abuse budgets: floods close the connection with a named error; legitimate late
frames never count."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from mplex._engine.budget import SlidingBudget
from tests.helpers import RawPeer, frame, over_every_transport, raw_pair, settle


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

    @over_every_transport
    @pytest.mark.parametrize("whose", ["ours", "theirs"])
    @pytest.mark.parametrize("flag", [Flag.CLOSE_INITIATOR, Flag.MESSAGE_INITIATOR])
    async def test_a_flood_aimed_at_a_finished_stream_is_cut(
        self, transport: Callable[[], Any], whose: str, flag: Flag
    ) -> None:
        config = mplex.Config(max_ignored_frames=100)
        async with transport() as (a, b), mplex.open_muxer(a, config) as muxer:
            peer = RawPeer(b)
            if whose == "ours":
                (await muxer.open_stream()).reset()  # stream 0, finished here
                flag = Flag(flag + 1)  # the peer answers on our stream with odd flags
            else:
                await peer.send(frame(0, Flag.NEW_STREAM), frame(0, Flag.RESET_INITIATOR))
                await muxer.accept_stream()
            # Frames for stream 0 and for stream 0 of the other side alternate, so that
            # no two Message frames in a row merge: each one counts.
            other = Flag(flag ^ 1)
            flood = b"".join(frame(0, flag if i % 2 else other, b"x") for i in range(1000))
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await peer.send(flood)
            assert "Config.max_ignored_frames" in await lost_because(muxer)

    @over_every_transport
    async def test_a_flood_in_one_read_lets_other_tasks_run(self, transport: Callable[[], Any]) -> None:
        # Budgets high enough that the whole flood is dispatched.
        per_yield = 64
        config = mplex.Config(max_ignored_frames=10**9, frames_per_yield=per_yield)
        flood_frames = 100_000
        async with transport() as (a, b), mplex.open_muxer(a, config) as muxer:
            peer = RawPeer(b)
            await peer.send(frame(0, Flag.NEW_STREAM), frame(1, Flag.NEW_STREAM))
            finished, live = await muxer.accept_stream(), await muxer.accept_stream()
            await peer.send(frame(0, Flag.CLOSE_INITIATOR))
            await finished.aclose()  # stream 0 is finished; repeated Closes for it change nothing
            turns = 0
            done = False

            async def other_task() -> None:
                nonlocal turns
                while not done:
                    await trio.lowlevel.checkpoint()
                    turns += 1

            async with trio.open_nursery() as nursery:
                await settle()  # the Closes are out and in
                nursery.start_soon(other_task)
                await peer.send(
                    frame(0, Flag.CLOSE_INITIATOR) * flood_frames + frame(1, Flag.MESSAGE_INITIATOR, b"!")
                )
                with trio.fail_after(30):
                    assert await live.receive_some() == b"!"
                done = True
            assert not muxer.closed
            # The other task ran at least once per frames_per_yield frames (half of it,
            # to allow for reads that ended early), not once per transport read.
            assert turns >= flood_frames // per_yield // 2, turns


class TestNoFalsePositives:
    async def test_late_frames_for_finished_streams_are_not_unknown_streams(self) -> None:
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
