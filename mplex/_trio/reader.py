"""The connection's reads: the reader task, and receiving tasks that borrow its turn.

The reader task reads the transport and hands each chunk to the protocol
(``Connection.receive_data``), which decodes it and changes the stream records; the
driver then wakes whoever the change concerns (``ReaderHost.settle``).  Between reads
it applies the slow-reader policy (``ReaderThrottle``), and it dispatches at most
``Config.frames_per_yield`` frames
(and ``ARRIVALS_PER_STEP`` new streams) before it yields, whatever a read holds.

A task waiting in ``MplexStream.receive_some`` while nothing is buffered may read the
transport itself (``receive_for``): see the read turn in ``mplex._trio.transport``.  Both
go through ``consume``, the one place input reaches the protocol.

After a write failed, the receive side outlives the send side (``linger``): what the
peer sent is still delivered, and the connection ends when the input does.
"""

from __future__ import annotations

import math
from typing import Protocol

import trio

from .._engine.connection import Connection
from .._engine.errors import ProtocolError
from .._engine.record import StreamRecord
from ._util import NO_CONTEXT, drop_tracebacks, forget_deleted_locals, protected
from .errors import ConnectionLost, EndReason, MuxerClosed
from .throttle import ReaderHost, ReaderThrottle
from .transport import Transport

__all__ = ["BULK_DELIVERY", "LENDS_SKIPPED", "LEND_SLOW", "Reader"]

#: A lent read that waited longer than this (seconds) for the peer saved nothing: the
#: reply was slow to come (a busy program, a busy or distant peer), so the reader
#: task's hand-off would not have delayed it, and moving the reader aside costs CPU
#: (a wake-up call to it and its socket registration twice).  Then the next
#: ``LENDS_SKIPPED`` receives that would borrow the turn wait for the reader instead.
LEND_SLOW = 500e-6
LENDS_SKIPPED = 32
#: A delivered piece this large means the stream is taking a bulk transfer (see
#: ``Reader.may_lend``).
BULK_DELIVERY = 4096


class Flushing(Protocol):
    """What the reader asks of the writer."""

    def flush_now(self) -> None:
        """Write what is queued now, not when the program idles."""


class Reader:
    """The receive side of one connection; ``run()`` is the reader task."""

    # fmt: off
    __slots__ = (
        "_flush_on_input", "_lender", "_lends_skipped", "_lent_for", "_linger_scope", "_protocol",
        "_send_failure", "_throttle", "_transport", "state"
    )
    # fmt: on

    def __init__(
        self,
        protocol: Connection,
        transport: Transport,
        throttle: ReaderThrottle,
        *,
        flushes: Flushing,
    ) -> None:
        self._protocol = protocol
        self._transport = transport
        self._throttle = throttle
        # Where a write costs one system call, input ends the writer's wait for
        # idleness (see ``_feed``); elsewhere (TLS, noise) a write costs too much more.
        # (The writer, not its bound method: memory every connection would hold.)
        self._flush_on_input = flushes if transport.writes_without_waiting else None
        #: What the reader task is doing (``MuxerStats.reader``).
        self.state = "reading"
        # After a failed write: why the send side ended, and the scope whose deadline
        # bounds the wait for the input to end.
        self._send_failure: ConnectionLost | MuxerClosed | None = None
        # Receives still to go without a lent read: see ``LEND_SLOW``.
        self._lends_skipped = 0
        self._linger_scope: trio.CancelScope | None = None
        # While a receiving task borrows the read turn: the connection and its stream.
        self._lender: ReaderHost | None = None
        self._lent_for: StreamRecord | None = None

    # -- the reader task ----------------------------------------------------------------------

    @protected
    async def run(self, conn: ReaderHost, task_status: trio.TaskStatus[None] | None = None) -> None:
        """The reader task: reads whenever no receiving task holds the read turn,
        hands what it read to the engine, and pauses for the slow-reader policy.

        With ``task_status`` it is the connection's task itself (``Driver.run``): it
        starts the connection first (``ReaderHost.start_run``) and finishes it last,
        however it leaves (``ReaderHost.finish_run``).  One frame either way: an idle
        connection holds it."""
        hosting = task_status is not None
        try:
            if task_status is not None:
                reading = await conn.start_run(task_status)
                del task_status  # the nursery that started the task: not held
                forget_deleted_locals()
                if reading is None:
                    return
            else:
                reading = NO_CONTEXT
            transport = self._transport
            read = transport.reader_call()
            sock = transport.sock
            protocol = self._protocol
            throttle = self._throttle
            life = conn.life  # (its attribute, not the property: read on every read)
            with reading:
                while life.running:
                    if protocol.input_pending:
                        await trio.lowlevel.cancel_shielded_checkpoint()  # the rest, after a yield
                        if life.running and not self._resume(conn):
                            return
                        continue
                    if transport.borrower is not None:
                        # Lent: parked here, not in a method of its own (a frame an idle
                        # connection would hold), until the borrowing task gives the turn back.
                        self.state = "lent"
                        await transport.park_reader()
                        self.state = "reading"
                        await transport.after_lending(protocol.config.max_flush_delay)
                        continue
                    # A borrower moves the reader aside through this context (over the generic
                    # path, by cancelling it), which it does only while the reader waits.
                    with transport.reading():
                        # Input that a receiving task read and left part of (``input_pending``)
                        # is the reader's to finish before it reads again.
                        while transport.borrower is None and life.running and not protocol.input_pending:
                            if throttle.should_pause():
                                self.paused(True)
                                try:
                                    await throttle.pause(conn)
                                finally:
                                    self.paused(False)
                            self.state = "waiting"
                            try:
                                if sock is None:
                                    data = await (transport.read() if read is None else read())
                                else:
                                    data = transport.read_now()
                                    if data is None:
                                        try:
                                            if transport.waits_directly:
                                                # trio's own wait: no frame of ours
                                                # for an idle connection to hold.
                                                await trio.lowlevel.wait_readable(sock)
                                            else:
                                                await transport.wait_readable()
                                        except trio.ClosedResourceError:
                                            if sock.fileno() < 0:
                                                raise  # closed; else a call to look again
                                        finally:
                                            transport.reader_woke()
                            except Exception as exc:  # any failure of any transport: it is lost
                                self._receive_failed(conn, exc)
                                return
                            finally:
                                self.state = "reading"
                            if data is None:
                                continue  # nothing now, or moved aside: look again
                            acted = self._feed(conn, data)
                            data = None  # not held while the reader waits again
                            if acted is None:
                                return
                            if acted and protocol.input_pending:
                                break  # the rest of this read first, between yields
                            if transport.yield_due:
                                await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            if hosting:
                await conn.finish_run()

    # -- lending the read turn ------------------------------------------------------------

    def may_lend(self, record: StreamRecord) -> bool:
        """True if ``record``'s receiving task may read the transport itself now.

        Not on a stream's first receive: that mostly waits for a reply the peer has
        still to make (a handler to start, work to do), which the reader task's
        wake-up does not delay, while moving the reader aside and back costs CPU on
        every request of a stream-per-request protocol.  Not over the generic path
        to a stream taking a bulk transfer: there a read brings one record or so, and
        handing the turn back and forth for each costs more than the reader task's
        wake-up saves.  Only while no stream has unread data: then the wait is for
        the peer.  While streams have data to read, the reader task (one read, then a
        yield) keeps the pace; if every waiting receiver read for itself, a hundred of
        them would read a hundred chunks in one scheduler pass and fill the buffers
        for nothing.  Not the first time it is asked while the reader waits on the
        socket directly (``Transport.waits_directly``).
        """
        transport = self._transport
        last = record.last_delivery
        if not (
            last
            and transport.borrower is None
            and transport.lends
            and not self._protocol.input_pending
            and (last < BULK_DELIVERY or transport.writes_without_waiting)
            and not self._protocol.unread.total
            and not self._throttle.blocked
        ):
            return False
        if self._lends_skipped:
            self._lends_skipped -= 1
            return False
        if transport.waits_directly:
            return transport.end_direct_waits()
        return True

    async def receive_for(self, conn: ReaderHost, record: StreamRecord) -> None:
        """One read of the transport in ``record``'s receiving task (the caller checked
        ``may_lend``), waiting for the transport first if it has nothing.  What is read
        goes to the engine as the reader's would; if none of it is for ``record``, the
        caller waits for the reader task like any other receiver.  A checkpoint."""
        await trio.lowlevel.checkpoint_if_cancelled()
        transport = self._transport
        transport.borrower = record
        self._lender, self._lent_for = conn, record
        waited = False
        start = trio.current_time()
        try:
            data, waited = await transport.borrow_read(record, self)
            if data is not None and waited and trio.current_time() - start > LEND_SLOW:
                self._lends_skipped = LENDS_SKIPPED  # (a local close's wake-up is not slow)
            if data is not None:
                self.consume(conn, data)
        except Exception as exc:  # any failure of any transport: the connection is lost
            self._receive_failed(conn, exc)
        finally:
            self._lender = self._lent_for = None
            transport.give_turn_back()
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    def still_wanted(self) -> bool:
        """After the borrowing task's wait: whether it still wants to read (its stream
        may have data by then, or have ended).  (The transport is handed the reader,
        not a closure or bound method made for each receive: an idle connection's
        waiting handler would hold it.)"""
        record, conn = self._lent_for, self._lender
        return (
            record is not None
            and conn is not None
            and not record.unread.size
            and record.can_receive
            and conn.running
            and not self._protocol.input_pending
        )

    # -- what was read --------------------------------------------------------------------

    def consume(self, conn: ReaderHost, data: bytes | bytearray) -> bool:
        """Hand one chunk read from the transport to the protocol; False once the
        connection has ended (``b""`` is the end of the input)."""
        return self._feed(conn, data) is not None

    def _resume(self, conn: ReaderHost) -> bool:
        """The next part of an input that held more than ``Config.frames_per_yield``."""
        return self._feed(conn, None) is not None

    def _feed(self, conn: ReaderHost, data: bytes | bytearray | None) -> bool | None:
        """``data`` (None: the rest of the last input) to the protocol, then the driver
        acts on what changed.  None once the connection has ended (the input ended or
        broke the protocol); False if nothing changed (the middle of a large frame)."""
        if not conn.life.running:
            return None
        protocol = self._protocol
        if data:
            if self._linger_scope is not None:
                self.input_progressed()
            if self._flush_on_input is not None:
                # If the writer waits for the program to idle, what is queued answers
                # earlier input: it leaves now, and the peer works on it meanwhile,
                # instead of when the answers to this input are made too.
                self._flush_on_input.flush_now()
        try:
            if data is None:
                protocol.resume_input()
            elif not protocol.receive_data(data):
                return False
        except ProtocolError as exc:
            conn.settle()
            self._broken(conn, exc)
            return None
        conn.settle()
        if data is not None and not data:
            self._input_ended(conn)
            return None
        return True

    def _broken(self, conn: ReaderHost, exc: ProtocolError) -> None:
        error = ConnectionLost(f"the peer broke the mplex protocol: {exc}", reason=EndReason.PROTOCOL_ERROR)
        conn.end(error, exc)

    # -- how the input ends ---------------------------------------------------------------

    def _input_ended(self, conn: ReaderHost) -> None:
        if self._ended_by_failed_write(conn):
            return
        cut = self._protocol.input_cut()
        if cut:  # not a clean end: the transport ended inside a frame
            error = ConnectionLost("the transport ended in the middle of a frame")
            conn.end(error, EOFError(f"the input ended inside a frame ({cut} bytes of it)"))
        else:
            conn.end(ConnectionLost("the peer closed the connection", reason=EndReason.PEER_CLOSED), None)

    def _receive_failed(self, conn: ReaderHost, exc: BaseException) -> None:
        drop_tracebacks(exc)
        if not self._ended_by_failed_write(conn):
            conn.end(ConnectionLost("the transport failed while receiving"), exc)

    async def linger(self, conn: ReaderHost, send_failure: ConnectionLost | MuxerClosed) -> None:
        """A write failed (``send_failure`` says why; the send side has ended): keep
        delivering what the transport still hands over (a peer that sent everything
        and hung up).  The connection ends when the input does, or once the transport
        has delivered nothing for ``Config.close_timeout`` while the reader waited."""
        self._send_failure = send_failure
        self._linger_scope = trio.CancelScope()
        self.input_progressed(waiting=not self._throttle.blocked)
        with self._linger_scope:
            await trio.sleep_forever()
        self._end_by_failed_write(conn)

    def input_progressed(self, *, waiting: bool = True) -> None:
        """After a failed write: restart the wait for the input to end (none while the
        reader is held up by our own buffers)."""
        if self._linger_scope is not None:
            waited = self._protocol.config.close_timeout if waiting else math.inf
            self._linger_scope.deadline = trio.current_time() + waited

    def paused(self, paused: bool) -> None:
        """The slow-reader policy stopped (or resumed) the reader."""
        self.state = "paused" if paused else "reading"
        # Time our own full buffers hold the reader up never counts as input silence.
        self.input_progressed(waiting=not paused)

    def _ended_by_failed_write(self, conn: ReaderHost) -> bool:
        """The input ended after a write had failed: that failure is the reason."""
        if self._linger_scope is None:
            return False
        self._end_by_failed_write(conn)
        return True

    def _end_by_failed_write(self, conn: ReaderHost) -> None:
        error = self._send_failure
        assert error is not None
        conn.end(ConnectionLost(str(error)), error.__cause__)
