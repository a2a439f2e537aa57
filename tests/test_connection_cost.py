"""What a connection costs: the tasks an idle one holds, and many held at once.

An idle connection with one open stream holds the task running ``Muxer.run`` (which
reads) on each side, and on the server the handler serving the stream: the writer
task ends once it idles, and comes back when there is something to write.  Many
connections held at once all answer, an honest newcomer is served among them, and
once they close nothing of theirs is left: no task, and (with the cycle collector
off) no muxer or stream.

The soak holds 200 connections over every transport, and 300 against a server in
another process; ``MPLEX_FULL=1`` (``make test-full``) holds 10,000 there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex._bench.many_peer import count_tasks, raise_open_files_limit

from .helpers import (
    TaskSteps,
    ask,
    memory_transport,
    no_cyclic_gc,
    over_every_transport,
    read_all,
    reply_and_return,
    tcp_generic_transport,
    tcp_transport,
    tls_generic_transport,
    tls_transport,
)

FULL = bool(os.environ.get("MPLEX_FULL"))


async def echo_until_eof(stream: mplex.MplexStream) -> None:
    while data := await stream.receive_some():
        await stream.send_all(data)


async def serve(transport: trio.abc.Stream, servers: list[weakref.ref[Any]]) -> None:
    muxer = await mplex.serve_connection(echo_until_eof, transport)
    servers.append(weakref.ref(muxer))


async def serve_noting_the_task(server_end: trio.abc.Stream, served: list[trio.lowlevel.Task]) -> None:
    """``serve_connection`` in this task, which lands in ``served``."""
    served.append(trio.lowlevel.current_task())
    await mplex.serve_connection(echo_until_eof, server_end)


async def hold(
    transport: Callable[[], Any],
    count: int,
    stack: contextlib.AsyncExitStack,
    nursery: trio.Nursery,
    servers: list[weakref.ref[Any]],
) -> list[tuple[mplex.Muxer, mplex.MplexStream]]:
    """``count`` connections, each served by ``serve_connection`` in a task of
    ``nursery`` (a weak reference to its muxer lands in ``servers`` as it ends) and
    holding one open stream that has echoed a byte."""
    held = []
    for _ in range(count):
        client_end, server_end = await stack.enter_async_context(transport())
        nursery.start_soon(serve, server_end, servers)
        muxer = await stack.enter_async_context(mplex.open_muxer(client_end))
        stream = await muxer.open_stream()
        await stream.send_all(b".")
        assert await stream.receive_some() == b"."
        held.append((muxer, stream))
    return held


def tasks_named(prefix: str) -> int:
    """Tasks of this run whose name starts with ``prefix``."""
    count, todo = 0, [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        assert task is not None  # inside a run
        count += task.name.startswith(prefix)
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


def writer_tasks() -> int:
    """The connections' writer tasks now, found by their documented name."""
    return tasks_named("mplex writer ")


def run_services() -> int:
    """The library's tasks for the whole trio run (the settler, the sweeper), found by
    their documented names."""
    return tasks_named("mplex: ")


@over_every_transport
async def test_an_idle_connection_holds_one_task_on_the_client_and_two_on_the_server(
    transport: Any, autojump_clock: trio.testing.MockClock
) -> None:
    connections = 10
    async with trio.open_nursery() as nursery, contextlib.AsyncExitStack() as stack:
        await trio.testing.wait_all_tasks_blocked()
        before = count_tasks()
        held = await hold(transport, connections, stack, nursery, [])
        # A writer ends after idling for one to two periods, and the sweeper with the last.
        await trio.sleep(3 * mplex.WRITER_IDLES_FOR)
        # Client: the task running Muxer.run, which reads.  Server: the task running
        # serve_connection (the program's, as trio.serve_listeners gives each
        # connection), which reads, and the stream's handler.  No writer task; and
        # for the whole run, however many connections, the settler.
        assert run_services() == 1
        assert (count_tasks() - before - run_services()) / connections == 3
        assert writer_tasks() == 0
        for muxer, _ in held:
            await muxer.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert run_services() == 0  # the settler ends with the run's last connection


@pytest.mark.parametrize("transport", [memory_transport, tcp_generic_transport, tls_generic_transport])
async def test_a_writer_task_ends_once_it_idles_and_starts_again_when_needed(
    transport: Any, autojump_clock: trio.testing.MockClock
) -> None:
    """Over a transport that cannot write without waiting, every write is the writer
    task's: it runs while the connection writes, and not once it has idled."""
    async with trio.open_nursery() as nursery, contextlib.AsyncExitStack() as stack:
        held = await hold(transport, 3, stack, nursery, [])
        assert writer_tasks() == 6  # each side wrote
        # The sweeper looks at 1, 2, 3... periods from now.  At 1.5 one connection
        # writes again; the others' writers end at the look at 2, its own at 3.
        period = mplex.WRITER_IDLES_FOR
        await trio.sleep(1.5 * period)
        muxer, stream = held[0]
        await stream.send_all(b"busy")
        assert await stream.receive_some() == b"busy"
        await trio.sleep(1.2 * period)
        assert writer_tasks() == 2
        await trio.sleep(period)
        assert writer_tasks() == 0
        # They start again when there is something to write, and it all arrives.
        for muxer, stream in held:
            await stream.send_all(b"again")
            assert await stream.receive_some() == b"again"
            other = await muxer.open_stream()
            await other.send_all(b"new")
            await other.send_eof()
            assert await read_all(other) == b"new"
        assert writer_tasks() == 6
        for muxer, _ in held:
            await muxer.aclose()


@pytest.mark.parametrize("transport", [memory_transport, tcp_generic_transport, tls_generic_transport])
async def test_a_served_connection_holds_one_nursery_where_its_writer_and_handlers_run(
    transport: Any,
) -> None:
    """``serve_connection``'s task holds its nursery of handlers and no other: the
    muxer's writer task runs there too (a nursery costs an idle connection memory)."""
    served: list[trio.lowlevel.Task] = []
    async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
        nursery.start_soon(serve_noting_the_task, server_end, served)
        async with mplex.open_muxer(client_end) as client:
            stream = await client.open_stream()
            await stream.send_all(b"over the writer task")
            assert await stream.receive_some() == b"over the writer task"
            [nursery_of_handlers] = served[0].child_nurseries
            tasks = nursery_of_handlers.child_tasks
            assert len(tasks) == 2  # the handler's, and the writer's:
            assert [task for task in tasks if task.name.startswith("mplex writer ")] != []
            await stream.aclose()


@pytest.mark.parametrize("transport", [memory_transport, tcp_generic_transport, tls_generic_transport])
async def test_a_connection_served_with_a_lent_nursery_holds_none_of_its_own(transport: Any) -> None:
    """With ``handler_nursery``, the handlers and the writer task run in that nursery, and
    the task serving the connection holds no nursery (as under ``serve_tcp``)."""
    served: list[trio.lowlevel.Task] = []
    async with transport() as (client_end, server_end), trio.open_nursery() as nursery:

        async def serve() -> None:
            served.append(trio.lowlevel.current_task())
            await mplex.serve_connection(echo_until_eof, server_end, handler_nursery=nursery)

        nursery.start_soon(serve)
        async with mplex.open_muxer(client_end) as client:
            stream = await client.open_stream()
            await stream.send_all(b"over the writer task")
            assert await stream.receive_some() == b"over the writer task"
            assert served[0].child_nurseries == []
            names = sorted(task.name for task in nursery.child_tasks if task is not served[0])
            assert names[0] == "mplex stream handler"  # the handler tasks' name
            assert [name for name in names if name.startswith("mplex writer ")] != []
            await stream.aclose()


@pytest.mark.parametrize("transport", [memory_transport, tcp_generic_transport, tls_generic_transport])
async def test_a_muxer_started_in_a_nursery_holds_no_nursery_and_writes_beside_itself(
    transport: Any,
) -> None:
    """Started by ``nursery.start``, the task running ``Muxer.run`` holds no nursery of
    its own: its writer task runs in the same nursery, beside it, and ends with it.
    Awaited directly (no nursery to run beside), it keeps its writer in its own."""
    async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
        nursery.start_soon(mplex.serve_connection, echo_until_eof, server_end)
        muxer = mplex.Muxer(client_end)
        await nursery.start(muxer.run, name="the muxer")
        [running] = [task for task in nursery.child_tasks if task.name == "the muxer"]
        stream = await muxer.open_stream()
        await stream.send_all(b"over the writer task")
        assert await stream.receive_some() == b"over the writer task"
        assert running.child_nurseries == []
        assert [task.name.startswith("mplex writer ") for task in nursery.child_tasks].count(True) == 1
        await muxer.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert writer_tasks() == 0
        assert running not in nursery.child_tasks

    async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
        nursery.start_soon(mplex.serve_connection, echo_until_eof, server_end)
        muxer = mplex.Muxer(client_end)
        nursery.start_soon(muxer.run, name="the muxer")
        await trio.testing.wait_all_tasks_blocked()
        [running] = [task for task in nursery.child_tasks if task.name == "the muxer"]
        stream = await muxer.open_stream()
        await stream.send_all(b"over the writer task")
        assert await stream.receive_some() == b"over the writer task"
        [own] = running.child_nurseries
        assert [task.name.startswith("mplex writer ") for task in own.child_tasks] == [True]
        await muxer.aclose()


def library_frames(task: trio.lowlevel.Task) -> list[str]:
    """The frames of this library's code in ``task``'s chain of awaits, outermost
    first: what the task holds of ours while it waits (each costs memory)."""
    frames: list[str] = []
    awaited: Any = task.coro
    while awaited is not None:
        code = getattr(awaited, "cr_code", None) or getattr(awaited, "gi_code", None)
        if code is None:
            break
        if code.co_filename.startswith(MPLEX_DIR):
            frames.append(code.co_qualname)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return frames


MPLEX_DIR = os.path.dirname(mplex.__file__)


@over_every_transport
async def test_an_idle_connections_task_waits_in_one_frame_of_the_muxer_above_its_read(
    transport: Any,
) -> None:
    """Started by ``nursery.start`` (as ``open_muxer`` starts it) or served, the task
    running a connection waits in the reader's coroutine itself, with no frame of the
    muxer above it: between trio and the read (or the turn a receiving task borrowed),
    one frame of ours on the client, and ``serve_connection``'s above it on a server."""
    served: list[trio.lowlevel.Task] = []
    async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
        nursery.start_soon(serve_noting_the_task, server_end, served)
        muxer = mplex.Muxer(client_end)
        await nursery.start(muxer.run, name="the muxer")
        [running] = [task for task in nursery.child_tasks if task.name == "the muxer"]
        stream = await muxer.open_stream()
        for _ in range(2):  # the second receive may borrow the read turn
            await stream.send_all(b"?")
            assert await stream.receive_some() == b"?"
        await trio.testing.wait_all_tasks_blocked()
        client_frames, server_frames = library_frames(running), library_frames(served[0])
        assert client_frames[0] == "Reader.run" and "Driver" not in " ".join(client_frames)
        assert len(client_frames) <= 2  # and the transport's read, where it waits
        assert server_frames[:2] == ["serve_connection", "Reader.run"]
        assert len(server_frames) <= 3
        await muxer.aclose()


@pytest.mark.parametrize("transport", [tcp_transport, tls_transport])
async def test_over_the_socket_path_connections_ask_and_answer_without_a_writer_task(
    transport: Any,
) -> None:
    """The pass that lets a request's or a reply's frames settle is kept by the run's
    settler, for a busy connection as for a new one, and the task that made them
    writes them: no connection wakes a task of its own to send."""
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            async with transport() as (client_end, server_end):
                nursery.start_soon(mplex.serve_connection, reply_and_return, server_end)
                async with mplex.open_muxer(client_end) as client:
                    await ask(client, 20)
                    assert writer_tasks() == 0


@over_every_transport
async def test_a_running_muxer_does_not_keep_the_task_that_started_it(transport: Any) -> None:
    # ``nursery.start(muxer.run)`` from a task that then ends, as a dialer does: the
    # ended task (and the nursery trio started the muxer in) must not live on with the
    # connection.
    starters: list[weakref.ref[trio.lowlevel.Task]] = []

    async def dial(client_end: trio.abc.Stream, nursery: trio.Nursery) -> mplex.Muxer:
        starters.append(weakref.ref(trio.lowlevel.current_task()))
        muxer = mplex.Muxer(client_end)
        await nursery.start(muxer.run)
        return muxer

    with no_cyclic_gc():
        async with transport() as (client_end, server_end), trio.open_nursery() as nursery:
            nursery.start_soon(mplex.serve_connection, reply_and_return, server_end)
            dialed: list[mplex.Muxer] = []

            async def dialer() -> None:
                dialed.append(await dial(client_end, nursery))

            async with trio.open_nursery() as dialing:
                dialing.start_soon(dialer)
            muxer = dialed.pop()
            await ask(muxer, 3)  # it runs
            assert starters[0]() is None
            await muxer.aclose()


@over_every_transport
async def test_connections_held_together_all_answer_and_leave_nothing_when_they_close(
    transport: Any,
) -> None:
    await many_held(transport, 200)


async def many_held(transport: Callable[[], Any], count: int) -> None:
    await trio.testing.wait_all_tasks_blocked()
    before = count_tasks()
    with no_cyclic_gc():
        refs: list[weakref.ref[Any]] = []
        async with trio.open_nursery() as nursery, contextlib.AsyncExitStack() as stack:
            held = await hold(transport, count, stack, nursery, refs)
            # An honest newcomer among them is served.
            newcomer = await hold(transport, 1, stack, nursery, refs)
            muxer, stream = newcomer[0]
            await stream.send_all(b"ping")
            await stream.send_eof()
            assert await read_all(stream) == b"ping"
            # Every held connection still answers.
            for muxer, stream in held:
                await stream.send_all(b"!")
                assert await stream.receive_some() == b"!"
                refs += [weakref.ref(muxer), weakref.ref(stream)]
            del held, newcomer, muxer, stream
            # The client muxers closed with the stack; every server connection ends.
        await trio.testing.wait_all_tasks_blocked()
        assert count_tasks() == before
        assert len(refs) == 3 * count + 1  # held clients and streams, and every server
        assert [ref for ref in refs if ref() is not None] == []


async def test_connections_held_by_a_server_in_another_process_end_without_a_trace() -> None:
    count = 10_000 if FULL else 300
    raise_open_files_limit(count + 1000)
    server = subprocess.Popen(
        [sys.executable, "-m", "mplex._bench.peer", "server", "--impl", "mplex", "--conns", str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )
    with server:
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline().split()[1])
            await ten_thousand(port, count)
            server.wait(timeout=60)
            assert server.returncode == 0
        finally:
            if server.poll() is None:
                server.kill()


async def ten_thousand(port: int, count: int) -> None:
    """Hold ``count`` connections with a stream each against the benchmark's server
    (``mplex._bench.many_peer``), serve a newcomer among them, close them all, and
    see the server hold no task of theirs."""
    import argparse

    from mplex._bench.many_peer import Connections, mplex_request

    connections = Connections(argparse.Namespace(port=port, impl="mplex", tls=0, fast_path=1))
    idle = json.loads(await connections.ask(b"T"))["tasks"]
    async with trio.open_nursery() as nursery:
        muxers = await connections.open_all(count, nursery)
        streams = []
        for muxer in muxers:
            stream = await muxer.open_stream()
            await stream.send_all(b"E.")
            assert await stream.receive_some() == b"."
            streams.append(stream)
        newcomer = (await connections.open_all(1, nursery))[0]
        with trio.fail_after(10):
            await mplex_request(newcomer)
        held = json.loads(await connections.ask(b"T"))["tasks"]
        # The server held them all: serve_connection's task (which reads) and the
        # handler of each (and a writer task for those that wrote through it).
        assert held >= idle + 2 * count
        for muxer in [*muxers, newcomer]:
            await muxer.aclose()
    # The server ends each connection as its close arrives: ask until it holds none
    # (each question is a round trip through the server's own scheduler).
    with trio.fail_after(60):
        while json.loads(await connections.ask(b"T"))["tasks"] > idle:
            pass
    await connections.ask(b"Q")


@pytest.mark.parametrize("side", ["client", "server"])
async def test_a_request_on_an_idle_connection_takes_few_steps_of_the_muxer_tasks(
    side: str, mock_clock: trio.testing.MockClock
) -> None:
    """Over the socket path the writer task writes a request's or a reply's frames
    without a yield of its own, and the reader (the task that runs Muxer.run) reads
    what arrives after a wait without one (both sides in this process: their steps
    are counted apart).  Trio's clock is frozen, so that however loaded the machine,
    no lent read counts as slow (and no writer task idles long enough to end)."""
    requests = 200
    async with tcp_transport() as (client_end, server_end), trio.open_nursery() as nursery:
        server = await nursery.start(serve_one, server_end)
        async with mplex.open_muxer(client_end) as client:
            muxer = client if side == "client" else server
            steps = {task: TaskSteps(muxer, task) for task in ("reader", "writer")}
            for counter in steps.values():
                trio.lowlevel.add_instrument(counter)
            for _ in range(requests):
                stream = await client.open_stream()
                await stream.send_all(b"request")
                await stream.send_eof()
                assert await read_all(stream) == b"request"
                await stream.aclose()
            for counter in steps.values():
                trio.lowlevel.remove_instrument(counter)
    per_request = {task: counter.steps / requests for task, counter in steps.items()}
    # 2099ecb: the client's writer took 4 steps a request, the server's reader 4.9.
    assert per_request["writer"] <= 2.2, per_request
    # (A reply is a stream's first receive: the client's reader task reads it too.)
    assert per_request["reader"] <= 3.0, per_request


async def serve_one(transport: trio.abc.Stream, task_status: trio.TaskStatus[mplex.Muxer]) -> None:
    """``serve_connection`` with ``echo_until_eof``; its muxer once it runs."""
    async with mplex.open_muxer(transport) as muxer:
        task_status.started(muxer)
        async with trio.open_nursery() as nursery:
            async for stream in muxer:
                nursery.start_soon(echo_and_close, stream)


async def echo_and_close(stream: mplex.MplexStream) -> None:
    async with stream:
        await echo_until_eof(stream)


class StepsOfTask(trio.abc.Instrument):
    """Counts the scheduler steps of the task named ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1
