"""A connection's lifecycle: whether it still runs, whether it may still send, and why
not (``Lifecycle``).

The connection's tasks, its streams and its public methods all ask the same questions
and raise the same recorded errors, so the answers live in one object.  A connection
ends once, for the first reason that comes; its send side may end earlier (``aclose()``
began, or a write failed), while the reader still delivers what the peer sent.  This
object only records: the connection acts on what ``end`` and ``stop_sending`` report.
"""

from __future__ import annotations

from typing import NoReturn

from ._endings import ConnectionLost, EndReason, MuxerClosed, fresh_copy
from ._engine.states import ConnectionState

__all__ = ["Ending", "Lifecycle"]

#: The error a connection's streams get when it (or its send side) ends.
Ending = ConnectionLost | MuxerClosed

_RUNNING = ConnectionState.OK


class Lifecycle:
    """The end-state of one connection."""

    __slots__ = ("error", "lost_data", "reported", "send_error", "state", "write_failure")

    def __init__(self) -> None:
        #: ``OK`` while the connection runs, then ``BROKEN`` or ``CLOSED``.
        self.state = _RUNNING
        #: Why the connection ended; None while it runs.
        self.error: Ending | None = None
        #: Why nothing more may be queued; None while sends are accepted.
        self.send_error: Ending | None = None
        #: The first failed write to the transport, whenever it came (even during
        #: ``aclose``'s flush, after sends had stopped): the connection's end reason.
        self.write_failure: ConnectionLost | None = None
        #: True when that failed write lost Message data the program had sent (not
        #: only control frames): ``aclose`` then raises it unless it was seen already.
        self.lost_data = False
        #: True once the program has been raised the connection's failure or end.
        self.reported = False

    @property
    def end_reason(self) -> EndReason | None:
        """Why the connection ended, or None while it runs."""
        return None if self.error is None else self.error.reason

    @property
    def running(self) -> bool:
        """True until the connection ends."""
        return self.state is _RUNNING

    def check_usable(self) -> None:
        """Raise the recorded reason if nothing more may be sent."""
        if self.state is not _RUNNING:
            self.raise_ended()
        if self.send_error is not None:
            self.reported = True
            _raise_copy(self.send_error)

    def raise_ended(self) -> NoReturn:
        """Raise (a fresh copy of) why the connection ended."""
        assert self.error is not None
        self.reported = True
        _raise_copy(self.error)

    def stop_sending(self, error: Ending) -> bool:
        """No more frames may be queued; True if this call stopped them."""
        if self.send_error is not None:
            return False
        self.send_error = error
        return True

    def end(
        self,
        error: Ending,
        *,
        cause: BaseException | None = None,
        final_state: ConnectionState = ConnectionState.BROKEN,
    ) -> bool:
        """End the connection with ``error`` (chained to ``cause``); True if this call
        ended it (only the first counts)."""
        if self.state is not _RUNNING:
            return False
        error.__cause__ = cause
        self.state = final_state
        self.error = error
        return True

    def closed_after_break(self) -> bool:
        """Closing a broken connection makes it ``CLOSED``; True if it was broken."""
        if self.state is ConnectionState.BROKEN:
            self.state = ConnectionState.CLOSED
            return True
        return False


def _raise_copy(error: Ending) -> NoReturn:
    """Raise a fresh copy of a recorded end, with the same cause."""
    raise fresh_copy(error) from error.__cause__
