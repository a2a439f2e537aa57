"""What leaves ``open_muxer``, ``async with Muxer`` and ``serve_*`` is the exception that
was raised, not trio's nursery group around it; several at once still form a group,
and cancellation and KeyboardInterrupt behave as trio users expect."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

import mplex
import mplex.testing
from tests.helpers import over_every_transport

#: The two ways to run a muxer for a block.
BLOCKS = {
    "open_muxer": mplex.open_muxer,
    "async with Muxer": mplex.Muxer,
}
over_both_blocks = pytest.mark.parametrize("block", list(BLOCKS.values()), ids=list(BLOCKS))


class Mine(Exception):
    """An exception of the program's own."""


@over_both_blocks
async def test_an_error_raised_in_the_block_leaves_as_itself(block: Callable[..., Any]) -> None:
    a, _ = trio.testing.memory_stream_pair()
    cause = KeyError("the cause")
    with pytest.raises(Mine) as caught:
        async with block(a):
            raise Mine("mine") from cause
    assert type(caught.value) is Mine
    assert caught.value.__cause__ is cause  # its own chain is kept
    assert not isinstance(caught.value.__context__, BaseExceptionGroup)


@over_every_transport
async def test_a_lost_connection_is_caught_by_its_own_class(transport: Callable[[], Any]) -> None:
    async with transport() as (a, b):
        with pytest.raises(mplex.ConnectionLost) as caught:
            async with mplex.open_muxer(a) as muxer:
                stream = await muxer.open_stream()
                await trio.aclose_forcefully(b)  # the peer hangs up
                await stream.receive_some()
        assert caught.value.reason in {mplex.EndReason.PEER_CLOSED, mplex.EndReason.TRANSPORT_FAILED}


@over_both_blocks
async def test_several_errors_at_once_still_come_as_a_group(block: Callable[..., Any]) -> None:
    a, _ = trio.testing.memory_stream_pair()
    with pytest.raises(ExceptionGroup) as caught:
        async with block(a):
            raise ExceptionGroup("two of mine", [Mine("one"), ValueError("two")])
    assert caught.value.message == "two of mine"  # the program's own group, unwrapped once
    assert [type(e) for e in caught.value.exceptions] == [Mine, ValueError]


@over_both_blocks
async def test_keyboard_interrupt_in_the_block_leaves_as_itself(block: Callable[..., Any]) -> None:
    a, _ = trio.testing.memory_stream_pair()
    with pytest.raises(KeyboardInterrupt):
        async with block(a):
            raise KeyboardInterrupt


@over_both_blocks
async def test_a_cancelled_block_is_absorbed_by_the_scope_that_cancelled_it(
    block: Callable[..., Any],
) -> None:
    a, _ = trio.testing.memory_stream_pair()
    with trio.CancelScope() as scope:
        async with block(a) as muxer:
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert muxer.closed


async def test_the_testing_pair_lets_an_error_leave_as_itself() -> None:
    with pytest.raises(Mine):
        async with mplex.testing.open_muxer_pair():
            raise Mine


async def _raise_keyboard_interrupt(stream: mplex.MplexStream) -> None:
    raise KeyboardInterrupt


class Leaving:
    """Runs a ``serve_*`` function in a task and keeps what it raises."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None
        self.done = trio.Event()

    async def run(self, serve: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            await serve(*args, **kwargs)
        except BaseException as exc:  # what leaves, whatever it is
            self.exception = exc
        finally:
            self.done.set()


async def left_serve_connection(handler: Callable[[mplex.MplexStream], Any]) -> BaseException | None:
    """What left ``serve_connection`` once a client opened one stream for ``handler``."""
    a, b = trio.testing.memory_stream_pair()
    leaving = Leaving()
    async with trio.open_nursery() as nursery, mplex.open_muxer(b) as client:
        nursery.start_soon(leaving.run, mplex.serve_connection, handler, a)
        await client.open_stream()
        with trio.fail_after(10):
            await leaving.done.wait()
    return leaving.exception


async def left_serve_tcp(handler: Callable[[mplex.MplexStream], Any]) -> BaseException | None:
    """What left ``serve_tcp`` once a client opened one stream for ``handler``."""
    leaving = Leaving()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(leaving.run, mplex.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with mplex.open_muxer(await trio.open_tcp_stream("127.0.0.1", port)) as client:
            await client.open_stream()
            with trio.fail_after(10):
                await leaving.done.wait()
    return leaving.exception


SERVING = {"serve_connection": left_serve_connection, "serve_tcp": left_serve_tcp}
over_both_servers = pytest.mark.parametrize("left", list(SERVING.values()), ids=list(SERVING))


@over_both_servers
async def test_a_handlers_keyboard_interrupt_leaves_serving_as_itself(left: Callable[..., Any]) -> None:
    exception = await left(_raise_keyboard_interrupt)
    assert type(exception) is KeyboardInterrupt, repr(exception)


async def test_serve_tcp_cancelled_returns_quietly() -> None:
    async def handler(stream: mplex.MplexStream) -> None:
        await trio.sleep_forever()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(mplex.serve_tcp, handler, 0, host="127.0.0.1"))
            scope.cancel()
    assert scope.cancelled_caught


class TestTheProgramsOwnGroupsStayWhole:
    """Only the groups the library's nurseries add are removed: a group the program
    raises itself, or one of its own nurseries, leaves the block as it would outside."""

    @over_both_blocks
    async def test_a_group_of_one_raised_in_the_block_keeps_its_message_and_notes(
        self, block: Callable[..., Any]
    ) -> None:
        a, _ = trio.testing.memory_stream_pair()
        mine = ExceptionGroup("my own group", [ValueError("inside")])
        mine.add_note("a note of mine")
        with pytest.raises(ExceptionGroup) as caught:
            async with block(a):
                raise mine
        assert caught.value is mine
        assert caught.value.__notes__ == ["a note of mine"]

    @over_both_blocks
    async def test_a_nursery_of_the_programs_own_raises_its_group_as_it_would_outside(
        self, block: Callable[..., Any]
    ) -> None:
        async def fails() -> None:
            raise KeyError("in a child")

        with pytest.raises(ExceptionGroup) as outside:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fails)
        a, _ = trio.testing.memory_stream_pair()
        with pytest.raises(ExceptionGroup) as inside:
            async with block(a), trio.open_nursery() as nursery:
                nursery.start_soon(fails)
        assert inside.value.message == outside.value.message
        assert [type(e) for e in inside.value.exceptions] == [KeyError]

    @over_both_blocks
    async def test_nested_groups_of_the_program_arrive_nested(self, block: Callable[..., Any]) -> None:
        a, _ = trio.testing.memory_stream_pair()
        nested = ExceptionGroup("outer", [ExceptionGroup("inner", [Mine("deep")])])
        with pytest.raises(ExceptionGroup) as caught:
            async with block(a):
                raise nested
        assert caught.value is nested

    @over_both_blocks
    async def test_except_star_matches_inside_the_programs_group(self, block: Callable[..., Any]) -> None:
        a, _ = trio.testing.memory_stream_pair()
        seen: list[ExceptionGroup[Mine]] = []
        try:
            async with block(a):
                raise ExceptionGroup("mine", [Mine("one")])
        except* Mine as group:
            seen.append(group)
        assert [g.message for g in seen] == ["mine"]

    @over_both_servers
    async def test_a_handlers_own_base_group_leaves_serving_whole(self, left: Callable[..., Any]) -> None:
        group = BaseExceptionGroup("the handler's own", [KeyboardInterrupt()])

        async def handler(stream: mplex.MplexStream) -> None:
            raise group

        assert await left(handler) is group
