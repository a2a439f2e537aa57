"""Protection against ``KeyboardInterrupt`` for the library's own code.

A Ctrl-C makes trio raise ``KeyboardInterrupt`` at whatever line is running, unless that
code is protected; then trio delivers it to the main task at its next checkpoint.
trio's own primitives are protected so that their bookkeeping never stops half done.
The muxer's tasks and the methods of its streams and of ``Muxer`` are protected for
the same reason: an interrupt between a task's noting that it waits and its waiting
leaves a task to be woken after it ended, and trio then fails with
``TrioInternalError``.

Since trio 0.28 protection marks the function's code and costs nothing per call.
trio 0.27 wraps each call instead (about a microsecond); there ``protected_if_free``
leaves ``send_nowait``, which a program may call millions of times, unprotected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from trio.lowlevel import disable_ki_protection, enable_ki_protection

__all__ = ["PROTECTION_IS_FREE", "protected", "protected_if_free", "unprotected"]

F = TypeVar("F", bound=Callable[..., Any])


def _probe() -> None:
    """A function for trio to mark, to find how it protects."""


#: True where trio protects a function by marking its code (0.28 and later), not
#: by wrapping it.
PROTECTION_IS_FREE: bool = enable_ki_protection(_probe) is _probe


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
