"""``serve_connection`` runs each handler as it would run in a task of its own: in a
fresh copy of the caller's context, interruptible by Ctrl-C, and gone with the
connection, however few tasks it takes to run them; the tasks kept waiting for the
next stream are bounded (``mplex.IDLE_HANDLER_TASKS``)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from tests.helpers import over_every_transport, read_all, settle

REQUEST = contextvars.ContextVar("REQUEST", default="unset")
ADDED = contextvars.ContextVar("ADDED", default="unset")


async def request(client: mplex.Muxer, payload: bytes) -> bytes:
    async with await client.open_stream() as stream:
        await stream.send_all(payload)
        await stream.send_eof()
        return await read_all(stream)


def handler_tasks() -> int:
    """Tasks of this run that serve_connection started for handlers (its documented
    task name)."""
    count = 0
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += task.name == "mplex stream handler"
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


@over_every_transport
async def test_a_context_variable_one_handler_sets_is_not_seen_by_the_next(
    transport: Callable[[], Any],
) -> None:
    """Whatever a handler does to its context (sets a variable the caller set, adds
    one, or sets one and resets it), the next handler sees the caller's context; the
    tasks that served a stream and left their context as it was serve the next."""
    seen: list[tuple[str, str]] = []
    interruptible: list[bool] = []
    tasks: list[trio.lowlevel.Task] = []

    async def handler(stream: mplex.MplexStream) -> None:
        seen.append((REQUEST.get(), ADDED.get()))  # what the caller of serve_connection set
        interruptible.append(not trio.lowlevel.currently_ki_protected())
        tasks.append(trio.lowlevel.current_task())
        data = await read_all(stream)
        what = data.split()[0]
        if what == b"set":
            REQUEST.set(data.decode())
        elif what == b"add":
            ADDED.set(data.decode())
        elif what == b"reset":
            REQUEST.reset(REQUEST.set(data.decode()))
        await trio.lowlevel.checkpoint()  # a value set lives across the handler's steps
        await stream.send_all(data)

    async def serve(server_end: trio.abc.Stream) -> None:
        REQUEST.set("the server's")
        await mplex.serve_connection(handler, server_end)

    kinds = [b"set", b"add", b"reset", b"keep"]
    with trio.fail_after(30):
        async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
            nursery.start_soon(serve, server_end)
            async with mplex.open_muxer(client_end) as client:
                for number in range(20):  # one after another
                    payload = kinds[number % 4] + b" %d" % number
                    assert await request(client, payload) == payload
                async with trio.open_nursery() as requests:  # and several at once
                    for number in range(20):
                        requests.start_soon(request, client, kinds[number % 4] + b" %d" % number)
            nursery.cancel_scope.cancel()
    assert seen == [("the server's", "unset")] * 40
    assert interruptible == [True] * 40
    assert len(set(tasks)) < 40  # tasks were reused
    assert (REQUEST.get(), ADDED.get()) == ("unset", "unset")


@over_every_transport
@pytest.mark.parametrize("ending", ["the peer closes", "the caller cancels"])
async def test_idle_handler_tasks_are_bounded_and_end_with_the_connection(
    transport: Callable[[], Any], ending: str
) -> None:
    burst = mplex.IDLE_HANDLER_TASKS + 16
    release = trio.Event()
    returned = trio.Event()

    async def handler(stream: mplex.MplexStream) -> None:
        await release.wait()
        await stream.send_all(await read_all(stream))

    async def serve(server_end: trio.abc.Stream) -> None:
        # Idle tasks end at once, not when close_timeout cancels what still runs.
        await mplex.serve_connection(handler, server_end, config=mplex.Config(close_timeout=3600))
        returned.set()

    with trio.fail_after(60):
        async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
            nursery.start_soon(serve, server_end)
            async with mplex.open_muxer(client_end) as client:
                async with trio.open_nursery() as requests:
                    for number in range(burst):
                        requests.start_soon(request, client, b"%d" % number)
                    while handler_tasks() < burst:  # every handler waits at once
                        await settle()
                    release.set()
                await settle()
                assert handler_tasks() == mplex.IDLE_HANDLER_TASKS  # the others ended
                assert await request(client, b"one more") == b"one more"
                await settle()
                if ending == "the caller cancels":
                    nursery.cancel_scope.cancel()
            await returned.wait() if ending == "the peer closes" else settle()
            assert handler_tasks() == 0
            nursery.cancel_scope.cancel()
