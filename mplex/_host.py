"""What a stream and the reader ask of their connection: ``StreamHost``, ``ReaderHost``.

``mplex._connection.Connection`` implements both; a ``MplexStream`` and the ``Reader``
know their connection only through these calls.  They live here, apart from both
sides, so that neither imports the other.
"""

from __future__ import annotations

from typing import Protocol

from ._endings import ConnectionLost
from ._engine.outbox import Outbox
from ._engine.record import StreamRecord

__all__ = ["ReaderHost", "StreamHost"]


class StreamHost(Protocol):
    """The calls a stream makes on its connection."""

    #: Where a stream appends its Message frames, whole.
    outbox: Outbox

    def queued(self, frames: int) -> None:
        """``frames`` frames were appended to the outbox past its ``wake_at``."""

    async def wait_for_room(self) -> None:
        """Wait until the outbox may have room (or the stream's situation changed)."""

    def frame_prefix(self, record: StreamRecord, size: int) -> bytes:
        """The header and length of a Message frame of ``size`` bytes on the stream."""

    def append_frames(self, record: StreamRecord, view: memoryview) -> int:
        """Append ``view`` to the outbox as Message frames; how many."""

    def direct_writes(self) -> bool:
        """True if a large send may go to the transport from the sending task at all
        (the transport writes without waiting, and frames are not being traced)."""

    def write_frames(self, record: StreamRecord, view: memoryview, pos: int) -> int | None:
        """Frames of ``view[pos:]`` to the transport from the caller's buffer, if
        nothing is queued or being written now; how far they reach, or None."""

    def flush_now(self) -> None:
        """Write what is queued now, not when the program next idles."""

    def may_lend(self, *, bulk: bool) -> bool:
        """True if the stream's receiving task may read the transport itself now."""

    async def receive_for(self, record: StreamRecord) -> None:
        """One read of the transport in the stream's receiving task (a checkpoint)."""

    def take(self, record: StreamRecord, max_bytes: int | None) -> bytes:
        """Up to ``max_bytes`` of the stream's unread data (it has some)."""

    def send_close(self, record: StreamRecord) -> bool:
        """End the stream's sending direction; False if it cannot send."""

    def close(self, record: StreamRecord) -> None:
        """Close the stream in both directions here."""

    def reset(self, record: StreamRecord) -> None:
        """Reset the stream and tell the peer."""

    def send_error(self, record: StreamRecord) -> BaseException:
        """A fresh exception saying why the stream cannot send."""

    def receive_error(self, record: StreamRecord) -> BaseException:
        """A fresh exception saying why the stream broke."""


class ReaderHost(Protocol):
    """The calls the reader makes on its connection."""

    #: True until the connection ends.
    running: bool

    def settle(self) -> None:
        """Act on what the engine's last input changed: wake whoever must look again."""

    def end(self, error: ConnectionLost, cause: BaseException | None) -> None:
        """The connection ends with ``error`` (chained to ``cause``): the input ended
        or failed, or the peer broke the protocol."""
