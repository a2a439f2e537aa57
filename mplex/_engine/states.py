"""The per-stream state machine (sans-IO).

A stream has two directions.  Ours ends when we send Close; theirs ends when their
Close arrives; a Reset from either side ends both at once.

Two kinds of state, each an enum, decide everything about a stream:

* ``StreamState``, the stream **on the wire**: which control frames have passed.  Every
  transition lives in ``TRANSITIONS``: ``(state, event) -> (new state, verdict)``, where
  the verdict says what the caller must do with a control event: ``OK``, carry it out
  (send the frame, act on the peer's); ``IGNORE``, a harmless repeat or a late frame;
  ``BROKEN``, a local action on a reset stream (``BrokenResourceError``).  Remote input
  never produces an error verdict: whatever the peer sends about one stream can at
  worst be dropped.  A test walks every (state, event) pair.
* ``Direction``, each direction **as the program sees it**: whether data may still be
  sent (ours) or received (theirs), and if not, why.  A direction leaves ``OPEN`` once,
  for the first reason that comes (``end_direction``); closing the stream here
  (``CLOSED``) overrides any reason, since every later call is the caller's mistake.
  A stream may send exactly while its sending direction is ``OPEN``, and waits for data
  exactly while its receiving direction is.
"""

from __future__ import annotations

import enum

__all__ = [
    "FINISHED_STATES",
    "RECEIVABLE_STATES",
    "TRANSITIONS",
    "ConnectionState",
    "Direction",
    "StreamEvent",
    "StreamState",
    "Verdict",
    "end_direction",
    "transition",
]


class _IdentityHashed(enum.Enum):
    """An Enum hashed by identity (members are singletons): Enum's own ``__hash__`` is
    Python code, run for every table lookup and state-set test on the per-frame paths."""

    __hash__ = object.__hash__


class ConnectionState(_IdentityHashed):
    """Where a whole connection is, with trio's resource discipline: it runs (``OK``)
    until the peer or the transport ends it (``BROKEN``) or we close it (``CLOSED``);
    closing a broken connection makes it ``CLOSED``.  Never back to ``OK``."""

    OK = "ok"
    BROKEN = "broken"
    CLOSED = "closed"


class StreamState(_IdentityHashed):
    """Where a stream is in its life."""

    OPEN = "open"
    #: We sent Close; the peer may still send.
    LOCAL_CLOSED = "local-closed"
    #: The peer sent Close; we may still send.
    REMOTE_CLOSED = "remote-closed"
    #: Both sides sent Close: finished cleanly.
    CLOSED = "closed"
    #: Either side sent Reset: finished abruptly.
    RESET = "reset"


class StreamEvent(_IdentityHashed):
    """A control frame sent or received on a stream (data frames change no state:
    the directions gate them)."""

    SEND_CLOSE = "send-close"
    SEND_RESET = "send-reset"
    RECV_CLOSE = "recv-close"
    RECV_RESET = "recv-reset"


class Verdict(_IdentityHashed):
    """What to do with an event (see the module docstring)."""

    OK = "ok"
    IGNORE = "ignore"
    BROKEN = "broken"


class Direction(_IdentityHashed):
    """One direction of a stream, as the program sees it."""

    #: Data may flow.
    OPEN = "open"
    #: Ended cleanly: our ``send_eof()``, or the peer's Close (its data is complete).
    ENDED = "ended"
    #: Ended by a Reset: the peer's, or the slow-reader policy's.
    RESET = "reset"
    #: Ended because the connection ended, or (sending) its send side did.
    LOST = "lost"
    #: ``aclose()`` or ``reset()`` was called here.
    CLOSED = "closed"


def end_direction(direction: Direction, how: Direction) -> Direction:
    """``direction`` after an event that would end it ``how``: only an open direction
    ends, and a local close overrides whatever ended it before."""
    if direction is Direction.OPEN or how is Direction.CLOSED:
        return how
    return direction


_S = StreamState
_E = StreamEvent
_V = Verdict

TRANSITIONS: dict[tuple[StreamState, StreamEvent], tuple[StreamState, Verdict]] = {
    # Both directions open.
    (_S.OPEN, _E.SEND_CLOSE): (_S.LOCAL_CLOSED, _V.OK),
    (_S.OPEN, _E.SEND_RESET): (_S.RESET, _V.OK),
    (_S.OPEN, _E.RECV_CLOSE): (_S.REMOTE_CLOSED, _V.OK),
    (_S.OPEN, _E.RECV_RESET): (_S.RESET, _V.OK),
    # We closed our direction; theirs is still open.
    (_S.LOCAL_CLOSED, _E.SEND_CLOSE): (_S.LOCAL_CLOSED, _V.IGNORE),
    (_S.LOCAL_CLOSED, _E.SEND_RESET): (_S.RESET, _V.OK),
    (_S.LOCAL_CLOSED, _E.RECV_CLOSE): (_S.CLOSED, _V.OK),
    (_S.LOCAL_CLOSED, _E.RECV_RESET): (_S.RESET, _V.OK),
    # They closed their direction; ours is still open.  A Reset still matters: it
    # tells us our own sends are no longer wanted.
    (_S.REMOTE_CLOSED, _E.SEND_CLOSE): (_S.CLOSED, _V.OK),
    (_S.REMOTE_CLOSED, _E.SEND_RESET): (_S.RESET, _V.OK),
    (_S.REMOTE_CLOSED, _E.RECV_CLOSE): (_S.REMOTE_CLOSED, _V.IGNORE),
    (_S.REMOTE_CLOSED, _E.RECV_RESET): (_S.RESET, _V.OK),
    # Both closed cleanly: nothing more can happen on the wire.
    (_S.CLOSED, _E.SEND_CLOSE): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.SEND_RESET): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.RECV_CLOSE): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.RECV_RESET): (_S.CLOSED, _V.IGNORE),
    # Reset: both directions are over.
    (_S.RESET, _E.SEND_CLOSE): (_S.RESET, _V.BROKEN),
    (_S.RESET, _E.SEND_RESET): (_S.RESET, _V.IGNORE),
    (_S.RESET, _E.RECV_CLOSE): (_S.RESET, _V.IGNORE),
    (_S.RESET, _E.RECV_RESET): (_S.RESET, _V.IGNORE),
}

#: States in which the stream needs no more frames from the peer (or sends any).
FINISHED_STATES = frozenset({StreamState.CLOSED, StreamState.RESET})
#: States whose direction from the peer is still open on the wire.
RECEIVABLE_STATES = frozenset({StreamState.OPEN, StreamState.LOCAL_CLOSED})


def transition(state: StreamState, event: StreamEvent) -> tuple[StreamState, Verdict]:
    """Look up ``(state, event)`` in ``TRANSITIONS``."""
    return TRANSITIONS[(state, event)]
