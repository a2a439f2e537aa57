"""StreamHost: what an ``MplexStream`` asks of its connection (the driver implements it)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from .._engine.outbox import Outbox
from .._engine.record import StreamRecord
from .writer import Writer

__all__ = ["StreamHost"]


class StreamHost(Protocol):
    """The calls a stream makes on its connection."""

    @property
    def outbox(self) -> Outbox:
        """Where a stream appends its Message frames, whole."""

    #: When what is queued leaves: a stream tells it (``queued``) once the outbox holds
    #: ``wake_at`` bytes, and waits for room (``wait_for_room``).
    writer: Writer

    #: Queue ``view`` as Message frames (any length), and make sure they leave.
    def queue_data(self, record: StreamRecord, view: memoryview) -> None: ...
    #: True if the stream's receiving task may read the transport itself now.
    def may_lend(self, record: StreamRecord) -> bool: ...
    #: One read of the transport in the stream's receiving task (a checkpoint).
    def receive_for(self, record: StreamRecord) -> Awaitable[None]: ...
    #: Up to ``max_bytes`` of the stream's unread data (it has some).
    def take(self, record: StreamRecord, max_bytes: int | None) -> bytes: ...
    #: End the stream's sending direction; False if it cannot send.
    def send_close(self, record: StreamRecord) -> bool: ...
    #: Close the stream in both directions here.
    def close(self, record: StreamRecord) -> None: ...
    #: Reset the stream and tell the peer.
    def reset(self, record: StreamRecord) -> None: ...
    #: A fresh exception saying why the stream cannot send.
    def send_error(self, record: StreamRecord) -> BaseException: ...
    #: A fresh exception saying why the stream broke.
    def receive_error(self, record: StreamRecord) -> BaseException: ...
