"""A wrong argument fails at once, with a TypeError, ValueError or RuntimeError that
names it, before anything starts: not later as an AttributeError inside a task."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
import trio
import trio.testing

import mplex
import mplex.testing


def _sync_handler(stream: mplex.MplexStream) -> None:
    pass


async def _async_handler(stream: mplex.MplexStream) -> None:
    pass


class _CallableHandler:
    async def __call__(self, stream: mplex.MplexStream) -> None:
        pass


@pytest.mark.parametrize("transport", [None, 42, b"bytes", object()], ids=["None", "int", "bytes", "object"])
def test_a_transport_that_is_not_a_stream_is_refused(transport: Any) -> None:
    with pytest.raises(TypeError, match=r"transport_stream must be a trio\.abc\.Stream"):
        mplex.Muxer(transport)
    with pytest.raises(TypeError, match="transport_stream"):
        mplex.open_muxer(transport)


@pytest.mark.parametrize("config", [{"max_stream_buffer": 1}, "defaults", 0], ids=["dict", "str", "int"])
def test_a_config_that_is_not_a_config_is_refused(config: Any) -> None:
    a, _ = trio.testing.memory_stream_pair()
    with pytest.raises(TypeError, match=r"config must be an mplex\.Config"):
        mplex.Muxer(a, config)


@pytest.mark.parametrize(
    "serve",
    [
        functools.partial(mplex.serve_tcp, port=0, host="127.0.0.1"),
        functools.partial(mplex.serve_listeners, listeners=[]),
        lambda handler: mplex.serve_connection(handler, trio.testing.memory_stream_pair()[0]),
    ],
    ids=["serve_tcp", "serve_listeners", "serve_connection"],
)
@pytest.mark.parametrize("handler", [_sync_handler, None, "echo"], ids=["def", "None", "str"])
async def test_a_handler_that_is_not_an_async_function_is_refused_before_serving(
    serve: Any, handler: Any
) -> None:
    # (The deadline turns "it went on to serve" into a failure rather than a hang.)
    with (
        trio.fail_after(5),
        trio.testing.assert_no_checkpoints(),
        pytest.raises(TypeError, match="handler must be an async"),
    ):
        await serve(handler)


@pytest.mark.parametrize("nursery", ["nursery", object(), trio.CancelScope()], ids=["str", "object", "scope"])
async def test_a_handler_nursery_that_is_not_a_nursery_is_refused_before_serving(nursery: Any) -> None:
    a, _ = trio.testing.memory_stream_pair()
    with (
        trio.fail_after(5),
        trio.testing.assert_no_checkpoints(),
        pytest.raises(TypeError, match=r"handler_nursery must be a trio\.Nursery"),
    ):
        await mplex.serve_connection(_async_handler, a, handler_nursery=nursery)


@pytest.mark.parametrize(
    "handler",
    [_async_handler, functools.partial(_async_handler), _CallableHandler()],
    ids=["async def", "partial", "async __call__"],
)
async def test_async_handlers_of_every_shape_are_served(handler: Any) -> None:
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery, mplex.open_muxer(b) as client:
        nursery.start_soon(mplex.serve_connection, handler, a)
        stream = await client.open_stream()
        assert await stream.receive_some() == b""  # served: the handler returned, its stream closed
        await client.aclose()


async def test_a_muxer_is_entered_once() -> None:
    a, _ = trio.testing.memory_stream_pair()
    async with mplex.Muxer(a) as muxer:
        with pytest.raises(RuntimeError, match="already entered"):
            async with muxer:
                pass  # pragma: no cover
        assert not muxer.closed  # the refused entry changed nothing
    with pytest.raises(RuntimeError, match="has ended"):
        async with muxer:
            pass  # pragma: no cover


async def test_a_muxer_that_ended_cannot_be_entered() -> None:
    a, _ = trio.testing.memory_stream_pair()
    muxer = mplex.Muxer(a)
    await muxer.aclose()
    with pytest.raises(RuntimeError, match="has ended"):
        async with muxer:
            pass  # pragma: no cover


async def test_a_running_muxer_entered_once_is_closed_on_exit() -> None:
    a, _ = trio.testing.memory_stream_pair()
    muxer = mplex.Muxer(a)
    async with trio.open_nursery() as nursery:
        await nursery.start(muxer.run)
        async with muxer:
            assert not muxer.closed
        assert muxer.closed


def test_used_outside_trio_it_says_that_it_needs_trio() -> None:
    async def under_asyncio() -> None:
        a, _ = trio.testing.memory_stream_pair()
        async with mplex.open_muxer(a):
            pass  # pragma: no cover

    with pytest.raises(RuntimeError, match="needs trio"):
        asyncio.run(under_asyncio())

    async def serving_under_asyncio() -> None:
        await mplex.serve_tcp(_async_handler, 0)

    with pytest.raises(RuntimeError, match="needs trio"):
        asyncio.run(serving_under_asyncio())


async def test_bad_arguments_to_the_testing_pair_are_refused() -> None:
    with pytest.raises(TypeError, match="config must be"):
        async with mplex.testing.open_muxer_pair({"max_stream_buffer": 1}):  # type: ignore[arg-type]
            pass  # pragma: no cover
