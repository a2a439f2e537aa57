"""Where a connection's streams begin: ``Openings``, the half of the driver that opens
our streams and hands out the peer's, and wakes the tasks waiting to.

Waiting is fair and linear: tasks waiting for a stream slot are served first come,
first served, and one freed slot wakes one of them; one arriving stream wakes one
acceptor.  A freed slot or an arrival wakes every waiting task only once nothing more
may be opened or accepted, so that each raises why.  The lots the tasks park in are
made when the first task waits: most connections never have one, and each costs an
idle connection memory.
"""

from __future__ import annotations

from typing import Protocol

import trio

from .._engine.config import Config
from .._engine.connection import Connection, Notice
from .._engine.record import StreamRecord
from .errors import Lifecycle
from .stream import MplexStream
from .throttle import ReaderThrottle
from .writer import Writer

__all__ = ["ArrivalWatcher", "Openings"]

_ARRIVED, _SLOT_FREED = Notice.ARRIVED, Notice.SLOT_FREED


class ArrivalWatcher(Protocol):
    """Who is told as streams arrive (``start_on_arrival``): kept, not a bound method
    of it, which would be memory every served connection holds."""

    def start_waiting(self) -> None:
        """Streams arrived in the backlog: take them (``accept_waiting``) or leave them."""


class Openings:
    """``open_stream`` and ``accept_stream`` of one connection (``Driver`` builds on it)."""

    __slots__ = ("_accept_lot", "_slot_lot", "on_arrival")

    # Set by the driver.
    config: Config
    life: Lifecycle
    protocol: Connection
    throttle: ReaderThrottle
    writer: Writer

    def __init__(self) -> None:
        #: Told as streams arrive, before acceptors are woken (``start_on_arrival``).
        self.on_arrival: ArrivalWatcher | None = None
        # Tasks waiting in accept_stream, and for a stream slot: made when the first
        # comes (most connections never have one, and each lot costs memory).
        self._accept_lot: trio.lowlevel.ParkingLot | None = None
        self._slot_lot: trio.lowlevel.ParkingLot | None = None

    def settle(self) -> None:
        """Act on what the protocol's last calls changed (``Driver.settle``)."""
        raise NotImplementedError

    def stream_of(self, record: StreamRecord) -> MplexStream:
        """The program's stream for ``record`` (``Driver.stream_of``)."""
        raise NotImplementedError

    def wake_waiting(self, events: int) -> None:
        """One acceptor per stream waiting in the backlog, one opener per freed slot
        (``open_stream`` hands a slot still free on); every task once nothing more may
        be opened or accepted, so that each raises why."""
        life = self.life
        if events & _ARRIVED:
            accepting = self._accept_lot
            if life.running:
                if self.on_arrival is not None:
                    self.on_arrival.start_waiting()
                if accepting:
                    accepting.unpark(count=len(self.protocol.backlog))
            elif accepting:
                accepting.unpark_all()
        opening = self._slot_lot
        if events & _SLOT_FREED and opening:
            if life.running and life.send_error is None:
                opening.unpark()
            else:
                opening.unpark_all()

    async def open_stream(self, name: bytes | None) -> MplexStream:
        """A new stream of ours (``name`` checked by ``name_bytes``), once the outbox has
        room and a slot is free."""
        await trio.lowlevel.checkpoint()
        protocol = self.protocol
        outbox = protocol.outbox
        table = protocol.table
        # Tasks waiting for a slot are served first come, first served, one freed slot
        # waking one of them (``settle``): a newcomer never takes a slot ahead of them.
        woken = False
        try:
            while True:
                self.life.check_usable()
                # not outbox.has_room or protocol.slot_free: their calls are inlined on
                # the per-request path (see Connection.changed)
                if len(outbox.buffer) >= outbox.high_water:
                    await self.writer.wait_for_room()  # NewStream is queued like data
                elif table.slots_taken < table.max_outbound and (woken or not self._slot_lot):
                    break
                else:
                    if self._slot_lot is None:
                        self._slot_lot = trio.lowlevel.ParkingLot()
                    await self._slot_lot.park()
                    woken = True
            record = protocol.open(name)
        finally:
            waiting = self._slot_lot
            if waiting and table.slots_taken < table.max_outbound:
                waiting.unpark()  # a slot is still free (or ours was not taken): the next
        self.settle()
        return self.stream_of(record)

    def accept_nowait(self) -> MplexStream:
        """The peer's next stream if one is waiting; ``trio.WouldBlock`` if none is yet;
        why the connection ended once it has and none is left."""
        stream = self.accept_waiting()
        if stream is None:
            if not self.life.running:
                self.life.raise_ended()
            raise trio.WouldBlock
        return stream

    def accept_waiting(self) -> MplexStream | None:
        """The peer's next stream if one is waiting, else None."""
        if not self.protocol.backlog:
            return None
        stream = self.stream_of(self.protocol.accept())
        if self.throttle.blocked:
            self.throttle.recheck()  # an accepted stream may be what a paused reader waits for
        return stream

    async def accept_stream(self) -> MplexStream:
        """The peer's next stream; raises why once the connection has ended."""
        throttle = self.throttle
        throttle.acceptors += 1
        try:
            backlog = self.protocol.backlog
            if backlog:
                await trio.lowlevel.checkpoint()
            while not backlog:
                if not self.life.running:
                    await trio.lowlevel.checkpoint()
                    self.life.raise_ended()
                if self._accept_lot is None:
                    self._accept_lot = trio.lowlevel.ParkingLot()
                await self._accept_lot.park()
            return self.stream_of(self.protocol.accept())
        finally:
            throttle.acceptors -= 1
            throttle.recheck()  # an accepted stream, or no acceptor left
