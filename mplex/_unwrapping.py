"""Exceptions as themselves: what leaves a public ``async with`` or ``serve_*`` is the
exception that was raised, not trio's nursery group around it.

trio wraps whatever crosses a nursery in an ``ExceptionGroup`` (``strict_exception_groups``,
trio's default since 0.25), so without this an ``except mplex.ConnectionLost:`` around
``async with mplex.open_muxer(...)`` would never match, and a ``ValueError`` of the
program's own would arrive wrapped.  The nurseries are ours, an implementation detail
the caller never asked for; so where one exception is all there is, it leaves as
itself.  Several at once still leave as a group: none of them may be lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["unwrap", "unwrapped"]


def unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What ``group`` carries, through every wrapper that holds just one exception: a
    single exception, or the first group (the program's own, or trio's) of several."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


@contextlib.contextmanager
def unwrapped() -> Iterator[None]:
    """Re-raise an exception group as what it carries (``unwrap``), with that
    exception's own traceback, cause and context; a group of several, as it is."""
    try:
        yield
    except BaseExceptionGroup as group:
        inner = unwrap(group)
        if inner is group:
            raise
        context = inner.__context__
        try:
            raise inner
        finally:
            # Raising inside ``except`` would make the group its context; keep its own.
            inner.__context__ = context
            del inner, context, group
