"""One stream's protocol state (sans-IO): ``StreamRecord``.

The engine keeps a record per stream in its table.  A record knows the stream's state
on the wire (``StreamState``), what the program may still do in each direction
(``Direction``), why it broke if it did (``Broken``), and the data received and not
read yet.  The trio layer's ``MplexStream`` is a handle on a record; a record never
refers to its handle, so the two never form a cycle.
"""

from __future__ import annotations

import enum

from .states import Direction, StreamState
from .unread import ReceiveBuffer
from .wire import Flag

__all__ = ["Broken", "StreamRecord"]


class Broken(enum.Enum):
    """Why a stream broke in both directions."""

    #: The peer sent Reset.
    PEER_RESET = "peer-reset"
    #: The slow-reader policy (or nobody accepting it) reset it here.
    POLICY_RESET = "policy-reset"
    #: The connection ended under it (the engine's ``end_error`` says why).
    LOST = "lost"


_OPEN = Direction.OPEN
#: The acceptor's flag for each opener's flag (by value; a table, not ``Flag(value)``,
#: which is a slow call on the close of every accepted stream).
_RECEIVER_FLAG = {flag: Flag(flag - 1) for flag in Flag if flag and not flag & 1}


class StreamRecord:
    """The engine's record of one stream (its fields are the engine's to change; the
    layer above reads them, and parks a waiting receiver with ``park``)."""

    __slots__ = (
        "broken",
        "can_receive",
        "can_send",
        "data_flag",
        "holds_slot",
        "id",
        "is_initiator",
        "last_delivery",
        "name",
        "receiving",
        "sending",
        "state",
        "unread",
        "waiter",
    )

    def __init__(self, stream_id: int, name: bytes, *, is_initiator: bool) -> None:
        #: The stream number (each side numbers the streams it opens from 0).
        self.id = stream_id
        #: True if this side opened the stream.
        self.is_initiator = is_initiator
        #: The name from the NewStream frame (ours, or the peer's cut to the limit).
        self.name = name
        #: The stream on the wire: which control frames have passed.
        self.state = StreamState.OPEN
        #: What the program may do in each direction (see ``Direction``).
        self.sending = _OPEN
        self.receiving = _OPEN
        #: ``sending``/``receiving`` is OPEN (read on every send and every frame).
        self.can_send = True
        self.can_receive = True
        #: Why the stream broke, or None.
        self.broken: Broken | None = None
        #: Received bytes nobody has read yet.
        self.unread = ReceiveBuffer()
        #: Bytes of the last Message frame delivered (a bulk transfer delivers large ones).
        self.last_delivery = 0
        #: The flag of the Message frames this side sends on the stream.
        self.data_flag = Flag.MESSAGE_INITIATOR if is_initiator else Flag.MESSAGE_RECEIVER
        #: The layer above's task waiting in ``receive_some`` for this stream, or None.
        self.waiter: object | None = None
        #: True while a stream of ours counts against ``max_outbound_streams``.
        self.holds_slot = False

    @property
    def key(self) -> int:
        """Unique within the connection: ``id << 1 | is_initiator`` (worked out when
        asked, not kept: a node holds many streams)."""
        return self.id << 1 | self.is_initiator

    def park(self, task: object) -> None:
        """``task`` waits for this stream's data or end: the engine hands it back in
        ``Notice.woken`` when either comes."""
        self.waiter = task

    def unpark(self) -> object | None:
        """The task parked here (it no longer waits), or None."""
        task, self.waiter = self.waiter, None
        return task

    def flag(self, initiator_flag: Flag) -> Flag:
        """The flag this side sends: the initiator's (even) one, or the receiver's."""
        return initiator_flag if self.is_initiator else _RECEIVER_FLAG[initiator_flag]

    def refresh(self) -> None:
        """After ``sending`` or ``receiving`` changed: the quick flags follow."""
        self.can_send = self.sending is _OPEN
        self.can_receive = self.receiving is _OPEN

    @property
    def peer_finished(self) -> bool:
        """The peer ended its direction with a Close: what we send now answers it."""
        return self.receiving is Direction.ENDED

    @property
    def closed(self) -> bool:
        """Neither direction can carry more data."""
        return not self.can_send and not self.can_receive

    def __repr__(self) -> str:
        side = "ours" if self.is_initiator else "theirs"
        return f"<StreamRecord {self.id} ({side}) {self.state.value}>"
