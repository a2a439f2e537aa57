"""One mplex connection driven over a trio stream: ``Driver``, the host of its streams.

The driver runs the sans-IO protocol ``Connection`` over a ``Transport`` with the
``Reader`` (in the task that runs it) and the ``Writer`` (a task of its own while
there is something to write), and does the waiting the protocol cannot: tasks
waiting for room in the outbox, for a stream slot, for the peer's next stream, or
in ``receive_some``.  After every
protocol call it acts on the notice the protocol hands back (``settle``): it wakes
the receivers it names, the senders, the acceptors and the tasks waiting for a slot,
and tells the writer about control frames.

Its objects refer to each other in one direction only: the driver holds the protocol,
the transport, the reader, the writer and the throttle; none of them holds the driver
(the reader and the writer get it as an argument, streams hold it as their
``StreamHost``, and the writer's way to start its task is dropped when ``run`` ends),
and the errors it records drop their tracebacks once it has ended
(``finished``).  So when a connection ends and the program drops it and its streams,
reference counting alone frees them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

import trio

from .._engine.config import Config
from .._engine.connection import Connection, Notice
from .._engine.outbox import Outbox
from .._engine.record import StreamRecord
from .._engine.states import ConnectionState
from .._engine.stats import MuxerStats
from .._engine.unread import prime_allocator
from ._util import (
    NO_CONTEXT,
    ConnectionLog,
    connection_label,
    describe,
    drop_tracebacks,
    explain,
    protected,
    root_cause,
)
from .errors import ConnectionLost, Ending, EndReason, Lifecycle, MuxerClosed
from .openings import Openings
from .reader import Reader
from .stream import MplexStream
from .throttle import ReaderThrottle
from .tracer import FrameTracer
from .transport import transport_for
from .writer import Writer

__all__ = ["Driver"]

_CLOSED = ConnectionState.CLOSED
#: Ends logged at DEBUG; the others (a failed transport, a broken protocol) at INFO.
_ORDINARY_ENDS = frozenset({EndReason.PEER_CLOSED, EndReason.CLOSED})
_CHANGED, _ARRIVED, _SLOT_FREED = Notice.CHANGED, Notice.ARRIVED, Notice.SLOT_FREED
_CONTROL, _RELEASED = Notice.CONTROL, Notice.RELEASED


class Driver(Openings):
    """One mplex connection over a trio stream (``StreamHost`` and ``ReaderHost``);
    opening and accepting its streams are ``Openings``'."""

    # fmt: off
    __slots__ = (
        "_run_scope", "config", "host", "life", "name", "protocol", "reader", "throttle", "transport",
        "transport_stream", "writer"
    )
    # fmt: on

    def __init__(self, transport_stream: trio.abc.Stream, config: Config) -> None:
        super().__init__()
        self.config = config
        self.transport_stream = transport_stream
        #: A label for log lines: a sequence number and, over a socket (or TLS over
        #: one), the peer's address.
        self.name = connection_label(transport_stream)
        #: Whether the connection runs, may send, and why not: the one record of it.
        self.life = Lifecycle()
        trace = FrameTracer(self.name)
        #: The protocol (sans-IO).
        self.protocol = protocol = Connection(config, clock=trio.current_time, trace=trace)
        self.transport = transport_for(transport_stream, config)
        self.writer = Writer(protocol, self.transport, trace)
        self.throttle = ReaderThrottle(protocol, self.writer)
        self.reader = Reader(protocol, self.transport, self.throttle, flushes=self.writer)
        #: The nursery the writer task starts in, if not one of ``run``'s own: set by
        #: ``serve_connection``, whose nursery of handlers outlives ``run``.
        self.host: trio.Nursery | None = None
        self._run_scope: trio.CancelScope | None = None

    @property
    def outbox(self) -> Outbox:
        """Where streams append their frames (the protocol's)."""
        return self.protocol.outbox

    @property
    def log(self) -> ConnectionLog:
        """Where this connection's lines are logged (made when one is: a log kept would
        be memory every connection holds)."""
        return ConnectionLog(self.name)

    @property
    def running(self) -> bool:
        """True until the connection ends."""
        return self.life.running

    def stats(self) -> MuxerStats:
        """A snapshot of this connection's counters and gauges (``Muxer.stats``)."""
        protocol, running = self.protocol, self.life.running
        lent = self.transport.borrower if running else None
        activity: dict[str, Any] = {
            "writer": self.writer.state if self.life.send_error is None and running else "stopped",
            "reader": ("paused" if self.throttle.blocked else self.reader.state) if running else "stopped",
            "reader_lent_to": lent.key if isinstance(lent, StreamRecord) else None,
            "receivers_waiting": sum(record.waiter is not None for record in protocol.streams.values())
            + isinstance(lent, StreamRecord),
            "senders_waiting": self.writer.senders_waiting if running else 0,
        }
        return protocol.counters.snapshot(
            frames_sent=self.outbox.frames,
            writes=self.outbox.writes,
            bytes_sent=self.outbox.bytes_sent,
            frames_received=protocol.frames_received,
            reader_blocked_seconds=self.throttle.blocked_for(),
            inbound_streams=protocol.table.inbound,
            outbound_streams=protocol.table.slots_taken,
            streams_waiting=len(protocol.backlog),
            unread_bytes=protocol.unread.total,
            queued_bytes=len(self.outbox.buffer),
            live_streams=len(protocol.streams),
            bytes_sent_without_copy=self.outbox.bytes_sent_without_copy,
            **activity,
        )

    # -- acting on the protocol's notices ------------------------------------------------------

    def settle(self) -> None:
        """Act on what the protocol's last calls changed."""
        events, woken = self.protocol.take_notice()
        if woken:
            reschedule = trio.lowlevel.reschedule
            for task in woken:
                reschedule(task)  # type: ignore[arg-type]
        if events:
            if events & _CONTROL:
                self.writer.queued()
            if events & _CHANGED and self.writer.senders_waiting:
                self.writer.wake_senders()
            if events & (_ARRIVED | _SLOT_FREED):
                self.wake_waiting(events)
            if events & _RELEASED:
                self.throttle.recheck()

    def stream_of(self, record: StreamRecord) -> MplexStream:
        return MplexStream(self, record, self.config.max_send_frame_size)

    def _changed_here(self, record: StreamRecord) -> None:
        """The program changed ``record``: wake whoever it concerns, a receiving task
        waiting on the transport itself included; what is queued is owed now."""
        transport = self.transport
        if transport.borrower_waiting is record:
            transport.wake_borrower()
        self.settle()
        self.writer.send_owed()

    # -- what streams ask (StreamHost) ------------------------------------------------------

    def queue_data(self, record: StreamRecord, view: memoryview) -> None:
        self.protocol.queue_data(record, view)
        self.writer.queued(lone=not record.peer_finished)

    def may_lend(self, record: StreamRecord) -> bool:
        return self.reader.may_lend(record) and self.life.running

    def receive_for(self, record: StreamRecord) -> Awaitable[None]:
        # The reader's coroutine itself, no frame of ours around it: an idle server
        # connection's handler waits in it.
        return self.reader.receive_for(self, record)

    def take(self, record: StreamRecord, max_bytes: int | None) -> bytes:
        data = self.protocol.unread.take(record.unread, record, max_bytes)  # take(), inlined: see changed()
        if self.throttle.blocked:
            self.throttle.recheck()
        return data

    def send_close(self, record: StreamRecord) -> bool:
        done = self.protocol.send_close(record)
        self.settle()
        self.writer.send_owed()
        return done

    def close(self, record: StreamRecord) -> None:
        self.protocol.close(record)
        self._changed_here(record)

    def reset(self, record: StreamRecord) -> None:
        self.protocol.reset(record)
        self._changed_here(record)

    def send_error(self, record: StreamRecord) -> BaseException:
        return self.life.send_error_for(record)

    def receive_error(self, record: StreamRecord) -> BaseException:
        return self.life.receive_error_for(record)

    # -- running and ending -----------------------------------------------------------------------

    def run(self, task_status: trio.TaskStatus[None]) -> Coroutine[Any, Any, None]:
        """The coroutine of the connection's task: the reader (in this task) and the
        writer (a task of its own while there is something to write) until the
        connection ends; see ``Muxer.run``."""
        if self.host is None and task_status is trio.TASK_STATUS_IGNORED:
            return self._run_in_own_nursery()
        # Started by ``nursery.start``, or served: the writer task can run in that
        # nursery, and the task runs the reader's coroutine itself, which starts and
        # finishes the connection through ``start_run`` and ``finish_run``.  So an
        # idle connection holds neither a nursery nor a frame of the driver's (most
        # of a kilobyte, and a third of one).
        return self.reader.run(self, task_status)

    @protected
    async def _run_in_own_nursery(self) -> None:
        """``run`` awaited directly: the writer task runs in a nursery of its own."""
        try:
            if await self._prepare():
                async with trio.open_nursery() as nursery:
                    self._run_scope = nursery.cancel_scope
                    if self._begin(nursery, hosted=False):
                        await self.reader.run(self)
        finally:
            await self.finish_run()

    async def start_run(
        self, task_status: trio.TaskStatus[None]
    ) -> contextlib.AbstractContextManager[Any] | None:
        """Start the connection in the task that runs it, hosted (``run``): the
        context the reader reads in until the connection ends, or None if it has
        ended already.  Raises if the handshake fails."""
        if not await self._prepare():
            return None
        task_status.started()
        host = self.host
        if host is None:  # the nursery ``nursery.start`` has just moved this task to
            host = trio.lowlevel.current_task().parent_nursery
        # No scope of our own where it can be helped (each costs an idle connection
        # memory): the reader reads in a scope ``end`` cancels only where ``end``
        # cannot wake it otherwise (``Transport.stop_reader``).
        self._run_scope = None if self.transport.stops_reader else trio.CancelScope()
        if host is None or not self._begin(host, hosted=True):
            return None
        return self._run_scope or NO_CONTEXT

    async def _prepare(self) -> bool:
        """What comes before the connection counts as started: whether it runs."""
        if self.config.prime_allocator:
            prime_allocator()
        if self.life.running:
            await self._handshake()
        return self.life.running

    async def finish_run(self) -> None:
        """The connection's task is leaving (the input ended, the connection was
        closed or cancelled): end it, close the transport, log why it ended.  Raises
        ``Cancelled`` if the task was cancelled."""
        self.writer.stop()  # no writer task starts once the nursery may close
        self.end(MuxerClosed("the muxer's run() was cancelled"), None, final_state=_CLOSED)
        try:
            await self.close_transport()  # raises Cancelled if run() was cancelled
        finally:
            # Remote causes at INFO, never WARNING: see mplex._trio._util.
            level = logging.DEBUG if self.life.end_reason in _ORDINARY_ENDS else logging.INFO
            self.log.log(level, "connection ended: %s", describe(self.life.error))
            self.finished()

    def _begin(self, nursery: trio.Nursery, *, hosted: bool) -> bool:
        """Let the writer task start in ``nursery`` (``hosted``: not ``run``'s own), if
        the connection runs."""
        if self.life.running:
            self.writer.start(nursery, self, hosted=hosted)
        return self.life.running

    async def _handshake(self) -> None:
        """The transport's handshake (TLS), before the connection counts as started: a
        failure raises once, from ``run()`` (and so from ``nursery.start`` or the
        ``async with``), never to every waiting stream, and never goes unseen by a
        program that sends and leaves."""
        timeout = self.config.handshake_timeout
        error: ConnectionLost | None = None
        cause: BaseException | None = None
        try:
            with trio.fail_after(timeout):
                await self.transport.prepare()
        except trio.TooSlowError as exc:
            error = ConnectionLost(
                f"the TLS handshake did not finish within {timeout:g} s (Config.handshake_timeout)"
            )
            cause = exc
        except Exception as exc:  # any transport's failure: the connection is lost
            error, cause = ConnectionLost(f"the TLS handshake failed: {explain(root_cause(exc))}"), exc
        if error is not None:
            self.end(error, cause)
            self.life.raise_ended()

    def stop_sending(self, error: Ending) -> None:
        """Nothing more may be queued: every send and open raises ``error``."""
        if self.life.stop_sending(error):
            self.protocol.stop_sending()
            self.settle()

    def end(
        self,
        error: Ending,
        cause: BaseException | None,
        *,
        final_state: ConnectionState = ConnectionState.BROKEN,
    ) -> None:
        """End the connection (the first call counts): break every stream, wake every
        waiting task, stop the reader and the writer.  After a failed write, that
        failure is the reason, whatever ends the connection afterwards (the program's
        ``aclose``, say): code that reconnects or scores peers on ``end_reason`` must
        not read a broken transport as a clean close."""
        failed = self.life.write_failure
        if failed is not None and not isinstance(error, ConnectionLost):
            error, cause = ConnectionLost(str(failed)), failed.__cause__
        if not self.life.end(error, cause=cause, final_state=final_state):
            return
        self.protocol.end()
        self.writer.stop()
        self.throttle.wake()
        if self.transport.borrower_waiting is not None:
            self.transport.wake_borrower()
        self.settle()
        if self._run_scope is not None:
            self._run_scope.cancel()
        else:
            self.transport.stop_reader()

    async def write_failed(self, cause: Exception, lost_data: bool) -> None:
        """A write failed (``lost_data``: Message frames were lost with it): end the send
        side; the receive side lingers (``Reader.linger``)."""
        error = ConnectionLost("the transport failed while sending")
        error.__cause__ = cause
        if self.life.write_failure is None:
            self.life.write_failure = error
            self.life.lost_data = lost_data
        self.stop_sending(error)
        self.writer.drop_queued()  # aclose's flush waits for a queue that is gone now
        await self.reader.linger(self, self.life.write_failure)

    async def close_transport(self) -> None:
        """Close the transport at once.  Its own failure to close (a peer that already
        hung up, a TLS close_notify that cannot go) is logged and kept as the context of
        ``end_error``, never raised: the connection has ended either way."""
        try:
            await trio.aclose_forcefully(self.transport_stream)
        except Exception as exc:  # any transport's aclose(): the connection is gone anyway
            drop_tracebacks(exc)
            self.log.debug("closing the transport failed: %r", exc)
            error = self.life.error
            if error is not None and error.__context__ is None:
                error.__context__ = exc

    def finished(self) -> None:
        """The tasks are done: nothing but the program may keep the connection alive,
        so the recorded errors drop their tracebacks (``drop_tracebacks``); their
        messages and causes stay."""
        self._run_scope = None
        drop_tracebacks(self.life.error, self.life.write_failure)
