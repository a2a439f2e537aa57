"""Checks of what the program hands the public API, made before anything starts, so
that a wrong argument fails at once with a message naming it, not later as an
``AttributeError`` deep in a task."""

from __future__ import annotations

import inspect
from typing import Any

import trio

from ._engine.config import Config

__all__ = ["checked_config", "checked_handler", "checked_transport", "require_trio"]

#: What a transport must have when it is not a ``trio.abc.Stream`` subclass.
_STREAM_METHODS = ("send_all", "receive_some", "aclose")


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


def checked_config(config: object) -> Config:
    """``config``, or the defaults for None; ``TypeError`` for anything but a ``Config``."""
    if config is None:
        return Config()
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
