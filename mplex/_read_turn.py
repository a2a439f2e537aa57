"""The read turn: which task reads the transport next.

Normally the muxer's reader task reads the transport and wakes the streams' receiving
tasks.  But a task waiting in ``receive_some`` while no stream has unread data waits
for the peer; if it reads the transport itself, the arrival of the data wakes the
task that wants it directly, one scheduler pass sooner.  It then *borrows* the read
turn: the reader task steps aside (it is moved out of its wait, and parks), the
borrower reads once and dispatches what it read to every stream it is for, exactly as
the reader would, and gives the turn back.

``ReadTurn`` keeps that bookkeeping; the two transport paths (``SocketPath`` and
``StreamPath``) add how a waiting reader is moved aside and how a borrower is woken.
"""

from __future__ import annotations

import trio

__all__ = ["ReadTurn"]


class ReadTurn:
    """Who holds the read turn, and the reader task's side of handing it over."""

    def __init__(self) -> None:
        #: The stream whose receiving task holds the read turn.
        self.borrower: object | None = None
        #: That stream again, while its task waits on the transport.
        self.borrower_waiting: object | None = None
        #: True while the reader task waits on the transport.
        self.reader_waiting = False
        #: False where receiving tasks never borrow the turn (the reader alone reads).
        self.lends = True
        self._reader_parked: trio.lowlevel.Task | None = None

    def move_reader_aside(self) -> None:
        """Make the reader task leave its wait on the transport (it looks again)."""
        raise NotImplementedError

    def wake_borrower(self) -> None:
        """Make the borrowing task leave its wait on the transport (it looks again)."""
        raise NotImplementedError

    async def park_reader(self) -> None:
        """Park the reader task until the borrowing task gives the read turn back."""
        self._reader_parked = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._reader_parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def give_turn_back(self) -> None:
        """The borrowing task is done with the read turn: the reader task takes over."""
        self.borrower = None
        if self._reader_parked is not None:
            # Not a ParkingLot: this wake-up is on the path from a received request to
            # its reply, and rescheduling the one task costs less.
            trio.lowlevel.reschedule(self._reader_parked)
            self._reader_parked = None
