"""What a server spends on a peer is bounded: handlers per connection, their life after
the connection ends, idle connections, connections at once, and error logs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

import mplex
from mplex import Flag
from tests.helpers import frame, over_every_transport, read_all, settle


def task_count() -> int:
    """Every task of this trio run, found from the root task."""
    count = 0
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


@over_every_transport
async def test_no_more_handlers_run_than_max_inbound_streams(transport: Callable[[], Any]) -> None:
    config = mplex.Config(max_inbound_streams=4)
    backend = trio.Event()  # a slow backend the handlers wait on
    running = most = handled = 0

    async def handler(stream: mplex.MplexStream) -> None:
        nonlocal running, most, handled
        running += 1
        most = max(most, running)
        try:
            await backend.wait()
        finally:
            running -= 1
            handled += 1

    # A handler slot that is never given back would leave the accept loop waiting.
    with trio.fail_after(30):
        async with transport() as (a, b), trio.open_nursery() as nursery:
            nursery.start_soon(lambda: mplex.serve_connection(handler, a, config=config))
            async with mplex.open_muxer(b) as client:
                for _ in range(50):  # open, request, reset: the handler's stream is gone
                    stream = await client.open_stream()
                    await stream.send_all(b"request")
                    stream.reset()
                    await trio.testing.wait_all_tasks_blocked(0.01)
                assert most == config.max_inbound_streams
                backend.set()
                await settle()
            assert most == config.max_inbound_streams
            assert handled >= config.max_inbound_streams


@over_every_transport
async def test_streams_arriving_together_each_get_a_handler_within_the_limit(
    transport: Callable[[], Any],
) -> None:
    """The streams of one read start their handlers together (no scheduler pass
    each), still never more at once than max_inbound_streams: a handler counts until
    it returns, even after its stream was reset."""
    config = mplex.Config(max_inbound_streams=4)
    backend = trio.Event()
    running = most = 0
    served: list[str] = []

    async def handler(stream: mplex.MplexStream) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await backend.wait()
        served.append(stream.name)
        running -= 1

    async def open_together(client: mplex.Muxer, names: list[str]) -> list[mplex.MplexStream]:
        opened: list[mplex.MplexStream] = []

        async def open_one(name: str) -> None:
            opened.append(await client.open_stream(name))

        async with trio.open_nursery() as openers:  # queued in one pass: one write
            for name in names:
                openers.start_soon(open_one, name)
        await settle()
        return opened

    async with transport() as (a, b), trio.open_nursery() as nursery:
        nursery.start_soon(lambda: mplex.serve_connection(handler, a, config=config))
        async with mplex.open_muxer(b) as client:
            for stream in await open_together(client, ["r0", "r1"]):
                stream.reset()  # their handlers still run, and still count
            await settle()
            await open_together(client, ["s0", "s1", "s2", "s3"])
            assert running == most == config.max_inbound_streams
            backend.set()
            with trio.fail_after(10):
                while len(served) < 6:
                    await settle()
        assert most == config.max_inbound_streams
        assert sorted(served) == ["r0", "r1", "s0", "s1", "s2", "s3"]


#: Where ``serve_connection`` runs its handlers: a nursery of its own, or one it is lent.
over_both_nurseries = pytest.mark.parametrize("lend", [False, True], ids=["own nursery", "lent nursery"])


@over_both_nurseries
@over_every_transport
async def test_handlers_still_running_when_the_connection_ends_are_cancelled(
    transport: Callable[[], Any], lend: bool
) -> None:
    config = mplex.Config(close_timeout=0.3)
    started = cancelled = 0
    returned = trio.Event()

    async def handler(stream: mplex.MplexStream) -> None:
        nonlocal started, cancelled
        started += 1
        try:
            await trio.sleep_forever()  # a handler that never returns by itself
        except trio.Cancelled:
            cancelled += 1
            raise

    async def serve(nursery: trio.Nursery) -> None:
        await mplex.serve_connection(handler, a, config=config, handler_nursery=nursery if lend else None)
        assert cancelled == 3  # returns only once its handlers have
        returned.set()

    async with transport() as (a, b):
        with trio.move_on_after(20) as guard:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve, nursery)
                async with mplex.open_muxer(b) as client:
                    for _ in range(3):
                        await (await client.open_stream()).send_all(b"hello")
                    await trio.testing.wait_all_tasks_blocked(0.01)
                    assert started == 3
                ended = trio.current_time()
                await returned.wait()
                waited = trio.current_time() - ended
        assert not guard.cancelled_caught, "serve_connection did not return"
        assert config.close_timeout <= waited < config.close_timeout + 2


@over_both_nurseries
@over_every_transport
async def test_a_cancelled_serve_connection_cancels_its_handlers_at_once(
    transport: Callable[[], Any], lend: bool
) -> None:
    running, cancelled, left = trio.Event(), trio.Event(), trio.Event()
    config = mplex.Config(close_timeout=3600)

    async def handler(stream: mplex.MplexStream) -> None:
        running.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    async def serve(a: trio.abc.Stream, nursery: trio.Nursery, task_status: Any) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await mplex.serve_connection(handler, a, config=config, handler_nursery=nursery if lend else None)
        left.set()

    async with transport() as (a, b):
        with trio.fail_after(20):  # not close_timeout's hour
            async with trio.open_nursery() as nursery:
                serving = await nursery.start(serve, a, nursery)
                async with mplex.open_muxer(b) as client:
                    await (await client.open_stream()).send_all(b"hello")
                    await running.wait()
                    serving.cancel()
                    await cancelled.wait()
                    await left.wait()


async def test_serve_tcp_closes_a_connection_that_stays_idle() -> None:
    async def handler(stream: mplex.MplexStream) -> None:
        await stream.send_all(await stream.receive_some())

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: mplex.serve_tcp(
                handler, 0, host="127.0.0.1", idle_timeout=0.2, task_status=task_status
            )
        )
        port = listeners[0].socket.getsockname()[1]
        busy = await trio.open_tcp_stream("127.0.0.1", port)
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        async with mplex.open_muxer(busy) as client:
            started = trio.current_time()
            # A connection in use stays open past idle_timeout...
            while trio.current_time() - started < 0.6:
                stream = await client.open_stream()
                await stream.send_all(b"ping")
                assert await stream.receive_some() == b"ping"
                await stream.aclose()
            assert not client.closed
            # ...and one that sends nothing is closed.
            with trio.fail_after(5):
                assert await idle.receive_some() == b""
            await idle.aclose()
            # Once idle itself, so is the other.
            with trio.fail_after(5):
                async for _ in client:
                    pass
            assert client.end_reason is mplex.EndReason.PEER_CLOSED
        nursery.cancel_scope.cancel()


async def test_serve_tcp_closes_connections_over_max_connections_at_once() -> None:
    async def echo(stream: mplex.MplexStream) -> None:
        await stream.send_all(await stream.receive_some())

    async def ping(muxer: mplex.Muxer) -> bytes:
        stream = await muxer.open_stream()
        await stream.send_all(b"ping")
        return await stream.receive_some()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: mplex.serve_tcp(
                echo, 0, host="127.0.0.1", max_connections=2, task_status=task_status
            )
        )
        port = listeners[0].socket.getsockname()[1]
        first = mplex.Muxer(await trio.open_tcp_stream("127.0.0.1", port))
        second = mplex.Muxer(await trio.open_tcp_stream("127.0.0.1", port))
        await nursery.start(first.run)
        await nursery.start(second.run)
        assert await ping(first) == await ping(second) == b"ping"
        third = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(5):
            assert await third.receive_some() == b""  # closed at once
        await third.aclose()
        await first.aclose()
        await trio.testing.wait_all_tasks_blocked(0.05)
        again = mplex.Muxer(await trio.open_tcp_stream("127.0.0.1", port))
        await nursery.start(again.run)
        with trio.fail_after(5):
            assert await ping(again) == b"ping"  # a freed place is taken again
        nursery.cancel_scope.cancel()


async def test_tasks_return_to_their_baseline_after_connections_end() -> None:
    config = mplex.Config(close_timeout=0.2)

    async def hang(stream: mplex.MplexStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: mplex.serve_tcp(
                hang, 0, host="127.0.0.1", config=config, task_status=task_status
            )
        )
        port = listeners[0].socket.getsockname()[1]
        await trio.testing.wait_all_tasks_blocked(0.01)
        baseline = task_count()
        for _ in range(8):
            async with mplex.open_muxer(await trio.open_tcp_stream("127.0.0.1", port)) as client:
                for _ in range(20):
                    await (await client.open_stream()).send_all(b"x")
                await trio.testing.wait_all_tasks_blocked(0.01)
                assert task_count() > baseline + 20
        with trio.fail_after(10):
            while task_count() > baseline:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


async def test_a_peer_cannot_fill_the_log_through_raising_handlers(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(stream: mplex.MplexStream) -> None:
        raise ValueError("a bug in the handler")

    a, b = trio.testing.memory_stream_pair()
    with caplog.at_level(logging.ERROR, logger="mplex"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: mplex.serve_connection(broken, a))
            async with mplex.open_muxer(b) as client:
                streams = [await client.open_stream() for _ in range(20)]
                for stream in streams:
                    with contextlib.suppress(trio.BrokenResourceError):
                        assert await stream.receive_some() == b""
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    with_traceback = [r for r in errors if r.exc_info]
    assert len(with_traceback) == mplex.LOGGED_HANDLER_ERRORS
    summary = [r.getMessage() for r in errors if not r.exc_info]
    assert len(summary) == 1 and summary[0].endswith(
        "15 more handler errors on this connection were not logged (the first 5 were)"
    )


async def _reset_under_handlers_with_nurseries(extra: BaseException | None) -> list[logging.LogRecord]:
    """Eight streams reset by the peer under handlers that read and write at once in a
    nursery of their own (the second task raises ``extra`` if given); the records
    logged at INFO and above."""
    both_waiting = trio.Semaphore(0)

    async def handler(stream: mplex.MplexStream) -> None:
        async def reading() -> None:
            both_waiting.release()
            while await stream.receive_some():
                pass

        async def writing() -> None:
            both_waiting.release()
            while True:
                await stream.send_all(b"x" * 1024)
                if extra is not None:
                    raise extra
                await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reading)
            nursery.start_soon(writing)

    a, b = trio.testing.memory_stream_pair()
    handler_log = logging.getLogger("mplex")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(logging.INFO)
    handler_log.addHandler(keep)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: mplex.serve_connection(handler, a))
            async with mplex.open_muxer(b) as client:
                for _ in range(8):
                    stream = await client.open_stream()
                    await stream.send_all(b"request")
                    for _ in range(2):
                        await both_waiting.acquire()
                    stream.reset()
                await trio.testing.wait_all_tasks_blocked()
    finally:
        handler_log.removeHandler(keep)
    return records


async def test_a_peers_reset_under_a_handlers_own_nursery_is_not_logged_as_an_error() -> None:
    records = await _reset_under_handlers_with_nurseries(None)
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []


async def test_a_handler_error_beside_a_reset_in_one_group_is_still_logged() -> None:
    records = await _reset_under_handlers_with_nurseries(ValueError("a bug beside the reset"))
    errors = [r for r in records if r.levelno >= logging.ERROR and r.exc_info]
    assert len(errors) == mplex.LOGGED_HANDLER_ERRORS


class TestTheIdleClockCountsProgress:
    """``idle_timeout`` closes a connection where nothing moved, whatever its handlers
    wait for: a handler waiting on the peer is no progress, one at work of its own is."""

    @staticmethod
    async def served_for(
        handler: Callable[[mplex.MplexStream], Any],
        peer: Callable[[trio.abc.Stream], Any],
        transport: tuple[trio.abc.Stream, trio.abc.Stream] | None = None,
    ) -> float:
        """Virtual seconds ``serve_connection(handler, idle_timeout=1)`` ran while
        ``peer`` drove the other end (at most 100)."""
        server, client = transport or trio.testing.memory_stream_pair()
        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer, client)
            with trio.move_on_after(100):
                await mplex.serve_connection(handler, server, idle_timeout=1)
            nursery.cancel_scope.cancel()
        return trio.current_time() - started

    @staticmethod
    async def echo(stream: mplex.MplexStream) -> None:
        while data := await stream.receive_some():
            await stream.send_all(data)

    async def test_a_peer_that_opens_a_stream_and_falls_silent_is_closed(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0

        async def silent(client: trio.abc.Stream) -> None:
            await client.send_all(frame(0, Flag.NEW_STREAM))
            await trio.sleep_forever()

        assert 1 <= await self.served_for(self.echo, silent) < 2

    async def test_a_peer_that_asks_for_data_and_never_reads_it_is_closed(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0

        async def answer(stream: mplex.MplexStream) -> None:
            await stream.receive_some()
            await stream.send_all(b"a" * 2**20)  # never taken

        async def asks(client: trio.abc.Stream) -> None:
            await client.send_all(frame(0, Flag.NEW_STREAM) + frame(0, Flag.MESSAGE_INITIATOR, b"get"))
            await trio.sleep_forever()  # and never reads

        # close_timeout (5 s) is aclose's flush, which a peer that never reads runs out.
        seconds = await self.served_for(answer, asks, trio.testing.lockstep_stream_pair())
        assert 1 <= seconds < 2 + mplex.Config().close_timeout

    async def test_a_handler_at_work_of_its_own_keeps_the_connection(
        self, mock_clock: trio.testing.MockClock
    ) -> None:
        mock_clock.autojump_threshold = 0

        async def slow(stream: mplex.MplexStream) -> None:
            await stream.receive_some()
            await trio.sleep(10)  # a slow backend: the peer waits on us, not we on it
            await stream.send_all(b"done")

        async def waits(client: trio.abc.Stream) -> None:
            await client.send_all(frame(0, Flag.NEW_STREAM) + frame(0, Flag.MESSAGE_INITIATOR, b"get"))
            await trio.sleep_forever()

        assert 11 <= await self.served_for(slow, waits) < 12.5

    async def test_a_peer_that_keeps_sending_is_not_idle(self, mock_clock: trio.testing.MockClock) -> None:
        mock_clock.autojump_threshold = 0

        async def drips(client: trio.abc.Stream) -> None:
            await client.send_all(frame(0, Flag.NEW_STREAM))
            for _ in range(40):  # a byte of a message every half idle_timeout: 20 s
                await trio.sleep(0.5)
                await client.send_all(frame(0, Flag.MESSAGE_INITIATOR, b"."))
            await trio.sleep_forever()

        assert 20 <= await self.served_for(self.echo, drips) < 22


async def test_silent_stream_holders_cannot_keep_honest_clients_out() -> None:
    """The issue's repro: five peers that send one NewStream frame each fill
    ``max_connections=5``; with ``idle_timeout=1`` they are gone within 5 s and an
    honest client is served."""

    async def echo(stream: mplex.MplexStream) -> None:
        await stream.send_all(await stream.receive_some())

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(mplex.serve_tcp, echo, 0, host="127.0.0.1", idle_timeout=1, max_connections=5)
        )
        port = listeners[0].socket.getsockname()[1]
        silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(5)]
        for sock in silent:
            await sock.send_all(frame(0, Flag.NEW_STREAM))
        with trio.fail_after(5):
            for sock in silent:
                assert await sock.receive_some() == b""  # closed by the server
            await trio.testing.wait_all_tasks_blocked()  # the server's tasks finish
            async with mplex.open_muxer(await trio.open_tcp_stream("127.0.0.1", port)) as client:
                stream = await client.open_stream()
                await stream.send_all(b"honest")
                assert await stream.receive_some() == b"honest"
        for sock in silent:
            await sock.aclose()
        nursery.cancel_scope.cancel()


async def test_an_eager_client_keeps_its_connection_and_is_told_which_streams_were_refused() -> None:
    """3,000 requests at once against a server with default limits (1,024 streams
    open): the excess is refused stream by stream, each refusal telling the opener so
    (``StreamReset.refused``), and the requests in flight are answered."""
    release = trio.Event()

    async def answer(stream: mplex.MplexStream) -> None:
        await read_all(stream)
        await release.wait()  # every request arrives before the first is answered
        await stream.send_all(b"answer")

    served = refused = 0

    async def request(client: mplex.Muxer) -> None:
        nonlocal served, refused
        stream = await client.open_stream()
        try:
            await stream.send_all(b"request")
            await stream.send_eof()
            assert await read_all(stream) == b"answer"
            served += 1
        except mplex.StreamReset as exc:
            assert exc.refused and exc.by_peer, exc
            refused += 1

    a, b = trio.testing.memory_stream_pair()
    eager = mplex.Config(max_outbound_streams=3000)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: mplex.serve_connection(answer, a))
            async with mplex.open_muxer(b, eager) as client:
                async with trio.open_nursery() as requests:
                    for _ in range(3000):
                        requests.start_soon(request, client)
                    await trio.testing.wait_all_tasks_blocked()
                    release.set()
                assert not client.closed
    assert served >= mplex.Config().max_inbound_streams
    assert served + refused == 3000
    assert refused > mplex.Config().max_inbound_streams  # more than the old budget's 1,000 was lost to


async def test_a_handlers_reset_after_it_answered_is_not_a_refusal() -> None:
    async def half_answer(stream: mplex.MplexStream) -> None:
        await stream.send_all(b"part")
        stream.reset()

    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: mplex.serve_connection(half_answer, a))
        async with mplex.open_muxer(b) as client:
            stream = await client.open_stream()
            await stream.send_all(b"request")
            with pytest.raises(mplex.StreamReset) as caught:
                await read_all(stream)
            assert not caught.value.refused
