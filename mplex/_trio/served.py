"""What ``serve_connection`` keeps of one connection it serves: the handler and its
slots, the handler tasks, and the handler errors logged so far."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import trio

from ._util import ConnectionLog, unprotected
from .errors import ConnectionLost, Unwrapping, ended_under_it
from .handlers import HandlerTasks
from .muxer import Arrivals, Muxer
from .stream import MplexStream

__all__ = ["LOGGED_HANDLER_ERRORS", "ServedConnection", "StreamHandler"]

StreamHandler = Callable[[MplexStream], Awaitable[object]]
"""``async def handler(stream: mplex.MplexStream) -> None``: serves one inbound stream."""

#: Handler errors of one connection logged in full (at ERROR, with a traceback); the
#: rest are counted, and the count is logged when the connection ends.
LOGGED_HANDLER_ERRORS = 5


class ServedConnection:
    """What ``serve_connection`` keeps of one connection: the handler and its slots,
    when the peer was last heard from, and the handler errors logged so far."""

    # fmt: off
    __slots__ = (
        "_unwrapping", "arrivals", "backlogged", "errors_logged", "errors_unlogged", "free_slots", "handler",
        "muxer", "running", "tasks",
    )
    # fmt: on

    def __init__(self, muxer: Muxer, handler: StreamHandler, unwrapping: Unwrapping) -> None:
        self.muxer = muxer
        self.handler = handler
        self._unwrapping = unwrapping
        #: Handlers that may still start: taken as a handler starts, given back by the
        #: handler's task.  A count of our own, not a ``trio.Semaphore``: its methods
        #: and properties are calls of their own, twice per stream.
        self.free_slots = max(1, muxer.config.max_inbound_streams)
        #: The handler tasks (set once they exist).
        self.tasks: HandlerTasks | None = None
        #: Where the streams that arrived wait to be taken (see ``start_on_arrival``).
        self.arrivals: Arrivals | None = None
        #: True when streams were left waiting for a free slot.
        self.backlogged = False
        self.running = 0  # handlers running now
        self.errors_logged = 0
        self.errors_unlogged = 0

    @property
    def log(self) -> ConnectionLog:
        """Where handler errors are logged (made when one is: a log kept would be
        memory every served connection holds)."""
        return ConnectionLog(self.muxer.name)

    def start_waiting(self) -> None:
        """Start a handler for each stream waiting to be accepted, while slots are
        free (nothing once the connection has ended)."""
        tasks, arrivals = self.tasks, self.arrivals
        if tasks is None or arrivals is None:
            return
        while True:
            if not self.free_slots:
                self.backlogged = True  # a handler that returns starts the rest
                return
            stream = arrivals.accept_waiting()
            if stream is None:
                self.backlogged = False
                return
            self.free_slots -= 1
            tasks.start(stream)

    @unprotected  # the program's handler, called from the handler tasks' protected code
    async def serve_stream(self, stream: MplexStream) -> None:
        self.running += 1
        try:
            await self.handler(stream)
        except Exception as exc:
            if ended_under_it(exc):  # the peer's doing, not the handler's error
                self.log.debug("stream %d (%s): handler ended: %s", stream.id, stream.name, exc)
            elif self.errors_logged < LOGGED_HANDLER_ERRORS:
                self.errors_logged += 1
                self.log.exception("stream %d (%s): the handler raised", stream.id, stream.name)
            else:
                self.errors_unlogged += 1
            stream.reset()
        except BaseException as exc:  # KeyboardInterrupt, say: it ends the server
            self._unwrapping.raised(exc)
            raise
        else:
            stream.close()  # the task ends here: no checkpoint needed to close
        finally:
            self.running -= 1
            self.free_slots += 1
            if self.backlogged:  # streams that found no free slot
                self.start_waiting()

    async def close_when_idle(self, idle_timeout: float, scope: trio.CancelScope) -> None:
        """Close the connection once nothing has moved for ``idle_timeout`` seconds
        (looked at four times per ``idle_timeout``).  Progress is what counts, not
        presence: a byte that arrived from the peer, a byte the transport took from us,
        or a handler doing work of its own.  A handler waiting on the peer (in
        ``receive_some``, or in ``send_all`` to a peer that stopped reading) is no
        progress, so a peer that opens a stream and falls silent cannot hold its
        connection (and a ``max_connections`` place) for ever."""
        moved: tuple[int, int] | None = None
        quiet_since = trio.current_time()
        with scope:  # cancelled when the connection has ended
            while True:
                await trio.sleep(idle_timeout / 4)
                stats = self.muxer.stats
                now, seen = trio.current_time(), (stats.bytes_received, stats.bytes_sent)
                working = self.running > stats.receivers_waiting + stats.senders_waiting
                if seen != moved or working:
                    moved, quiet_since = seen, now
                elif now - quiet_since >= idle_timeout:
                    self.log.info(
                        "closing the connection: nothing moved for %g s (idle_timeout)", idle_timeout
                    )
                    with contextlib.suppress(ConnectionLost):  # kept as the muxer's end_error
                        await self.muxer.aclose()
                    return

    def log_summary(self) -> None:
        if self.errors_unlogged:
            self.log.error(
                "%d more handler errors on this connection were not logged (the first %d were)",
                self.errors_unlogged,
                LOGGED_HANDLER_ERRORS,
            )
