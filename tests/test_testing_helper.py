"""``mplex.testing.open_muxer_pair``: two running muxers that talk to each other, for
the tests of programs that use mplex."""

from __future__ import annotations

import trio
import trio.testing

import mplex
import mplex.testing


async def test_the_pair_talks_both_ways() -> None:
    async with mplex.testing.open_muxer_pair() as (client, server):
        ours = await client.open_stream("greeting")
        await ours.send_all(b"hello")
        await ours.send_eof()
        theirs = await server.accept_stream()
        assert theirs.name == "greeting"
        assert await theirs.receive_some() == b"hello"
        assert await theirs.receive_some() == b""
        await theirs.send_all(b"hi back")
        await theirs.aclose()
        assert await ours.receive_some() == b"hi back"
        # The server side may open streams too.
        back = await server.open_stream()
        await back.send_all(b"x")
        assert await (await client.accept_stream()).receive_some() == b"x"


async def test_the_config_applies_to_both_and_both_close_on_exit() -> None:
    config = mplex.Config(max_stream_buffer=4096, max_connection_buffer=8192)
    async with mplex.testing.open_muxer_pair(config) as (client, server):
        assert client.config is config and server.config is config
        assert not client.closed and not server.closed
    assert client.closed and server.closed
    # The server's muxer closes first; the client may see that before its own close.
    assert server.end_reason is mplex.EndReason.CLOSED
    assert client.end_reason in {mplex.EndReason.CLOSED, mplex.EndReason.PEER_CLOSED}


async def test_the_pair_runs_in_the_callers_task_tree_only_for_the_block() -> None:
    before = len(trio.lowlevel.current_root_task().child_nurseries)
    async with mplex.testing.open_muxer_pair() as (client, _):
        names = {task.name for task in _all_tasks()}
        assert f"mplex {client.name}" in names
        assert client.stats.live_streams == 0
    await trio.testing.wait_all_tasks_blocked()
    assert not any(task.name.startswith("mplex ") for task in _all_tasks())
    assert len(trio.lowlevel.current_root_task().child_nurseries) == before


def _all_tasks() -> list[trio.lowlevel.Task]:
    found: list[trio.lowlevel.Task] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        found.append(task)
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return found


async def test_both_muxers_end_as_closed_by_the_block() -> None:
    async with mplex.testing.open_muxer_pair() as (first, second):
        stream = await first.open_stream()
        await stream.send_all(b"x")
        await (await second.accept_stream()).receive_some()
    assert (first.end_reason, second.end_reason) == (mplex.EndReason.CLOSED, mplex.EndReason.CLOSED)
    assert isinstance(first.end_error, mplex.MuxerClosed)
    assert isinstance(second.end_error, mplex.MuxerClosed)
