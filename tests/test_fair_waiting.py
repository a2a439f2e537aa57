"""Tasks waiting for a stream slot, or for the peer's next stream, are served in the
order they came, and each freed slot or arrived stream wakes one of them, not all:
the waiting is linear, however many wait."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable

import trio
import trio.testing

import mplex
import mplex.testing

WAITERS = 300
#: Steps a waiting task may take from its start to its end: a wake-up for each freed
#: slot or arrived stream would be about WAITERS / 2 on average.
STEPS_EACH = 6


class StepsByTask(trio.abc.Instrument):
    """Task steps of the tasks whose names start with ``prefix``."""

    @classmethod
    async def queue(
        cls, nursery: trio.Nursery, prefix: str, waiter: Callable[[int], Awaitable[None]]
    ) -> StepsByTask:
        """Start ``WAITERS`` tasks ``waiter(number)`` one after another, each parked
        before the next comes; count their steps from then on."""
        steps = cls(prefix)
        trio.lowlevel.add_instrument(steps)
        for number in range(WAITERS):
            nursery.start_soon(waiter, number, name=f"{prefix}{number}")
            await trio.testing.wait_all_tasks_blocked()
        return steps

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.steps: collections.Counter[str] = collections.Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith(self.prefix):
            self.steps[task.name] += 1


async def test_each_freed_slot_wakes_one_opener_first_come_first_served() -> None:
    config = mplex.Config(max_outbound_streams=1)
    opened: list[int] = []
    async with mplex.testing.open_muxer_pair(config) as (client, _):

        async def opener(number: int) -> None:
            stream = await client.open_stream()
            opened.append(number)
            await stream.aclose()  # frees the slot for the next

        holder = await client.open_stream()  # takes the only slot while the others queue
        async with trio.open_nursery() as nursery:
            steps = await StepsByTask.queue(nursery, "opener ", opener)
            await holder.aclose()
        trio.lowlevel.remove_instrument(steps)
    assert opened == list(range(WAITERS))
    assert len(steps.steps) == WAITERS
    assert max(steps.steps.values()) <= STEPS_EACH, steps.steps.most_common(3)


async def test_each_arriving_stream_wakes_one_acceptor_in_turn() -> None:
    accepted: list[int] = []
    async with mplex.testing.open_muxer_pair() as (client, server):

        async def acceptor(number: int) -> None:
            stream = await server.accept_stream()
            accepted.append(number)
            await stream.aclose()

        async with trio.open_nursery() as nursery:
            steps = await StepsByTask.queue(nursery, "acceptor ", acceptor)
            for _ in range(WAITERS):
                await (await client.open_stream()).aclose()
                await trio.testing.wait_all_tasks_blocked()  # one stream at a time
        trio.lowlevel.remove_instrument(steps)
    assert accepted == list(range(WAITERS))
    assert max(steps.steps.values()) <= STEPS_EACH, steps.steps.most_common(3)


async def test_every_waiting_opener_learns_when_the_connection_ends() -> None:
    """One wake per freed slot while the connection runs; all of them once it ends."""
    config = mplex.Config(max_outbound_streams=1)
    failures: list[BaseException] = []
    async with mplex.testing.open_muxer_pair(config) as (client, server):
        await client.open_stream()  # the only slot, never freed

        async def opener() -> None:
            try:
                await client.open_stream()
            except trio.BrokenResourceError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(opener)
            await trio.testing.wait_all_tasks_blocked()
            await server.aclose()  # the peer hangs up
    assert len(failures) == 20
    assert all(isinstance(exc, mplex.ConnectionLost) for exc in failures)
