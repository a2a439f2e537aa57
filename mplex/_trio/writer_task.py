"""When a connection's writer task exists: ``WriterTask``, the task half of the writer,
and the senders that wait for it to make room.

A node holds thousands of connections that each send a little now and then, and a
parked task costs memory (its frames, the trio ``Task``).  So a connection's writer
task runs only while the connection writes:

* It starts, or wakes, when frames wait for it (``resume``).  Frames that are not a
  conversation's message are first let settle for a scheduler pass (see
  ``mplex._trio.writer``): the task that queued them mostly writes them itself
  meanwhile (``send_owed``).  That pass is kept by one settler per trio run
  (``_Settler``) for all its connections, and only if the frames are still queued
  after it does the writer task wake (or start).  So a connection whose tasks write
  their own requests and replies never wakes a task of its own for them: with many
  connections, one settler's step a scheduler pass serves them all, where a writer
  task's wake-up per request cost each connection a step of its own.
* It ends once it has been parked with nothing written for ``WRITER_IDLES_FOR``
  seconds or so.  Noticing that per connection would need a deadline on every park
  of every writer, which costs a busy connection more than the task's memory is
  worth; instead one sweeper per trio run (``_Sweeper``) looks at the parked
  writers once a period, and a writer that wrote nothing since its last look ends.
  So an idle writer ends after one to two periods.  Starting it again costs a few
  microseconds, which a connection quiet for that long does not notice.

The settler and the sweeper are system tasks of the trio run (kept in ``RunVar``\\ s,
never process-wide), made when first needed and ended once nothing is left for them.
They never raise: a system task's exception would end the whole run.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import trio

from ._util import call_in, protected
from .lot import OneTaskLot

__all__ = ["WRITER_IDLES_FOR", "FailureHost", "WriteFailed", "WriterTask"]

#: What the writer task calls when a write fails: ``write_failed(error, lost_data)``.
WriteFailed = Callable[[Exception, bool], Awaitable[None]]


class FailureHost(Protocol):
    """Who hears that a write failed: the connection (kept, not its bound method,
    which would be memory every connection holds while its writer task is gone),
    whose ``name`` the writer task is named for."""

    name: str

    async def write_failed(self, cause: Exception, lost_data: bool) -> None:
        """A write failed; ``lost_data``: Message frames were lost with it."""


#: Seconds between the sweeper's looks at the parked writers: a writer task that wrote
#: nothing for one period, and is parked at the next look, ends.
WRITER_IDLES_FOR = 1.0


class WriterTask:
    """The writer's task: started on demand, parked between batches, ended when idle.

    ``Writer`` builds on it; it sets ``parked`` and ``last_write``, and says what a
    settled pass leads to (``settled``).
    """

    # fmt: off
    __slots__ = (
        "_alive", "_context", "_failure_host", "_hosted", "_lot", "_nursery", "_parked", "_retiring",
        "_room_lot", "_scope", "_seen_write", "_settler", "_settling", "last_write", "senders_waiting",
    )
    # fmt: on

    #: True while the writer waits for frames (its task parked, or none running).
    _parked: bool
    #: ``time.perf_counter()`` of the last write to the transport.
    last_write: float

    def __init__(self) -> None:
        # Where the task parks: made when it first parks, dropped when it ends (most
        # connections idle with no writer task, and this would be memory they hold).
        self._lot: OneTaskLot | None = None
        # Where and how the task starts (given by ``start``; None before and after the
        # connection runs): ``_nursery``, in ``_context``, named for the host,
        # telling ``_failure_host`` if a write fails; ``_scope`` while a hosted one runs.
        self._nursery: trio.Nursery | None = None
        self._context: contextvars.Context | None = None
        self._failure_host: FailureHost | None = None
        self._hosted = False
        self._scope: trio.CancelScope | None = None
        # The run's settler, while the connection runs.
        self._settler: _Settler | None = None
        # ``_alive`` while it runs; ``_retiring`` once the sweeper told it to end;
        # ``_settling`` while the settler holds it; ``_seen_write`` is ``last_write``
        # at the sweeper's last look (-1: none yet).
        self._alive = False
        self._retiring = False
        self._settling = False
        self._seen_write = -1.0
        # Made when the first sender waits: most connections never have one.
        self._room_lot: trio.lowlevel.ParkingLot | None = None
        #: Tasks in ``wait_for_room`` now (``MuxerStats.senders_waiting``).  Counted
        #: here, not asked of the lot: ``wake_senders`` is due on every change of a
        #: stream's state, and its callers look at this first (an attribute, no call).
        self.senders_waiting = 0

    def start(self, nursery: trio.Nursery, failure_host: FailureHost, *, hosted: bool) -> None:
        """The connection runs: the writer task starts in ``nursery`` when needed, in
        a copy of the calling task's context as it is then (the task's context is
        kept, not a copy of it now: a copy is memory every connection would hold).
        ``hosted``: the nursery is not the connection's own (``serve_connection``'s
        nursery of handlers), so the task runs in a scope of its own, which
        ``stop_task`` cancels as the end of ``run`` cancels ``run``'s own nursery."""
        self._nursery, self._context = nursery, trio.lowlevel.current_task().context
        self._failure_host, self._hosted = failure_host, hosted
        self._parked = True
        self._settler = _Settler.join()

    def stop_task(self) -> None:
        """No writer task starts again; a parked one wakes, a hosted one is cancelled
        (and the connection's objects no longer refer to its nursery)."""
        self._nursery = self._context = self._failure_host = None
        settler, self._settler = self._settler, None
        if settler is not None:
            settler.leave()
        if self._scope is not None:
            self._scope.cancel()
        self._unpark()

    def resume(self, *, settle: bool) -> None:
        """Wake the parked task, or start one.  ``settle``: the settler keeps a pass
        first, and the task wakes after it only if the frames are still queued
        (``settled``)."""
        settler = self._settler
        if settle and settler is not None:
            if not self._settling:
                self._settling = True
                settler.add(self)
        else:
            self.start_task()

    def start_task(self) -> None:
        """Wake the writer task now, or start it unless the connection has ended."""
        self._settling = False  # if the settler holds it, its pass no longer counts
        if self._alive:
            self._retiring = False  # frames came before it could end: it writes them
            self._unpark()
            return
        nursery, context, host = self._nursery, self._context, self._failure_host
        if nursery is not None and context is not None and host is not None:
            self._alive = True
            task = self._run_hosted if self._hosted else self.run
            name = f"mplex writer {host.name}"
            try:
                call_in(context, nursery.start_soon, task, host.write_failed, name=name)
            except RuntimeError:  # the run's nursery has closed: the connection ended
                self._alive = False
                self._nursery = self._context = self._failure_host = None

    async def run(self, write_failed: WriteFailed) -> None:
        """The writer task's work (``Writer.run``)."""
        raise NotImplementedError

    @protected
    async def _run_hosted(self, write_failed: WriteFailed) -> None:
        with trio.CancelScope() as self._scope:
            try:
                await self.run(write_failed)
            finally:
                self._scope = None

    def after_pass(self) -> None:
        """The settler's pass went by (or the frames left before it did)."""
        if self._settling:
            self._settling = False
            if self._nursery is not None:
                self.settled()

    def settled(self) -> None:
        """What the frames let settle lead to, when nothing woke the task meanwhile."""
        raise NotImplementedError

    def settling_frames(self) -> bool:
        """True while frames the settler holds are still queued."""
        raise NotImplementedError

    async def park(self) -> bool:
        """Wait for ``resume``; False once the task should end instead."""
        lot = self._lot
        if lot is None:
            lot = self._lot = OneTaskLot()
        await lot.park()
        return not self._retiring

    def _unpark(self) -> None:
        if self._lot is not None:
            self._lot.unpark()

    def sweep(self) -> None:
        """The sweeper looks: a task parked since its last look, with nothing
        written meanwhile, ends."""
        if not self._parked or self._retiring:
            self._seen_write = -1.0
        elif self.last_write != self._seen_write:
            self._seen_write = self.last_write
        else:
            self._retiring = True
            self._unpark()

    def task_started(self) -> _Sweeper:
        """In the new task: the run's sweeper looks at it until ``task_ended``."""
        self._seen_write = -1.0
        return _Sweeper.enlist(self)

    def task_ended(self, sweeper: _Sweeper) -> None:
        self._alive = self._retiring = False
        self._lot = None
        sweeper.discharge(self)

    # -- senders waiting for room ---------------------------------------------------------

    async def wait_for_room(self) -> None:
        """Wait until the writer has sent something, or ``wake_senders`` is called
        (the caller looks at its situation again)."""
        if self._room_lot is None:
            self._room_lot = trio.lowlevel.ParkingLot()
        self.senders_waiting += 1
        try:
            await self._room_lot.park()
        finally:
            self.senders_waiting -= 1

    def wake_senders(self) -> None:
        """Let every waiting sender look at its situation again (the hot paths call it
        only when ``senders_waiting``)."""
        if self.senders_waiting:
            assert self._room_lot is not None  # made by the first waiter
            self._room_lot.unpark_all()


class _RunService:
    """A system task of the trio run, made when first needed (``of_this_run``)."""

    #: The system task's name.
    task_name = ""

    @classmethod
    def of_this_run(cls: type[S], var: trio.lowlevel.RunVar[S | None]) -> S:
        """The run's service kept in ``var``, made and started if there is none."""
        service = var.get()
        if service is None:
            service = cls()
            var.set(service)
            trio.lowlevel.spawn_system_task(service.run, name=service.task_name)
        return service

    async def run(self) -> None:
        raise NotImplementedError


S = TypeVar("S", bound=_RunService)
_SWEEPER: trio.lowlevel.RunVar[_Sweeper | None] = trio.lowlevel.RunVar("mplex.sweeper", default=None)
_SETTLER: trio.lowlevel.RunVar[_Settler | None] = trio.lowlevel.RunVar("mplex.settler", default=None)


class _Sweeper(_RunService):
    """The writer tasks of one trio run, looked at once every ``WRITER_IDLES_FOR``."""

    task_name = "mplex: ends idle writer tasks"

    def __init__(self) -> None:
        self._writers: set[WriterTask] = set()
        self._scope = trio.CancelScope()

    @staticmethod
    def enlist(writer: WriterTask) -> _Sweeper:
        sweeper = _Sweeper.of_this_run(_SWEEPER)
        sweeper.add(writer)
        return sweeper

    def add(self, writer: WriterTask) -> None:
        self._writers.add(writer)

    def discharge(self, writer: WriterTask) -> None:
        """``writer``'s task ended; with the last one, the sweeper ends too."""
        writers = self._writers
        writers.discard(writer)
        if not writers and _SWEEPER.get() is self:
            _SWEEPER.set(None)
            self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            while True:
                await trio.sleep(WRITER_IDLES_FOR)
                for writer in list(self._writers):
                    writer.sweep()


class _Settler(_RunService):
    """The pass that lets a connection's frames settle, kept for every connection of
    the trio run at once (``WriterTask.resume``), while any of them runs.

    A writer whose frames are still queued is told (``WriterTask.after_pass``) at the
    settler's third step after it enlisted, each step in a pass of its own: the first
    may come in the very pass it enlisted in (when the settler was due to run in it
    anyway), so only that way has its frames' task surely had a whole pass of its own,
    whichever order the tasks of a pass run in.  A writer whose frames have left by
    then is told at once: its task wrote them (the usual case).
    """

    task_name = "mplex: lets frames settle"

    def __init__(self) -> None:
        self._members = 0
        self._lot = OneTaskLot()
        # Enlisted, not yet looked at; looked at once, then twice, frames still queued.
        self._enlisted: list[WriterTask] = []
        self._looked: list[WriterTask] = []
        self._again: list[WriterTask] = []

    @staticmethod
    def join() -> _Settler:
        """The run's settler, for one more running connection (``leave`` when it ends)."""
        settler = _Settler.of_this_run(_SETTLER)
        settler.enter()
        return settler

    def enter(self) -> None:
        self._members += 1

    def leave(self) -> None:
        self._members -= 1
        if not self._members:
            self._lot.unpark()  # to end, if no connection joins meanwhile

    def add(self, writer: WriterTask) -> None:
        if not self._enlisted:
            self._lot.unpark()
        self._enlisted.append(writer)

    async def run(self) -> None:
        try:
            while True:
                for writer in self._again:
                    writer.after_pass()
                enlisted, self._enlisted = self._enlisted, []
                self._again = self._still_settling(self._looked)
                self._looked = self._still_settling(enlisted)
                if self._again or self._looked:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                elif self._enlisted:
                    continue  # enlisted as the others were told
                elif self._members:
                    await self._lot.park()
                else:
                    break
        finally:
            if _SETTLER.get() is self:
                _SETTLER.set(None)

    @staticmethod
    def _still_settling(writers: list[WriterTask]) -> list[WriterTask]:
        """Those of ``writers`` whose frames are still queued; the others are told."""
        left = []
        for writer in writers:
            if writer.settling_frames():
                left.append(writer)
            else:
                writer.after_pass()
        return left
