"""The connection's bookkeeping, without I/O: the stream table, ids, stream limits, the
accept backlog, tombstones and the abuse budgets (sans-IO; time is passed in).

Streams are keyed by ``id << 1 | opened_by_us``: the same number opened by each side
names two different streams.  A frame with an even flag comes from the stream's
opener, so it names a stream the peer opened; an odd flag names one we opened
(``key_of``).

The objects in the table are the layer above's streams (``S``); the core only needs
their key and who opened them (``TableEntry``).  Nothing here waits or wakes: the trio
layer parks tasks and asks the core when they may go on.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, Protocol, TypeVar

from .budget import SlidingBudget
from .config import Config
from .errors import MplexError, ProtocolError
from .wire import MAX_STREAM_ID

__all__ = ["ConnectionCore", "TableEntry", "key_of"]

#: Finished stream keys remembered, so late frames for them are recognised as such
#: (at least; see ConnectionCore.tombstone_limit).
_TOMBSTONES = 4096


def key_of(header: int) -> int:
    """The table key of the stream a frame header names."""
    return (header >> 3) << 1 | (header & 1)


class TableEntry(Protocol):
    """What the core needs of a stream in its table."""

    @property
    def key(self) -> int: ...

    @property
    def is_initiator(self) -> bool: ...


S = TypeVar("S", bound=TableEntry)


class ConnectionCore(Generic[S]):
    """Which streams exist, which may be opened or accepted, and which frames are
    abuse (``spend`` raises ``ProtocolError`` once a budget is exhausted)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        #: Live streams by key.
        self.streams: dict[int, S] = {}
        #: The id our next stream gets.
        self.next_id = 0
        #: Keys of our streams that hold a ``max_outbound_streams`` slot.
        self.slots: set[int] = set()
        #: Streams the peer opened that are still in the table.
        self.inbound = 0
        #: Inbound streams waiting for ``accept_stream``, oldest first.
        self.backlog: deque[S] = deque()
        # Enough to remember every stream both sides may have open, twice over: a
        # batch reset of all of them must not make their in-flight frames "unknown".
        both_ways = config.max_inbound_streams + config.max_outbound_streams
        self.tombstone_limit = max(_TOMBSTONES, 2 * both_ways)
        self._tombstones: OrderedDict[int, None] = OrderedDict()
        window = config.abuse_window

        def budget(name: str) -> SlidingBudget:
            return SlidingBudget(name, getattr(config, name), window)

        self.unknown_budget = budget("max_unknown_stream_frames")
        self.refused_budget = budget("max_refused_streams")
        self.reset_budget = budget("max_resets_received")
        self.ignored_budget = budget("max_ignored_frames")

    # -- opening ---------------------------------------------------------------------------

    @property
    def slot_free(self) -> bool:
        """True if another stream of ours may open now."""
        return len(self.slots) < self.config.max_outbound_streams

    def take_id(self) -> int:
        """The id for a stream we open now (``MplexError`` once all are used)."""
        stream_id = self.next_id
        if stream_id > MAX_STREAM_ID:
            raise MplexError("all 2**60 stream ids of this connection are used up")
        self.next_id = stream_id + 1
        return stream_id

    def add_outbound(self, stream: S) -> None:
        self.streams[stream.key] = stream
        self.slots.add(stream.key)

    def refuses_inbound(self, stream_id: int, now: float) -> bool:
        """The peer opens ``stream_id``: True if it must be refused (answered with a
        Reset), because a stream limit or the backlog is full.  A NewStream for a
        stream the peer already has open is a ``ProtocolError``."""
        key = stream_id << 1
        if key in self.streams:
            raise ProtocolError(f"NewStream for stream {stream_id}, which the peer already has open")
        config = self.config
        if self.inbound >= config.max_inbound_streams or len(self.backlog) >= config.accept_backlog:
            self.spend(self.refused_budget, now)
            self.remember(key)
            return True
        self._tombstones.pop(key, None)
        return False

    def add_inbound(self, stream: S) -> None:
        self.streams[stream.key] = stream
        self.inbound += 1
        self.backlog.append(stream)

    def unaccepted(self, stream: S) -> bool:
        """True if ``stream`` waits in the accept backlog."""
        return not stream.is_initiator and stream in self.backlog

    # -- ending ----------------------------------------------------------------------------

    def release_slot(self, stream: S) -> bool:
        """Our ``stream`` stops counting against ``max_outbound_streams``; True if it
        held a slot (a task waiting for one may go on)."""
        if stream.key in self.slots:
            self.slots.discard(stream.key)
            return True
        return False

    def forget(self, stream: S) -> bool:
        """The stream needs no more frames: drop it from the table.  True if it was
        there; then a slot may have come free."""
        if self.streams.pop(stream.key, None) is None:
            return False
        self.remember(stream.key)
        if stream.is_initiator:
            self.release_slot(stream)
        else:
            self.inbound -= 1
        return True

    def remember(self, key: int) -> None:
        """Keep ``key`` as a tombstone: late frames for it are expected, not abuse."""
        tombstones = self._tombstones
        tombstones[key] = None
        if len(tombstones) > self.tombstone_limit:
            tombstones.popitem(last=False)

    # -- abuse -----------------------------------------------------------------------------

    def dropped_unknown(self, header: int, now: float) -> None:
        """A frame for no live stream.  Late frames for a stream that finished are
        expected (they crossed our close or reset), but change nothing: they are spent
        from ``ignored_budget``, like any frame that changes nothing, so a peer cannot
        flood a finished stream for free.  Frames for a stream that never existed are
        spent from ``unknown_budget``."""
        key = key_of(header)
        if (key & 1 and header >> 3 < self.next_id) or key in self._tombstones:
            self.spend(self.ignored_budget, now)  # one of ours, or one remembered
        else:
            self.spend(self.unknown_budget, now)

    def spend(self, budget: SlidingBudget, now: float) -> None:
        """Count one event against ``budget``; ``ProtocolError`` once it is exhausted."""
        if not budget.add(now):
            raise ProtocolError(
                f"abuse budget exceeded: more than {budget.limit} events counted by "
                f"Config.{budget.name} within {budget.window:g} s"
            )
