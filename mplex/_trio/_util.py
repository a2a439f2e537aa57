"""The trio layer's small helpers: argument checks, idleness, protection from
``KeyboardInterrupt``, and log lines that name their connection.

**Argument checks** (``checked_*``, ``require_trio``) run before anything starts, so
that a wrong argument fails at once with a message naming it, not later as an
``AttributeError`` deep in a task.

**Idleness** (``wait_for_idle``): the writer gathers a busy program's frames until every
other task is blocked, and the reader waits for the same moment after lending its read
turn over the generic path.  trio offers that only as ``trio.testing.
wait_all_tasks_blocked`` (public API); this is the one place that imports it.  Its cost
is program-wide only while a task waits in it.

**Protection** (``protected``): a Ctrl-C makes trio raise ``KeyboardInterrupt`` at
whatever line runs, unless that code is protected; an interrupt between a task's
noting that it waits and its waiting leaves a task to be woken after it ended, and
trio then fails with ``TrioInternalError``.  So the muxer's tasks and the methods of
its streams are protected, as trio's own primitives are.  Since trio 0.28 that marks
the code and costs nothing per call; trio 0.27 wraps each call (about a microsecond),
so there ``protected_if_free`` leaves ``send_nowait`` unprotected.

**Logging**: everything goes to the ``mplex`` logger, with the connection's label in
front.  What remote input causes is logged at DEBUG or INFO, never WARNING: Python
prints WARNING and above to stderr in every program that never configured logging,
which would make one line per port scan.  ``FrameTrace`` logs every frame at DEBUG.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import logging
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
from trio.lowlevel import disable_ki_protection, enable_ki_protection
from trio.testing import wait_all_tasks_blocked

from .._engine.config import Config

__all__ = [
    "NO_CONTEXT",
    "PROTECTION_IS_FREE",
    "Buffer",
    "ConnectionLog",
    "byte_buffer",
    "call_in",
    "checked_config",
    "checked_handler",
    "checked_transport",
    "connection_label",
    "describe",
    "explain",
    "logger",
    "protected",
    "protected_if_free",
    "require_trio",
    "root_cause",
    "unprotected",
    "wait_for_idle",
]


#: What a transport must have when it is not a ``trio.abc.Stream`` subclass.
_STREAM_METHODS = ("send_all", "receive_some", "aclose")


class _NoContext:
    """A context manager that does nothing.  Its methods are static, so a ``with``
    block holds no bound method of it (the reader's idles in two such blocks)."""

    __slots__ = ()

    @staticmethod
    def __enter__() -> None:
        return None

    @staticmethod
    def __exit__(*_: object) -> None:
        return None


#: The context of code that needs none: one for the whole library, not one made per
#: entry that a waiting task would hold.
NO_CONTEXT: contextlib.AbstractContextManager[None] = _NoContext()


def call_in(context: contextvars.Context, function: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """``function(*args, **kwargs)`` in ``context``, a task's own: called directly when
    it is the running task's, which is entered now (``Context.run`` would refuse it)."""
    if context is trio.lowlevel.current_task().context:
        function(*args, **kwargs)
    else:
        context.run(function, *args, **kwargs)


def checked_transport(transport: object, name: str = "transport_stream") -> trio.abc.Stream:
    """``transport`` if it is a ``trio.abc.Stream`` (or has its three methods, as
    trio's own wrappers accept); ``TypeError`` otherwise."""
    if isinstance(transport, trio.abc.Stream) or all(
        callable(getattr(transport, method, None)) for method in _STREAM_METHODS
    ):
        return transport  # type: ignore[return-value]
    raise TypeError(
        f"{name} must be a trio.abc.Stream (trio.SocketStream, trio.SSLStream, ...), "
        f"not {type(transport).__name__}"
    )


_DEFAULT_CONFIG = Config()


def checked_config(config: object) -> Config:
    """``config``, or the defaults for None; ``TypeError`` for anything but a ``Config``."""
    if config is None:
        return _DEFAULT_CONFIG  # (frozen: one for every connection, not one each)
    if not isinstance(config, Config):
        hint = " (build one with mplex.Config(**settings))" if isinstance(config, dict) else ""
        raise TypeError(f"config must be an mplex.Config or None, not {type(config).__name__}{hint}")
    return config


def checked_handler(handler: object) -> Any:
    """``handler`` if it is an async function (``async def``, a ``functools.partial`` of
    one, or an object whose ``__call__`` is one); ``TypeError`` otherwise."""
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004  (an async __call__ method)
    ):
        return handler
    what = type(handler).__name__ if not callable(handler) else f"the plain function {handler!r}"
    raise TypeError(f"handler must be an async function (async def handler(stream): ...), not {what}")


#: What ``send_all`` and ``send_nowait`` take.
Buffer = bytes | bytearray | memoryview


def byte_buffer(data: object) -> Buffer:
    """``data``, any object with the buffer protocol, as a flat buffer whose ``len()`` is
    its byte count (as ``trio.SocketStream.send_all`` takes it); ``TypeError`` otherwise."""
    if isinstance(data, bytes | bytearray):
        return data
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    if not view.c_contiguous:
        return view.tobytes()
    if view.ndim == 1 and view.itemsize == 1:
        return view
    try:
        return view.cast("B")
    except TypeError:  # a shape cast() cannot flatten (a 0-d view, say)
        return view.tobytes()


def require_trio(what: str) -> None:
    """Raise a ``RuntimeError`` that says so when ``what`` is used outside ``trio.run``
    (from asyncio, say), instead of trio's internal ``AttributeError``."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise RuntimeError(
            f"{what} needs trio: it was called outside trio.run() (from asyncio, or with no "
            "event loop running); mplex is a trio library"
        ) from None


#: ``await wait_for_idle()`` returns once every other task is blocked.
wait_for_idle: Callable[[], Awaitable[None]] = wait_all_tasks_blocked


F = TypeVar("F", bound=Callable[..., Any])


def _probe() -> None:
    """A function for trio to mark, to find how it protects."""


#: True where trio protects a function by marking its code (0.28 and later), not
#: by wrapping it.
PROTECTION_IS_FREE: bool = enable_ki_protection(_probe) is _probe


def forget_deleted_locals() -> None:
    """Make the caller's frame let go of the locals it has deleted, on trio before
    0.28.  That trio keeps a copy of a task's first coroutine's locals, and of a
    protected coroutine's, in the frame's locals dict (beside its ``KeyboardInterrupt``
    marker), where a deleted argument lives on; CPython up to 3.12 brings that dict up
    to date when it is read.  Nothing on later trio, which keeps no copy (and where a
    read would make one)."""
    if not PROTECTION_IS_FREE:
        sys._getframe(1).f_locals  # noqa: B018 (the read is the update)


def protected(function: F) -> F:
    """``function`` (an async or plain function or method) never has a
    ``KeyboardInterrupt`` raised inside it or in what it calls."""
    return enable_ki_protection(function)


def protected_if_free(function: F) -> F:
    """Like ``protected`` where that costs nothing per call; as it is otherwise."""
    return enable_ki_protection(function) if PROTECTION_IS_FREE else function


def unprotected(function: F) -> F:
    """``function`` and what it calls (the program's code: a handler) can be interrupted
    by ``KeyboardInterrupt`` however protected its callers are."""
    return disable_ki_protection(function)


def drop_tracebacks(*errors: BaseException | None) -> None:
    """Drop the tracebacks of ``errors`` and of their causes.

    A traceback holds its frames, their locals, and (on CPython, once a frame has
    finished) each frame's caller: the reader, the writer, a receiving task, and so
    this connection.  A frame that holds the exception it raised (``contextlib``'s
    do) makes that a cycle, which reference counting alone never frees; clearing
    the frames instead is not safe, as it would close a suspended coroutine in
    them.  The exceptions themselves, their messages and their chains stay.
    """
    pending, seen = list(errors), set()
    while pending:
        error = pending.pop()
        if error is not None and id(error) not in seen:
            seen.add(id(error))
            error.__traceback__ = None
            pending.append(error.__cause__)


logger = logging.getLogger("mplex")

_connection_numbers = itertools.count(1)


class ConnectionLog:
    """The ``mplex`` logger, with a connection's label in front of every message (and
    as the record's ``connection`` attribute).

    Not a ``logging.LoggerAdapter``: an adapter keeps a dict of its own and the
    prefixed label, which would cost every connection memory for lines it mostly
    never logs."""

    __slots__ = ("_label",)

    def __init__(self, label: str) -> None:
        self._label = label

    def log(self, level: int, msg: str, *args: object) -> None:
        self._log(level, msg, args, False)

    def debug(self, msg: str, *args: object) -> None:
        self._log(logging.DEBUG, msg, args, False)

    def info(self, msg: str, *args: object) -> None:
        self._log(logging.INFO, msg, args, False)

    def error(self, msg: str, *args: object) -> None:
        self._log(logging.ERROR, msg, args, False)

    def exception(self, msg: str, *args: object) -> None:
        """At ERROR, with the traceback of the exception being handled."""
        self._log(logging.ERROR, msg, args, True)

    def _log(self, level: int, msg: str, args: tuple[object, ...], exc_info: bool) -> None:
        if logger.isEnabledFor(level):
            label = self._label
            # stacklevel 3: the line is the caller's of debug(), info(), ...
            logger.log(
                level, f"[{label}] {msg}", *args, exc_info=exc_info, extra={"connection": label}, stacklevel=3
            )


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
