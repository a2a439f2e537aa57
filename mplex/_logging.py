"""Log lines that say which connection they are about.

Everything goes to the ``mplex`` logger.  What remote input causes is logged at DEBUG
or INFO, never WARNING: Python prints WARNING and above to stderr in every program
that never configured logging, which would make one line per port scan.
"""

from __future__ import annotations

import itertools
import logging
import ssl
from typing import Any

import trio

from ._engine.decoder import Decoder, RawFrame
from ._engine.wire import MAX_MESSAGE_SIZE, Flag

__all__ = ["ConnectionLog", "connection_label", "describe", "explain", "logger", "root_cause"]

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
    """``error`` and, in plain words, the root of its cause chain, for a log line or a
    message: "the transport failed while receiving: TLS: certificate verify failed
    (unable to get local issuer certificate)" rather than the ``BrokenResourceError``
    in between."""
    if error is None:
        return "still running"
    root = root_cause(error)
    text = str(error) or type(error).__name__
    if root is error:
        return text
    detail = explain(root)
    return text if (str(root) and str(root) in text) or text.endswith(detail) else f"{text}: {detail}"


def root_cause(error: BaseException) -> BaseException:
    """The last exception of ``error``'s cause chain (the ``ssl`` error under trio's
    ``BrokenResourceError``, say); ``error`` itself if it has no cause."""
    root, seen = error, {id(error)}
    while root.__cause__ is not None and id(root.__cause__) not in seen:
        root = root.__cause__
        seen.add(id(root))
    return root


def explain(exc: BaseException) -> str:
    """One exception in plain words: TLS errors by what failed, OS errors by their
    ``strerror``, anything else as ``Type: message``."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or "").replace("_", " ").lower()
        return f"TLS: {reason}" if reason else f"TLS: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
