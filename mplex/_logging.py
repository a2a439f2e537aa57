"""Log lines that say which connection they are about.

Everything goes to the ``mplex`` logger.  What remote input causes is logged at DEBUG
or INFO, never WARNING: Python prints WARNING and above to stderr in every program
that never configured logging, which would make one line per port scan.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import trio

__all__ = ["ConnectionLog", "connection_label", "describe", "logger"]

logger = logging.getLogger("mplex")

_connection_numbers = itertools.count(1)


class ConnectionLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The ``mplex`` logger, with a connection's label in front of every message."""

    def __init__(self, label: str) -> None:
        super().__init__(logger, {"connection": label})
        self._prefix = f"[{label}] "

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"{self._prefix}{msg}", kwargs


def connection_label(transport: trio.abc.Stream) -> str:
    """``#N`` (N counts the connections of this process) and the peer's address when
    the transport is a socket, or TLS over one."""
    label = f"#{next(_connection_numbers)}"
    inner: object = transport
    while isinstance(inner, trio.SSLStream):
        inner = inner.transport_stream
    if not isinstance(inner, trio.SocketStream):
        return label
    try:
        address = inner.socket.getpeername()
    except OSError:
        return label
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), address[1]
        return f"{label} [{host}]:{port}" if ":" in host else f"{label} {host}:{port}"
    return f"{label} {address}"


def describe(error: BaseException | None) -> str:
    """``error`` and its cause, for a log line."""
    if error is None:
        return "still running"
    cause = error.__cause__
    return f"{error} ({cause!r})" if cause is not None else str(error)
