"""When the reader must stop reading, and what gives: the slow-reader policies.

Before each read the reader asks ``should_pause``.  It pauses while a stream holds more
than ``Config.max_stream_buffer`` unread bytes, while all streams together hold more
than ``Config.max_connection_buffer`` (the transport's own flow control then pushes
back on the peer), or while the control frames it had to queue (replies to the peer's
input) are over ``Config.send_high_water``.  The policy decides what ends a pause
besides the program reading:

* ``"block"``: nothing; nothing is lost.
* ``"reset"``: a stream over its limit is reset at once, its data freed (the engine
  does that as the data arrives, and the reader never pauses for it).
* ``"block-then-reset"``: after ``Config.slow_reader_timeout`` the streams over their
  limit are reset; failing that, the live stream holding the most.

Whatever the policy, streams nobody has accepted hold the reader up for at most
``Config.accept_grace`` while no task is in ``accept_stream``: then they are reset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import trio

from .._engine.connection import Connection
from .._engine.record import StreamRecord
from .errors import ConnectionLost, Lifecycle
from .lot import OneTaskLot
from .writer import Writer

__all__ = ["ReaderHost", "ReaderThrottle"]


def _unread(record: StreamRecord) -> int:
    return record.unread.size


class ReaderThrottle:
    """The reader's pauses, the policy's verdicts, and the time the reader lost."""

    # fmt: off
    __slots__ = (
        "_blocked_since", "_drain_lot", "_protocol", "_writer", "acceptors", "blocked", "blocked_seconds"
    )
    # fmt: on

    def __init__(self, protocol: Connection, writer: Writer) -> None:
        self._protocol = protocol
        self._writer = writer
        #: Tasks inside ``accept_stream`` (unaccepted streams never stall a server).
        self.acceptors = 0
        #: True while the reader is paused.
        self.blocked = False
        #: Seconds the reader spent paused, not counting a pause still going on.
        self.blocked_seconds = 0.0
        self._blocked_since: float | None = None
        # Where the paused reader parks: made when it first pauses (most never do).
        self._drain_lot: OneTaskLot | None = None

    def blocked_for(self) -> float:
        """Seconds the reader spent paused, a pause still going on included."""
        if self._blocked_since is None:
            return self.blocked_seconds
        return self.blocked_seconds + trio.current_time() - self._blocked_since

    def recheck(self) -> None:
        """Something a paused reader waits for may have changed: let it look again."""
        if self.blocked:
            self.wake()

    def wake(self) -> None:
        """Wake a paused reader whatever changed (the connection ended)."""
        if self._drain_lot is not None:
            self._drain_lot.unpark()

    def should_pause(self) -> bool:
        protocol = self._protocol
        outbox = protocol.outbox
        return protocol.unread.over_limits() or outbox.control > outbox.high_water

    async def pause(self, conn: ReaderHost) -> None:
        """Wait until the reader may read again (see the module docstring)."""
        if self._protocol.unread.over_limits():
            await self._wait_for_readers(conn)
        outbox = self._protocol.outbox
        if outbox.control > outbox.high_water:
            await self._wait_for_send_room(conn)

    def _stalled_by_unaccepted(self) -> bool:
        """True if only streams nobody has accepted keep the reader from reading, and
        no task is in ``accept_stream`` to take them."""
        protocol = self._protocol
        account = protocol.unread
        if self.acceptors or any(not protocol.table.unaccepted(r) for r in account.overfull):
            return False
        if account.total > account.max_connection:
            waiting = sum(r.unread.size for r in protocol.backlog)
            return waiting > 0 and account.total - waiting <= account.max_connection
        return bool(account.overfull)

    def _shed_unaccepted(self, conn: ReaderHost) -> None:
        """Reset the unaccepted streams over their limit, then, while the connection is
        over its budget, the unaccepted stream holding the most."""
        protocol = self._protocol
        account = protocol.unread
        for record in [r for r in account.overfull if protocol.table.unaccepted(r)]:
            protocol.reset_by_policy(record)
        while account.total > account.max_connection:
            holding = [r for r in protocol.backlog if r.unread.size]
            if not holding:
                break
            protocol.reset_by_policy(max(holding, key=_unread))
        conn.settle()

    async def _wait_for_readers(self, conn: ReaderHost) -> None:
        config, account = self._protocol.config, self._protocol.unread
        started = trio.current_time()
        policy_deadline = float("inf")
        if config.slow_reader_policy == "block-then-reset":
            policy_deadline = started + config.slow_reader_timeout
        stalled_since: float | None = None  # by unaccepted streams only, since when
        with self._stalled():
            while account.over_limits() and conn.running:
                shed_at = float("inf")
                if self._stalled_by_unaccepted():
                    stalled_since = stalled_since or trio.current_time()
                    shed_at = stalled_since + config.accept_grace
                else:
                    stalled_since = None
                if self._drain_lot is None:
                    self._drain_lot = OneTaskLot()
                with trio.move_on_at(min(policy_deadline, shed_at)) as scope:
                    await self._drain_lot.park()
                if not scope.cancelled_caught:
                    continue
                if trio.current_time() >= shed_at:
                    # Nobody came to accept them: they must not stall the streams the
                    # program does read (a program that only dials never accepts).
                    self._shed_unaccepted(conn)
                    stalled_since = None
                    continue
                # Timed out: give up on the streams over their own limit; failing that,
                # on the live stream holding the most.  Resetting frees their data;
                # each further victim gets another full timeout first.
                victims = list(account.overfull)
                if not victims:
                    holding = [r for r in self._protocol.streams.values() if r.unread.size]
                    victims = [max(holding, key=_unread)] if holding else []
                for record in victims:
                    self._protocol.reset_by_policy(record)
                conn.settle()
                policy_deadline = trio.current_time() + config.slow_reader_timeout

    async def _wait_for_send_room(self, conn: ReaderHost) -> None:
        """Control frames waiting in the outbox (replies to the peer's input, Closes of
        the streams it opened) are over ``send_high_water``: read no more until the
        writer has taken them, so a peer that never reads cannot grow our send queue.
        Only control frames count: pausing for data would let two peers that both send
        in bulk wait for each other's reads forever."""
        outbox = self._protocol.outbox
        with self._stalled():
            while outbox.control > outbox.high_water and conn.running:
                await self._writer.wait_for_room()

    @contextlib.contextmanager
    def _stalled(self) -> Iterator[None]:
        """The reader is not reading: receivers must not read for it (the read turn is
        not lent), and the time counts in ``stats.reader_blocked_seconds``."""
        started = trio.current_time()
        self.blocked = True
        self._blocked_since = started
        try:
            yield
        finally:
            self.blocked = False
            self._blocked_since = None
            self.blocked_seconds += trio.current_time() - started


class ReaderHost(Protocol):
    """The calls the reader makes on its connection."""

    #: Whether the connection still runs (``life.running``, read on every read).
    life: Lifecycle

    @property
    def running(self) -> bool:
        """True until the connection ends."""

    def settle(self) -> None:
        """Act on what the protocol's last calls changed: wake whoever must look again."""

    def end(self, error: ConnectionLost, cause: BaseException | None) -> None:
        """The connection ends with ``error`` (chained to ``cause``): the input ended
        or failed, or the peer broke the protocol."""

    async def start_run(
        self, task_status: trio.TaskStatus[None]
    ) -> contextlib.AbstractContextManager[Any] | None:
        """The reader task is the connection's own: start the connection (the
        handshake, ``task_status.started()``, the writer); the context to read in, or
        None if the connection has ended already."""

    async def finish_run(self) -> None:
        """The reader task, the connection's own, is leaving: end the connection."""
