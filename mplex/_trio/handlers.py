"""The tasks that run ``serve_connection``'s handlers: each serves one stream after another.

A task of its own per stream is what a handler expects, but starting a trio task and
seeing it end is a large part of what a server spends on a short request.  So a
handler task that has served its stream waits for the next one instead of ending, as
long as its context is still what a new task would get: a copy of the context
``serve_connection`` was called in (what ``nursery.start_soon`` gives).  A handler that
leaves a context variable set ends its task, so the next handler never sees it.  The
handlers run under the same nursery either way, unprotected from ``KeyboardInterrupt``.

The nursery is the connection's own, or one the program lends that outlives it (as
``trio.serve_listeners`` takes a ``handler_nursery``): then each task runs in a cancel
scope of its own, so that the connection's handlers can still be cancelled together,
and ``wait_ended`` waits for them as the end of an ``async with`` nursery block would.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine
from typing import Any, Protocol

import trio
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

from ._util import NO_CONTEXT, call_in, protected
from .errors import Unwrapping
from .lot import OneTaskLot
from .stream import MplexStream

__all__ = ["HANDLER_TASK", "LENT_BY_SERVE_LISTENERS", "AsLent", "HandlerTasks", "StreamServer"]

#: The name of every handler task (trio would otherwise format one per task).
HANDLER_TASK = "mplex stream handler"


class StreamServer(Protocol):
    """What the handler tasks call (kept, not a bound method of it, which would be
    memory every served connection holds)."""

    def serve_stream(self, stream: MplexStream) -> Coroutine[Any, Any, None]:
        """Serve ``stream`` (its handler, in the handler task)."""


class HandlerTasks:
    """Handler tasks in ``nursery``, each calling ``server.serve_stream(stream)`` for the
    streams it is given, one after another; at most ``idle_limit`` of them wait for a
    stream at once (the others end).  ``lent``: the nursery outlives the connection,
    so each task runs in a scope of its own (see ``wait_ended``)."""

    # fmt: off
    __slots__ = (
        "_closed", "_context", "_ended", "_idle", "_idle_limit", "_live", "_nursery", "_server",
    )
    # fmt: on

    def __init__(
        self, nursery: trio.Nursery, server: StreamServer, idle_limit: int, *, lent: bool = False
    ) -> None:
        self._nursery = nursery
        self._server = server
        self._idle_limit = idle_limit
        #: In a lent nursery, the tasks alive (each with its scope); None otherwise.
        self._live: list[_Idle] | None = [] if lent else None
        #: Where ``wait_ended`` waits for the last of them (made when it first does).
        self._ended: OneTaskLot | None = None
        #: Idle tasks, each with the stream it is handed (None to end): the last to go
        #: idle is the first woken.  (Made when a task first goes idle: a connection
        #: whose handler still runs holds none.)
        self._idle: list[_Idle] | None = None
        # The context of the task serving the connection (which no code of ours
        # changes), not a copy of it now: a copy is memory every connection holds.
        self._context = current_task().context
        self._closed = False

    def start(self, stream: MplexStream) -> None:
        """Serve ``stream`` in an idle handler task, or in a new one."""
        if self._idle:
            waiting = self._idle.pop()
            waiting.stream = stream
            reschedule(waiting.task)
            return
        # Handed over in a holder, not as an argument: trio 0.27 copies a protected
        # coroutine's arguments into its frame's locals dict, which would keep the
        # first stream alive as long as the task.
        idle = _Idle(stream)
        # In a copy of serve_connection's context, whichever task starts it (the
        # reader as the stream arrives, or a handler task whose handler returned).
        call_in(self._context, self._spawn, idle)

    def _spawn(self, idle: _Idle) -> None:
        self._nursery.start_soon(self._work, idle, name=HANDLER_TASK)

    def close(self) -> None:
        """No more streams: idle tasks end now, busy ones when their handler returns."""
        self._closed = True
        idle, self._idle = self._idle, None
        for waiting in idle or ():
            reschedule(waiting.task)

    def cancel(self) -> None:
        """Cancel the tasks still alive (in a lent nursery; in the connection's own,
        its scope does it)."""
        for task in self._live or ():
            if task.scope is not None:
                task.scope.cancel()

    async def wait_ended(self, deadline: float) -> None:
        """In a lent nursery, once the connection has ended: wait until every task has
        ended, cancelling those still alive at ``deadline`` (or when this wait is
        cancelled, which it then leaves to the lent nursery)."""
        live = self._live
        if not live:
            return
        lot = self._ended = OneTaskLot()
        try:
            with trio.move_on_at(deadline):
                while live:
                    await lot.park()
            self.cancel()
            while live:  # cancelled: they end at their next checkpoint
                await lot.park()
        except BaseException:
            self.cancel()
            raise

    @protected  # the handler is not: ``serve`` is unprotected
    async def _work(self, me: _Idle) -> None:
        me.task = current_task()
        live = self._live
        if live is not None:
            me.scope = trio.CancelScope()
            live.append(me)
        # (Without a scope of its own, this block holds no bound method: NO_CONTEXT's
        # methods are static.)
        with me.scope or NO_CONTEXT:
            try:
                while True:
                    stream, me.stream = me.stream, None  # an idle task holds no stream
                    if stream is None:
                        return
                    await self._server.serve_stream(stream)
                    stream = None
                    if self._context_changed():
                        return
                    await self._wait_for_stream(me)
            finally:
                if live is not None:
                    live.remove(me)
                    me.scope = None
                    if not live and self._ended is not None:
                        self._ended.unpark()

    def _context_changed(self) -> bool:
        """Whether the running task's context differs from a new handler task's: a
        variable set, added or removed (an equal value that is another object counts)."""
        now, fresh = contextvars.copy_context(), self._context
        if len(now) != len(fresh):
            return True
        for var, value in fresh.items():  # noqa: SIM110 (a loop: no generator a request)
            if now.get(var, now) is not value:
                return True
        return False

    async def _wait_for_stream(self, waiting: _Idle) -> None:
        """Wait, idle, until handed a stream (in ``waiting.stream``); return at once, with
        none, when the task is to end."""
        if self._closed:
            return
        idle = self._idle
        if idle is None:
            idle = self._idle = []
        if len(idle) >= self._idle_limit:
            return
        idle.append(waiting)

        def abort(_: Any) -> Abort:
            idle.remove(waiting)
            return Abort.SUCCEEDED

        await wait_task_rescheduled(abort)


class _Idle:
    """A handler task, and the stream it is handed (None while it has none)."""

    __slots__ = ("scope", "stream", "task")

    def __init__(self, stream: MplexStream | None) -> None:
        self.stream = stream
        self.task: Task  # set by the task itself
        #: The task's own scope, in a lent nursery (see ``HandlerTasks``).
        self.scope: trio.CancelScope | None = None


class AsLent:
    """``async with`` over a nursery the program lends: gives it, and leaves it open.
    (Its exit is static, so the block holds no bound method of it.)"""

    __slots__ = ("_nursery",)

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    async def __aenter__(self) -> trio.Nursery:
        return self._nursery

    @staticmethod
    async def __aexit__(*_: object) -> bool:
        return False


#: The nurseries ``serve_listeners`` lends its connections, and what unwraps the groups
#: that leave them (so that ``serve_connection`` records a handler's own group there).
LENT_BY_SERVE_LISTENERS: dict[trio.Nursery | None, Unwrapping] = {}
