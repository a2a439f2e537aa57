"""Which streams a connection has (sans-IO): ``StreamTable``.

Streams are keyed by ``id << 1 | opened_by_us``: the same number opened by each side
names two different streams.  The table holds the live records, the ids, the slots of
``Config.max_outbound_streams``, the backlog of streams waiting to be accepted, and
tombstones: the keys of finished streams, so that frames arriving for them late (they
crossed our close or reset) are recognised as such.  The engine decides; the table
keeps count.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

from .errors import MplexError
from .record import StreamRecord
from .wire import MAX_STREAM_ID

__all__ = ["StreamTable"]

#: Finished stream keys remembered (at least; see ``StreamTable.tombstone_limit``).
_TOMBSTONES = 4096


class StreamTable:
    """The live streams of one connection, and what is counted about them."""

    # fmt: off
    __slots__ = (
        "_tombstones", "backlog", "inbound", "max_outbound", "next_id", "slots_taken", "streams",
        "tombstone_limit"
    )
    # fmt: on

    def __init__(self, max_inbound: int, max_outbound: int) -> None:
        self.max_outbound = max_outbound
        #: Live streams by key.
        self.streams: dict[int, StreamRecord] = {}
        #: The id our next stream gets.
        self.next_id = 0
        #: Our streams that hold a ``max_outbound_streams`` slot (``holds_slot``): a
        #: count, not a set of them, which would cost every connection memory.
        self.slots_taken = 0
        #: Streams the peer opened that are still in the table.
        self.inbound = 0
        #: Inbound streams waiting to be accepted, oldest first (the values are None).
        #: A plain dict, which keeps its order: an empty deque holds a block of its
        #: own, an empty ``OrderedDict`` is twice a dict's size, and most connections
        #: have nothing waiting most of the time.
        self.backlog: dict[StreamRecord, None] = {}
        # Enough to remember every stream both sides may have open, twice over: a batch
        # reset of all of them must not make their in-flight frames "unknown".
        self.tombstone_limit = _tombstone_limit(max_inbound, max_outbound)
        # Made when the first is kept: a connection with no finished inbound stream
        # (an idle one, say) holds none.
        self._tombstones: OrderedDict[int, None] | None = None

    @property
    def slot_free(self) -> bool:
        """True if another stream of ours may open now."""
        return self.slots_taken < self.max_outbound

    def take_id(self) -> int:
        """The id for a stream we open now (``MplexError`` once all are used)."""
        stream_id = self.next_id
        if stream_id > MAX_STREAM_ID:
            raise MplexError("all 2**60 stream ids of this connection are used up")
        self.next_id = stream_id + 1
        return stream_id

    def add_ours(self, record: StreamRecord) -> None:
        self.streams[record.key] = record
        record.holds_slot = True
        self.slots_taken += 1

    def add_theirs(self, record: StreamRecord) -> None:
        if self._tombstones:
            self._tombstones.pop(record.key, None)
        self.streams[record.key] = record
        self.inbound += 1
        self.backlog[record] = None

    def unaccepted(self, record: StreamRecord) -> bool:
        """True if ``record`` waits in the backlog."""
        return not record.is_initiator and record in self.backlog

    def release_slot(self, record: StreamRecord) -> bool:
        """Our ``record`` stops counting against the limit; True if it held a slot."""
        if record.holds_slot:
            record.holds_slot = False
            self.slots_taken -= 1
            return True
        return False

    def forget(self, record: StreamRecord) -> bool:
        """Drop ``record`` from the table, keeping its key as a tombstone; True if it
        was there."""
        if self.streams.pop(record.key, None) is None:
            return False
        if not record.is_initiator:  # ours need no tombstone: ``finished`` knows them
            self.remember(record.key)
            self.inbound -= 1
        return True

    def remember(self, key: int) -> None:
        """Keep ``key`` as a tombstone: late frames for it are expected."""
        tombstones = self._tombstones
        if tombstones is None:
            tombstones = self._tombstones = OrderedDict()
        tombstones[key] = None
        if len(tombstones) > self.tombstone_limit:
            tombstones.popitem(last=False)

    def finished(self, header: int) -> bool:
        """True if the frame ``header`` names a stream that existed and finished: one
        of ours below the next id, or a remembered one."""
        key = (header >> 3) << 1 | (header & 1)
        if key & 1 and header >> 3 < self.next_id:
            return True
        return self._tombstones is not None and key in self._tombstones


@functools.lru_cache(maxsize=16)
def _tombstone_limit(max_inbound: int, max_outbound: int) -> int:
    """``StreamTable.tombstone_limit``: one int object for the connections of one
    configuration, not one each (a large int is memory every connection would hold)."""
    return max(_TOMBSTONES, 2 * (max_inbound + max_outbound))
