"""The per-stream state machine, as a transition table (sans-IO).

A stream has two directions.  Ours ends when we send Close; theirs ends when their
Close arrives; a Reset from either side ends both at once.  Every transition lives in
``TRANSITIONS``: ``(state, event) -> (new state, verdict)``.  The verdict says what the
caller must do with the event:

* ``OK``: carry it out (send the frame, deliver the data);
* ``IGNORE``: a harmless repeat or a late frame: drop it silently;
* ``CLOSED``: a local action on a direction we closed: ``ClosedResourceError``;
* ``BROKEN``: a local action on a reset stream: ``BrokenResourceError``.

Remote input never produces an error verdict: whatever the peer sends about one
stream can at worst be dropped.  A test walks every (state, event) pair.
"""

from __future__ import annotations

import enum

__all__ = ["TRANSITIONS", "ConnectionState", "StreamEvent", "StreamState", "Verdict", "transition"]


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
    """Something that happens to a stream."""

    SEND_DATA = "send-data"
    SEND_CLOSE = "send-close"
    SEND_RESET = "send-reset"
    RECV_DATA = "recv-data"
    RECV_CLOSE = "recv-close"
    RECV_RESET = "recv-reset"


class Verdict(_IdentityHashed):
    """What to do with an event (see the module docstring)."""

    OK = "ok"
    IGNORE = "ignore"
    CLOSED = "closed"
    BROKEN = "broken"


_S = StreamState
_E = StreamEvent
_V = Verdict

TRANSITIONS: dict[tuple[StreamState, StreamEvent], tuple[StreamState, Verdict]] = {
    # Both directions open.
    (_S.OPEN, _E.SEND_DATA): (_S.OPEN, _V.OK),
    (_S.OPEN, _E.SEND_CLOSE): (_S.LOCAL_CLOSED, _V.OK),
    (_S.OPEN, _E.SEND_RESET): (_S.RESET, _V.OK),
    (_S.OPEN, _E.RECV_DATA): (_S.OPEN, _V.OK),
    (_S.OPEN, _E.RECV_CLOSE): (_S.REMOTE_CLOSED, _V.OK),
    (_S.OPEN, _E.RECV_RESET): (_S.RESET, _V.OK),
    # We closed our direction; theirs is still open.
    (_S.LOCAL_CLOSED, _E.SEND_DATA): (_S.LOCAL_CLOSED, _V.CLOSED),
    (_S.LOCAL_CLOSED, _E.SEND_CLOSE): (_S.LOCAL_CLOSED, _V.IGNORE),
    (_S.LOCAL_CLOSED, _E.SEND_RESET): (_S.RESET, _V.OK),
    (_S.LOCAL_CLOSED, _E.RECV_DATA): (_S.LOCAL_CLOSED, _V.OK),
    (_S.LOCAL_CLOSED, _E.RECV_CLOSE): (_S.CLOSED, _V.OK),
    (_S.LOCAL_CLOSED, _E.RECV_RESET): (_S.RESET, _V.OK),
    # They closed their direction; ours is still open.  Data after their Close breaks
    # the spec: it is dropped, never delivered.  A Reset still matters: it tells us
    # our own sends are no longer wanted.
    (_S.REMOTE_CLOSED, _E.SEND_DATA): (_S.REMOTE_CLOSED, _V.OK),
    (_S.REMOTE_CLOSED, _E.SEND_CLOSE): (_S.CLOSED, _V.OK),
    (_S.REMOTE_CLOSED, _E.SEND_RESET): (_S.RESET, _V.OK),
    (_S.REMOTE_CLOSED, _E.RECV_DATA): (_S.REMOTE_CLOSED, _V.IGNORE),
    (_S.REMOTE_CLOSED, _E.RECV_CLOSE): (_S.REMOTE_CLOSED, _V.IGNORE),
    (_S.REMOTE_CLOSED, _E.RECV_RESET): (_S.RESET, _V.OK),
    # Both closed cleanly: nothing more can happen on the wire.
    (_S.CLOSED, _E.SEND_DATA): (_S.CLOSED, _V.CLOSED),
    (_S.CLOSED, _E.SEND_CLOSE): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.SEND_RESET): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.RECV_DATA): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.RECV_CLOSE): (_S.CLOSED, _V.IGNORE),
    (_S.CLOSED, _E.RECV_RESET): (_S.CLOSED, _V.IGNORE),
    # Reset: both directions are over.
    (_S.RESET, _E.SEND_DATA): (_S.RESET, _V.BROKEN),
    (_S.RESET, _E.SEND_CLOSE): (_S.RESET, _V.BROKEN),
    (_S.RESET, _E.SEND_RESET): (_S.RESET, _V.IGNORE),
    (_S.RESET, _E.RECV_DATA): (_S.RESET, _V.IGNORE),
    (_S.RESET, _E.RECV_CLOSE): (_S.RESET, _V.IGNORE),
    (_S.RESET, _E.RECV_RESET): (_S.RESET, _V.IGNORE),
}

#: States in which the stream still needs frames from the peer.
FINISHED_STATES = frozenset({StreamState.CLOSED, StreamState.RESET})


def transition(state: StreamState, event: StreamEvent) -> tuple[StreamState, Verdict]:
    """Look up ``(state, event)`` in ``TRANSITIONS``."""
    return TRANSITIONS[(state, event)]
