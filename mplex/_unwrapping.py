"""Exceptions as themselves: what leaves a public ``async with`` or ``serve_*`` is the
exception that was raised, not trio's nursery group around it.

trio wraps whatever crosses a nursery in an ``ExceptionGroup`` (``strict_exception_groups``,
trio's default since 0.25), so without this an ``except mplex.ConnectionLost:`` around
``async with mplex.open_muxer(...)`` would never match, and a ``ValueError`` of the
program's own would arrive wrapped.  The nurseries are ours, an implementation detail
the caller never asked for, so the groups they add are removed, and only those: a
group the program raised itself (its own ``ExceptionGroup``, or one of its own
nurseries) is recorded where it enters ours (``Unwrapping.raised``) and leaves as it
was raised.  Several exceptions at once still leave as a group: none may be lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["Unwrapping", "unwrapped"]


class Unwrapping:
    """The groups the program raised into our nurseries: where unwrapping stops."""

    __slots__ = ("_programs",)

    def __init__(self) -> None:
        self._programs: list[BaseExceptionGroup[BaseException]] = []

    def raised(self, exc: BaseException) -> None:
        """The program raised ``exc`` into one of our nurseries (only a group needs
        recording: unwrapping never goes inside anything else)."""
        if isinstance(exc, BaseExceptionGroup):
            self._programs.append(exc)

    def unwrap(self, group: BaseExceptionGroup[BaseException]) -> BaseException:
        """What ``group`` carries, through each wrapper of ours that holds just one
        exception: down to a single exception, a group the program raised, or the
        first group of several."""
        inner: BaseException = group
        while isinstance(inner, BaseExceptionGroup):
            own = self._programs_group(inner)
            if own is not None:
                return own
            if len(inner.exceptions) != 1:
                break
            inner = inner.exceptions[0]
        return inner

    def _programs_group(self, group: BaseExceptionGroup[BaseException]) -> BaseException | None:
        """The group the program raised that ``group`` is, if any.  trio's cancel scopes
        rebuild groups on their way out (``split(Cancelled)``), so a group is also the
        program's when it has its message and only its leaves: the original then, or
        the copy if trio took leaves (``Cancelled``) out of it."""
        if not self._programs:
            return None
        leaves = _leaves(group)
        for own in self._programs:
            if own is group:
                return own
            if own.message == group.message:
                own_leaves = _leaves(own)
                if all(any(leaf is mine for mine in own_leaves) for leaf in leaves):
                    return own if len(own_leaves) == len(leaves) else group
        return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions inside ``group`` that are not groups, at any depth."""
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


@contextlib.contextmanager
def unwrapped() -> Iterator[Unwrapping]:
    """Re-raise an exception group as what it carries (``Unwrapping.unwrap``), with that
    exception's own traceback, cause and context; otherwise, as it is."""
    unwrapping = Unwrapping()
    try:
        yield unwrapping
    except BaseExceptionGroup as group:
        inner = unwrapping.unwrap(group)
        if inner is group:
            raise
        context = inner.__context__
        try:
            raise inner
        finally:
            # Raising inside ``except`` would make the group its context; keep its own.
            inner.__context__ = context
            del inner, context, group
