"""How streams and connections stop working, as trio errors: the exceptions, the
connection's lifecycle, and the unwrapping of our nurseries' exception groups.

**The exceptions.**  ``StreamReset`` and ``ConnectionLost`` derive from
``trio.BrokenResourceError`` (the peer or the transport failed), ``MuxerClosed`` from
``trio.ClosedResourceError`` (this program closed the muxer), so code written against
trio's stream contract handles them without knowing mplex; all three also derive from
``MplexError``, so code that does know mplex can tell them apart.  ``EndReason`` names
the four ways a connection ends.

**The lifecycle** (``Lifecycle``): whether the connection still runs, whether it may
still send, and why not.  It is the one place the end state is held: the connection's
tasks, its streams and its public methods all ask it and raise the errors it recorded.
A connection ends once, for the first reason that comes; its send side may end earlier
(``aclose()`` began, or a write failed), while the reader still delivers what the peer
sent.  It only records: the driver acts on what ``end`` and ``stop_sending`` report.

**Unwrapping** (``Unwrapping``): what leaves a public ``async with`` or ``serve_*`` is the
exception that was raised, not trio's nursery group around it.  trio wraps whatever
crosses a nursery in an ``ExceptionGroup`` (``strict_exception_groups``), so without
this an ``except mplex.ConnectionLost:`` around ``async with mplex.open_muxer(...)``
would never match.  The nurseries are ours, an implementation detail the caller never
asked for, so the groups they add are removed, and only those: a group the program
raised itself is recorded where it enters ours (``Unwrapping.raised``) and leaves as it
was raised.  Several exceptions at once still leave as a group: none may be lost.
"""

from __future__ import annotations

import enum
from types import TracebackType
from typing import Literal, NoReturn

import trio

from .._engine.errors import MplexError
from .._engine.record import Broken, StreamRecord
from .._engine.states import ConnectionState, Direction

__all__ = [
    "ConnectionLost",
    "EndReason",
    "Ending",
    "Lifecycle",
    "MuxerClosed",
    "StreamReset",
    "Unwrapping",
    "ended_under_it",
]


class EndReason(enum.Enum):
    """Why a connection ended: ``Muxer.end_reason`` and the errors' ``reason``."""

    #: The peer ended its side of the transport cleanly (end of input).
    PEER_CLOSED = "peer-closed"
    #: The transport failed (reset, broken pipe, a TLS error, ...): see ``__cause__``.
    TRANSPORT_FAILED = "transport-failed"
    #: The peer broke the mplex protocol or an abuse budget: ``__cause__`` is the
    #: ``ProtocolError``.
    PROTOCOL_ERROR = "protocol-error"
    #: This program ended it: ``Muxer.aclose()``, or ``run()`` was cancelled.
    CLOSED = "closed"


class StreamReset(trio.BrokenResourceError, MplexError):
    """The stream was reset: by the peer, or by our slow-reader policy.

    ``by_peer`` tells which.  ``refused`` is True when the peer reset a stream we
    opened before sending anything on it: what a peer does to a stream beyond its
    limits (``max_inbound_streams``, its accept backlog), and what a handler that
    fails before answering does too (mplex has no error codes).  Such a stream may be
    opened again later; the connection goes on.  Data that arrived before the reset is
    still returned by ``receive_some``; this error comes once it is drained.
    """

    def __init__(self, message: str, *, stream_id: int, by_peer: bool, refused: bool = False) -> None:
        super().__init__(message)
        self.stream_id = stream_id
        self.by_peer = by_peer
        self.refused = refused


class ConnectionLost(trio.BrokenResourceError, MplexError):
    """The connection under the stream ended without this program closing it.

    ``reason`` is an ``EndReason`` (the peer hung up, the transport failed, or the peer
    broke the protocol); ``__cause__`` holds the transport error or ``ProtocolError``,
    and is None for a clean end of input.
    """

    def __init__(self, message: str, *, reason: EndReason = EndReason.TRANSPORT_FAILED) -> None:
        super().__init__(message)
        self.reason = reason


class MuxerClosed(trio.ClosedResourceError, MplexError):
    """This program closed the muxer under the stream (``Muxer.aclose()``, or its
    ``run()`` was cancelled).  ``reason`` is always ``EndReason.CLOSED``."""

    reason = EndReason.CLOSED


def copy_for_stream(failure: BaseException | None, stream_id: int) -> BaseException:
    """A fresh copy of ``failure`` for stream ``stream_id`` (see ``fresh_copy``), raised
    ``from`` the same cause when the caller raises it."""
    copy = fresh_copy(failure, stream_id)
    copy.__cause__ = failure.__cause__ if failure is not None else None
    copy.__suppress_context__ = True
    return copy


def fresh_copy(failure: BaseException | None, stream_id: int = -1) -> BaseException:
    """A fresh copy of a recorded ``failure`` to raise, so that each raise gets its own
    traceback (None, or anything else: the stream was closed here)."""
    if isinstance(failure, StreamReset):
        return StreamReset(
            str(failure), stream_id=stream_id, by_peer=failure.by_peer, refused=failure.refused
        )
    if isinstance(failure, ConnectionLost):
        return ConnectionLost(str(failure), reason=failure.reason)
    if isinstance(failure, MuxerClosed):
        return MuxerClosed(str(failure))
    return trio.ClosedResourceError("this stream was closed")


#: The error a connection's streams get when it (or its send side) ends.
Ending = ConnectionLost | MuxerClosed

_RUNNING = ConnectionState.OK


class Lifecycle:
    """The end-state of one connection, and the error each stream gets from it."""

    __slots__ = ("error", "lost_data", "reported", "running", "send_error", "state", "write_failure")

    def __init__(self) -> None:
        #: ``OK`` while the connection runs, then ``BROKEN`` or ``CLOSED``.
        self.state = _RUNNING
        #: True until the connection ends (``state`` is ``OK``; read on every read).
        self.running = True
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
        self.running = False
        self.error = error
        return True

    def send_error_for(self, record: StreamRecord) -> BaseException:
        """Why ``record`` cannot send (``send_all`` raises it)."""
        # Local reasons win: sending after our own close or EOF is the caller's
        # mistake (trio's ClosedResourceError) even if the peer reset since.
        if record.sending is Direction.CLOSED:
            return trio.ClosedResourceError("this stream was closed")
        if record.sending is Direction.ENDED:
            return trio.ClosedResourceError("send_eof() was called on this stream")
        if record.broken is not None:
            return self.receive_error_for(record)
        send_error = self.send_error
        if isinstance(send_error, ConnectionLost | MuxerClosed):
            self.reported = True
            return copy_for_stream(send_error, record.id)
        return trio.ClosedResourceError("send_eof() was called on this stream")

    def receive_error_for(self, record: StreamRecord) -> BaseException:
        """Why ``record`` broke (``receive_some`` raises it after its data)."""
        if record.broken is Broken.PEER_RESET:
            if record.is_initiator and not record.last_delivery:  # before it sent anything
                return StreamReset(
                    f"stream {record.id} was reset by the peer before it sent anything (refused: "
                    "more streams than the peer allows open at once?)",
                    stream_id=record.id,
                    by_peer=True,
                    refused=True,
                )
            return StreamReset(f"stream {record.id} was reset by the peer", stream_id=record.id, by_peer=True)
        if record.broken is Broken.POLICY_RESET:
            return StreamReset(
                f"stream {record.id} was reset by the slow-reader policy: its unread data went "
                "over Config.max_stream_buffer or max_connection_buffer",
                stream_id=record.id,
                by_peer=False,
            )
        self.reported = True
        return copy_for_stream(self.error, record.id)

    def closed_after_break(self) -> bool:
        """Closing a broken connection makes it ``CLOSED``; True if it was broken."""
        if self.state is ConnectionState.BROKEN:
            self.state = ConnectionState.CLOSED
            return True
        return False


def _raise_copy(error: Ending) -> NoReturn:
    """Raise a fresh copy of a recorded end, with the same cause."""
    raise fresh_copy(error) from error.__cause__


class Unwrapping:
    """The groups the program raised into our nurseries: where unwrapping stops.

    As a context manager (``with Unwrapping() as unwrapping:``), it re-raises an
    exception group that leaves the block as what it carries (``unwrap``), with that
    exception's own traceback, cause and context; anything else leaves as it is.  (A
    class rather than a generator: a served connection holds it for its whole life.)
    """

    __slots__ = ("_programs",)

    def __init__(self) -> None:
        # Made with the first group recorded: most connections never have one.
        self._programs: list[BaseExceptionGroup[BaseException]] | None = None

    def __enter__(self) -> Unwrapping:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> Literal[False]:
        if not isinstance(exc, BaseExceptionGroup):
            return False
        inner = self.unwrap(exc)
        if inner is exc:
            return False
        context = inner.__context__
        try:
            raise inner
        finally:
            # Raising inside ``__exit__`` would make the group its context; keep its own.
            inner.__context__ = context
            del inner, context, exc

    def raised(self, exc: BaseException) -> None:
        """The program raised ``exc`` into one of our nurseries (only a group needs
        recording: unwrapping never goes inside anything else)."""
        if isinstance(exc, BaseExceptionGroup):
            if self._programs is None:
                self._programs = []
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


def ended_under_it(exc: BaseException) -> bool:
    """Whether ``exc`` is only the stream or the connection ending under a handler: a
    ``trio.BrokenResourceError`` (a reset, a lost connection) or ``MuxerClosed``, or an
    exception group (a handler's own nursery) made of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(ended_under_it(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.BrokenResourceError | MuxerClosed)
