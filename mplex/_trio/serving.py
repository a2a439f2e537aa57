"""Serving mplex: a muxer per connection and a handler per inbound stream.

``serve_tcp`` and ``serve_listeners`` follow ``trio.serve_tcp`` and
``trio.serve_listeners``; ``serve_connection`` is the part that runs one connection.
However a peer behaves (garbage, resets, a dropped connection) and whatever a handler
raises, only that stream or that connection ends: the server goes on, and a log line
on the ``mplex`` logger says why each one ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import trio

from .._engine.config import Config
from .._engine.multistream import NegotiationError
from .._engine.wire import PROTOCOL_ID
from ._util import (
    checked_config,
    checked_handler,
    logger,
    protected,
    require_trio,
)
from .errors import ConnectionLost, Unwrapping
from .handlers import LENT_BY_SERVE_LISTENERS, AsLent, HandlerTasks
from .muxer import Muxer, start_on_arrival
from .select import accept_protocol
from .served import LOGGED_HANDLER_ERRORS, ServedConnection, StreamHandler

__all__ = [
    "IDLE_HANDLER_TASKS",
    "LOGGED_HANDLER_ERRORS",
    "NEGOTIATION_TIMEOUT",
    "StreamHandler",
    "serve_connection",
    "serve_listeners",
    "serve_tcp",
]

#: Seconds a client may take to agree on ``/mplex/6.7.0`` when ``serve_*`` is called
#: with ``negotiate=True`` (``mplex.NEGOTIATION_TIMEOUT``).
NEGOTIATION_TIMEOUT = 10.0


@protected  # the muxer's writer; handlers run in handler tasks, unprotected
async def serve_connection(
    handler: StreamHandler,
    transport: trio.abc.Stream,
    *,
    config: Config | None = None,
    negotiate: bool = False,
    idle_timeout: float | None = None,
    handler_nursery: trio.Nursery | None = None,
) -> Muxer | None:
    """Serve one connection until it ends; return its (ended) muxer.

    Runs ``handler(stream)`` for every stream the peer opens as in a task of its own: in a
    fresh copy of the caller's context, in the connection's nursery of handlers (or in
    ``handler_nursery``, below).  A task whose handler returned serves the next stream
    (up to ``IDLE_HANDLER_TASKS`` wait for one), as starting and ending a task is a
    large part of a short request's cost.
    When a handler returns, its stream is closed (as ``aclose`` does); when it raises, its
    stream is reset, and the error is logged (at DEBUG if it is the stream or the
    connection ending under it, alone or in an exception group of the handler's own
    nursery, with a traceback at ERROR otherwise, for the first
    ``LOGGED_HANDLER_ERRORS`` of a connection, then only counted): the connection and
    its other streams go on.

    At most ``Config.max_inbound_streams`` handlers run at once; a handler counts until
    it returns, even after the peer reset its stream, and further streams wait in the
    accept backlog meanwhile (``Config.accept_backlog``; beyond it they are refused).
    When the connection ends, handlers still running get ``Config.close_timeout``
    seconds to return, then are cancelled.  With ``idle_timeout`` (seconds), the
    connection is closed once nothing has moved for that long: no byte arrived from
    the peer or left for it, and every handler still running waits on the peer.
    Returns once the connection has ended, for whatever reason (``Muxer.end_reason``
    says which), and every handler has returned.

    ``handler_nursery``, as ``trio.serve_listeners`` takes one: the handlers (and the
    muxer's writer task) run in that nursery, which must stay open while the
    connection is served, instead of in a nursery of the connection's own, which an
    idle served connection would hold.  The handlers still end with the connection as
    above, each in a cancel scope of its own (which costs about half what a nursery
    does); if ``serve_connection`` is cancelled, it cancels them and returns without
    waiting (the nursery does).  What a handler lets out (a ``KeyboardInterrupt``, say)
    goes to that nursery.  ``serve_tcp`` and ``serve_listeners`` lend theirs.

    With ``negotiate=True`` it first agrees on ``/mplex/6.7.0`` with multistream-select,
    as libp2p peers do on a raw connection; a peer that fails to within
    ``mplex.NEGOTIATION_TIMEOUT`` seconds is disconnected and None returned.

    A ``handler`` that is not an async function, a ``transport`` that is not a
    ``trio.abc.Stream`` or a ``config`` that is not a ``Config`` raise ``TypeError`` at
    once.  An exception that leaves (a handler's ``KeyboardInterrupt``, say) leaves as
    itself, not wrapped in an ``ExceptionGroup``.
    """
    handler = checked_handler(handler)
    muxer = Muxer(transport, config)  # checks the transport and the config
    _check_idle_timeout(idle_timeout)
    if handler_nursery is not None and not isinstance(handler_nursery, trio.Nursery):
        raise TypeError(
            f"handler_nursery must be a trio.Nursery or None, not {type(handler_nursery).__name__}"
        )
    require_trio("mplex.serve_connection()")
    # (One coroutine, not a checking one around a serving one: a served connection
    # holds this frame for its whole life.)
    with Unwrapping() as unwrapping:
        if negotiate and not await _negotiated(muxer.transport_stream):
            return None
        lent = handler_nursery is not None
        # A group a handler raises is the program's, not one to unwrap: recorded where
        # it will leave, here or from the lent nursery of ``serve_listeners``.
        connection = ServedConnection(
            muxer, handler, LENT_BY_SERVE_LISTENERS.get(handler_nursery, unwrapping)
        )
        async with trio.open_nursery() if handler_nursery is None else AsLent(handler_nursery) as handlers:
            tasks = HandlerTasks(handlers, connection, IDLE_HANDLER_TASKS, lent=lent)
            connection.tasks = tasks
            # Streams start their handlers as the reader hands them over, while slots are
            # free; a handler that returns starts those that waited for its slot.  So no
            # task of ours waits in accept_stream, and this one runs the muxer itself.
            connection.arrivals = start_on_arrival(muxer, connection, handlers)
            # (Only with an idle timeout: a scope held for a served connection's life
            # is memory its idle cost counts.)
            watch = None
            if idle_timeout is not None:
                watch = trio.CancelScope()
                handlers.start_soon(connection.close_when_idle, idle_timeout, watch)
            try:
                await muxer.run()
            except ConnectionLost:  # the TLS handshake failed: the muxer logged why
                pass
            except BaseException:  # cancelled: so are the handlers, as in a nursery of ours
                tasks.cancel()
                raise
            finally:  # (cancelled too: these are cycles through the connection)
                start_on_arrival(muxer, None)
                connection.tasks = connection.arrivals = None
                tasks.close()
                if watch is not None:
                    watch.cancel()
            # The connection has ended: handlers still running get close_timeout.
            deadline = trio.current_time() + muxer.config.close_timeout
            if lent:
                await tasks.wait_ended(deadline)
            else:
                handlers.cancel_scope.deadline = deadline
        connection.log_summary()
        return muxer


#: Handler tasks of one connection that, their handler returned, wait for the
#: connection's next stream instead of ending (the others end): starting and ending a
#: task is a large part of what serving a short request costs.  An idle task holds
#: about 2.4 KB until the connection ends.
IDLE_HANDLER_TASKS = 128


def _check_idle_timeout(idle_timeout: float | None) -> None:
    if idle_timeout is not None and (
        isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float) or not idle_timeout > 0
    ):
        raise ValueError(f"idle_timeout must be a positive number of seconds or None, not {idle_timeout!r}")


async def serve_listeners(
    handler: StreamHandler,
    listeners: Sequence[trio.abc.Listener[Any]],
    *,
    config: Config | None = None,
    negotiate: bool = False,
    idle_timeout: float | None = None,
    max_connections: int | None = None,
    task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept connections on ``listeners`` forever, serving each with
    ``serve_connection(handler, connection, config=config, negotiate=negotiate,
    idle_timeout=idle_timeout)``.

    Any ``trio.abc.Listener`` of ``trio.abc.Stream`` works: TCP, ``trio.SSLListener``,
    a Unix socket.  No connection, peer or handler can stop the others.  With
    ``max_connections``, a connection that arrives while that many are being served
    is closed at once (logged at INFO).  Started with ``nursery.start``, it returns the
    listeners, like ``trio.serve_listeners``.  Bad arguments raise at once, and what
    leaves (a ``KeyboardInterrupt``, say) leaves as itself, as from ``serve_connection``.
    """
    handler = checked_handler(handler)
    config = checked_config(config)
    _check_idle_timeout(idle_timeout)
    if max_connections is not None and (
        isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1
    ):
        raise ValueError(f"max_connections must be a positive int or None, not {max_connections!r}")
    serving = 0

    async def serve_one(transport: trio.abc.Stream) -> None:
        nonlocal serving
        if max_connections is not None and serving >= max_connections:
            logger.info("connection refused: %d connections are being served (max_connections)", serving)
            await trio.aclose_forcefully(transport)
            return
        serving += 1
        try:
            await serve_connection(
                handler,
                transport,
                config=config,
                negotiate=negotiate,
                idle_timeout=idle_timeout,
                handler_nursery=handlers,
            )
        except Exception:  # a bug of ours: log it and keep serving the others
            logger.exception("internal error while serving a connection")
        except BaseException as exc:  # a handler's KeyboardInterrupt, say
            unwrapping.raised(exc)
            raise
        finally:
            serving -= 1

    require_trio("mplex.serve_listeners()")
    with Unwrapping() as unwrapping:
        # One nursery for every connection's task and its handlers (``handler_nursery``):
        # a nursery per connection is memory each idle connection would hold.
        async with trio.open_nursery() as handlers:
            LENT_BY_SERVE_LISTENERS[handlers] = unwrapping
            try:
                await trio.serve_listeners(
                    serve_one, list(listeners), handler_nursery=handlers, task_status=task_status
                )
            finally:
                del LENT_BY_SERVE_LISTENERS[handlers]
    raise AssertionError("trio.serve_listeners returned")  # it serves until cancelled


async def serve_tcp(
    handler: StreamHandler,
    port: int,
    *,
    host: str | bytes | None = None,
    backlog: int | None = None,
    config: Config | None = None,
    negotiate: bool = False,
    idle_timeout: float | None = None,
    max_connections: int | None = None,
    task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Listen on TCP ``port`` (0 picks a free one) and serve mplex forever: see
    ``serve_listeners`` (``idle_timeout`` and ``max_connections`` too).  ``host`` and
    ``backlog`` are ``trio.open_tcp_listeners``'s.

    ``await nursery.start(mplex.serve_tcp, handler, 0)`` returns the listeners, from
    which ``listeners[0].socket.getsockname()`` gives the port.
    """
    handler = checked_handler(handler)
    config = checked_config(config)
    _check_idle_timeout(idle_timeout)
    require_trio("mplex.serve_tcp()")
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=backlog)
    await serve_listeners(
        handler,
        listeners,
        config=config,
        negotiate=negotiate,
        idle_timeout=idle_timeout,
        max_connections=max_connections,
        task_status=task_status,
    )


async def _negotiated(transport: trio.abc.Stream) -> bool:
    try:
        with trio.fail_after(NEGOTIATION_TIMEOUT):
            await accept_protocol(transport, [PROTOCOL_ID])
    except (trio.TooSlowError, NegotiationError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        logger.info("connection refused: multistream-select failed: %s", str(exc) or type(exc).__name__)
        await trio.aclose_forcefully(transport)
        return False
    return True
