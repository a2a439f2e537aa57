"""Where one task of a connection (its reader, its writer) parks until another wakes it."""

from __future__ import annotations

from collections.abc import Awaitable

import trio

__all__ = ["OneTaskLot"]


class OneTaskLot:
    """Where one task (the reader, the writer) parks until another wakes it: a
    ``trio.lowlevel.ParkingLot`` for one task, without the lot's own table of tasks
    (memory for every connection) and the call more each wake-up costs."""

    __slots__ = ("_task",)

    def __init__(self) -> None:
        self._task: trio.lowlevel.Task | None = None

    def park(self) -> Awaitable[None]:
        """``await lot.park()`` waits until ``unpark`` (or cancellation); one task at a
        time.  Not a coroutine of its own: a parked task's chain of frames is memory
        held for as long as the connection idles."""
        self._task = trio.lowlevel.current_task()
        # The lot is its own abort function: a bound method made for each wait would
        # be memory a parked task (an idle served connection's reader) holds.
        return trio.lowlevel.wait_task_rescheduled(self)

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        """The wait was cancelled: the task leaves the lot."""
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED

    def unpark(self) -> None:
        """Wake the parked task, if there is one."""
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)
