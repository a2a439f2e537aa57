"""One direction's busy guard, trio's ``ConflictDetector`` idiom (``ConflictGuard``).

trio's own streams raise ``trio.BusyResourceError`` when two tasks use one direction
at once (two ``send_all``, two ``receive_some``): an operation that may yield runs
inside ``with guard:``, and entering a guard that is held raises.  trio keeps its
detector private, so a stream has this one of its own, with the same behaviour.  A
call that never yields (``send_nowait``) only looks at ``held``: no other task can
run while it does.  ``send_all``, called millions of times by a program of small
writes, does what ``with`` does inline (look, hold, let go in ``finally``).
"""

from __future__ import annotations

from types import TracebackType

import trio

__all__ = ["ConflictGuard"]


class ConflictGuard:
    """``with guard:`` around an operation that may yield; entering it while another
    task is inside raises ``trio.BusyResourceError(message)``."""

    __slots__ = ("held", "message")

    def __init__(self, message: str) -> None:
        #: True while a task is inside the guard.
        self.held = False
        #: The ``BusyResourceError``'s text.
        self.message = message

    def __enter__(self) -> None:
        if self.held:
            raise trio.BusyResourceError(self.message)
        self.held = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.held = False
