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

from ._codec import MAX_MESSAGE_SIZE, Flag
from ._decoder import Decoder, RawFrame

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

    def trace(self, direction: str, frames: list[RawFrame]) -> None:
        """Log frames at DEBUG (received Message frames of one stream arrive merged)."""
        for header, body in frames:
            flag = header & 7
            name = Flag(flag).name if flag != 7 else "flag 7"
            side = "acceptor" if flag & 1 else "opener"
            self.debug("%s stream %d (%s) %s %d bytes", direction, header >> 3, side, name, len(body))

    def trace_sent(self, data: bytearray, skip: int) -> None:
        """Trace the frames in ``data`` after its first ``skip`` bytes (the rest of a
        frame that a direct write began; -1: not known).  Never raises: the muxer's
        writer must not fail because of its own logging."""
        try:
            if skip < 0:
                self.debug("send %d bytes (resuming frames written directly)", len(data))
                return
            if skip:
                self.debug("send %d bytes (the rest of a frame written directly)", skip)
            self.trace("send", Decoder(MAX_MESSAGE_SIZE).feed_raw(memoryview(data)[skip:]))
        except Exception as exc:
            self.debug("send %d bytes (not traced: %r)", len(data), exc)


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
