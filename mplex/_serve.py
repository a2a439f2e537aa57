"""Serving mplex: a muxer per connection and a handler per inbound stream.

``serve_tcp`` and ``serve_listeners`` follow ``trio.serve_tcp`` and
``trio.serve_listeners``; ``serve_connection`` is the part that runs one connection.
However a peer behaves (garbage, resets, a dropped connection) and whatever a handler
raises, only that stream or that connection ends: the server goes on, and a log line
on the ``mplex`` logger says why each one ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import trio

from ._codec import PROTOCOL_ID
from ._config import Config
from ._errors import MuxerClosed
from ._logging import ConnectionLog, logger
from ._multistream import NegotiationError
from ._muxer import Muxer
from ._negotiation import accept_protocol
from ._stream import MplexStream

__all__ = ["StreamHandler", "serve_connection", "serve_listeners", "serve_tcp"]

StreamHandler = Callable[[MplexStream], Awaitable[object]]
"""``async def handler(stream: mplex.MplexStream) -> None``: serves one inbound stream."""

#: Seconds a client may take to agree on ``/mplex/6.7.0`` when ``negotiate=True``.
NEGOTIATION_TIMEOUT = 10.0


async def serve_connection(
    transport: trio.abc.Stream,
    handler: StreamHandler,
    *,
    config: Config | None = None,
    negotiate: bool = False,
) -> Muxer | None:
    """Serve one connection until it ends; return its (ended) muxer.

    Runs ``handler(stream)`` in a task of its own for every stream the peer opens.
    When a handler returns, its stream is closed (``aclose``); when it raises, its
    stream is reset, and the error is logged (at DEBUG if it is the stream or the
    connection ending under it, with a traceback at ERROR otherwise): the connection
    and its other streams go on.  Returns once the connection has ended, for whatever
    reason (``Muxer.end_reason`` says which), and every handler has returned.

    With ``negotiate=True`` it first agrees on ``/mplex/6.7.0`` with multistream-select,
    as libp2p peers do on a raw connection; a peer that fails to within
    ``NEGOTIATION_TIMEOUT`` seconds is disconnected and None returned.
    """
    if negotiate and not await _negotiated(transport):
        return None
    muxer = Muxer(transport, config)
    log = ConnectionLog(muxer.name)
    async with trio.open_nursery() as nursery:
        await nursery.start(muxer.run)
        async for stream in muxer:
            nursery.start_soon(_serve_stream, handler, stream, log)
    return muxer


async def serve_listeners(
    handler: StreamHandler,
    listeners: Sequence[trio.abc.Listener[Any]],
    *,
    config: Config | None = None,
    negotiate: bool = False,
    task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Accept connections on ``listeners`` forever, serving each with
    ``serve_connection(connection, handler, config=config, negotiate=negotiate)``.

    Any ``trio.abc.Listener`` of ``trio.abc.Stream`` works: TCP, ``trio.SSLListener``,
    a Unix socket.  No connection, peer or handler can stop the others.  Started
    with ``nursery.start``, it returns the listeners, like ``trio.serve_listeners``.
    """

    async def serve_one(transport: trio.abc.Stream) -> None:
        try:
            await serve_connection(transport, handler, config=config, negotiate=negotiate)
        except Exception:  # a bug of ours: log it and keep serving the others
            logger.exception("internal error while serving a connection")

    await trio.serve_listeners(serve_one, list(listeners), task_status=task_status)


async def serve_tcp(
    handler: StreamHandler,
    port: int,
    *,
    host: str | bytes | None = None,
    backlog: int | None = None,
    config: Config | None = None,
    negotiate: bool = False,
    task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Listen on TCP ``port`` (0 picks a free one) and serve mplex forever: see
    ``serve_listeners``.  ``host`` and ``backlog`` are ``trio.open_tcp_listeners``'s.

    ``await nursery.start(mplex.serve_tcp, handler, 0)`` returns the listeners, from
    which ``listeners[0].socket.getsockname()`` gives the port.
    """
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=backlog)
    await serve_listeners(handler, listeners, config=config, negotiate=negotiate, task_status=task_status)


async def _negotiated(transport: trio.abc.Stream) -> bool:
    try:
        with trio.fail_after(NEGOTIATION_TIMEOUT):
            await accept_protocol(transport, [PROTOCOL_ID])
    except (trio.TooSlowError, NegotiationError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        logger.info("connection refused: multistream-select failed: %s", str(exc) or type(exc).__name__)
        await trio.aclose_forcefully(transport)
        return False
    return True


async def _serve_stream(handler: StreamHandler, stream: MplexStream, log: ConnectionLog) -> None:
    try:
        await handler(stream)
    except (trio.BrokenResourceError, MuxerClosed) as exc:  # the stream or connection ended under it
        log.debug("stream %d (%s): handler ended: %s", stream.id, stream.name, exc)
        stream.reset()
    except Exception:
        log.exception("stream %d (%s): the handler raised", stream.id, stream.name)
        stream.reset()
    else:
        await stream.aclose()
