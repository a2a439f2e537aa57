"""The connection's streams, in the trio layer: making them, waiting for a slot or for
the peer's next stream, and letting each go when it ends.

The bookkeeping itself (table, ids, slots, backlog, tombstones, budgets) is the
sans-IO ``ConnectionCore``'s; this adds the tasks that wait on it and the stream
objects.  A stream reports its own end here (``release_slot``, ``forget``).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ._endings import ConnectionLost, MuxerClosed
from ._engine.config import Config
from ._engine.stats import Counters
from ._engine.table import ConnectionCore
from ._engine.unread import UnreadData
from ._engine.wire import Encoder, Flag
from ._reader import Reader
from ._sendqueue import SendQueue
from ._stream import MplexStream
from ._writer import Writer

__all__ = ["Streams", "name_bytes", "name_limit"]


def name_limit(config: Config) -> int:
    """The longest name ``open_stream`` sends: ``Config.max_stream_name_size``, and
    never more than one frame (``max_send_frame_size``)."""
    return min(config.max_stream_name_size, config.max_send_frame_size)


def name_bytes(name: str | bytes | None, limit: int) -> bytes | None:
    """A stream name as ``open_stream`` takes it, as the bytes to send (None: the
    default); a wrong type, or a name over ``limit`` bytes (``name_limit``), raises
    before anything is taken or sent."""
    if name is None:
        return None
    if isinstance(name, str):
        raw = name.encode()
    elif isinstance(name, bytes):
        raw = bytes(name)
    else:
        raise TypeError(f"a stream name is str, bytes or None, not {type(name).__name__}")
    if len(raw) > limit:
        raise ValueError(
            f"a stream name may have at most {limit} bytes (Config.max_stream_name_size, "
            f"within one frame of Config.max_send_frame_size); this one has {len(raw)}"
        )
    return raw


class Streams:
    """Every stream of one connection, and the tasks waiting to open or accept one."""

    def __init__(
        self,
        config: Config,
        core: ConnectionCore[MplexStream],
        *,
        stats: Counters,
        reader: Reader,
        writer: Writer,
        queue: SendQueue,
        encoder: Encoder,
        unread: UnreadData[MplexStream],
    ) -> None:
        self._max_name = config.max_stream_name_size
        self._core = core
        self._stats = stats
        self._reader = reader
        self._writer = writer
        self._queue = queue
        self._encoder = encoder
        self._unread = unread
        self._accept_lot = trio.lowlevel.ParkingLot()
        self._slot_lot = trio.lowlevel.ParkingLot()
        # Set once nothing more may be queued: new streams are told at birth.
        self._send_error: ConnectionLost | MuxerClosed | None = None

    def _new(self, stream_id: int, name: bytes, *, is_initiator: bool) -> MplexStream:
        return MplexStream(
            self,
            self._reader,
            self._writer,
            stream_id,
            name,
            is_initiator=is_initiator,
            queue=self._queue,
            encoder=self._encoder,
            unread=self._unread,
        )

    # -- ours ---------------------------------------------------------------------------

    async def open(self, name: bytes | None, check_usable: Callable[[], None]) -> MplexStream:
        """A new stream of ours, once the send buffer has room and a slot is free
        (``check_usable`` raises if the connection can no longer open one)."""
        await trio.lowlevel.checkpoint()
        core, queue = self._core, self._queue
        while True:
            check_usable()
            if not queue.has_room:
                await queue.wait_for_room()  # NewStream is queued like data
            elif core.slot_free:
                break
            else:
                await self._slot_lot.park()
        stream_id = core.take_id()
        if name is None:
            name = str(stream_id).encode()
        stream = self._new(stream_id, name, is_initiator=True)
        core.add_outbound(stream)
        self._stats.streams_opened += 1
        self._writer.send_control(stream_id, Flag.NEW_STREAM, name)
        return stream

    def release_slot(self, stream: MplexStream) -> None:
        """Our ``stream`` no longer counts against ``max_outbound_streams``: this side
        closed or reset it, or it ended."""
        if self._core.release_slot(stream) and self._slot_lot:
            self._slot_lot.unpark()

    # -- theirs -------------------------------------------------------------------------

    def on_new_stream(self, stream_id: int, name: bytes) -> None:
        """The peer opened ``stream_id``: to the backlog, or refused with a Reset."""
        if self._core.refuses_inbound(stream_id, trio.current_time()):
            self._stats.streams_refused += 1
            self._writer.send_control(stream_id, Flag.RESET_RECEIVER)
            return
        stream = self._new(stream_id, name[: self._max_name], is_initiator=False)
        if self._send_error is not None:
            stream._send_side_lost(self._send_error)
        self._core.add_inbound(stream)
        if self._accept_lot:
            self._accept_lot.unpark()

    async def accept(self, running: Callable[[], bool], raise_ended: Callable[[], None]) -> MplexStream:
        """The next stream from the backlog; while it is empty, wait (``raise_ended``
        once the connection is no longer ``running``)."""
        backlog = self._core.backlog
        if backlog:
            await trio.lowlevel.checkpoint()
        while not backlog:
            if not running():
                await trio.lowlevel.checkpoint()
                raise_ended()
            await self._accept_lot.park()
        self._stats.streams_accepted += 1
        return backlog.popleft()

    def reset_by_policy(self, stream: MplexStream) -> None:
        """Give up on a slow (or never accepted) stream: free its unread data, reset it,
        and take it out of the accept backlog (nobody wants a stream reset unseen)."""
        stream._discard()
        if stream._reset_for_overflow():
            self._stats.streams_reset_by_policy += 1
        if self._core.unaccepted(stream):
            self._core.backlog.remove(stream)

    # -- every stream -------------------------------------------------------------------

    def forget(self, stream: MplexStream) -> None:
        """The stream needs no more frames: drop it from the table, free its slot."""
        if self._core.forget(stream) and self._slot_lot:
            self._slot_lot.unpark()

    def send_side_lost(self, error: ConnectionLost | MuxerClosed) -> None:
        """Nothing more may be queued: every stream's sends (and every wait for a
        slot) raise ``error`` from now on."""
        self._send_error = error
        for stream in list(self._core.streams.values()):
            stream._send_side_lost(error)
        self._slot_lot.unpark_all()

    def connection_lost(self, error: ConnectionLost | MuxerClosed) -> None:
        """The connection ended: every stream breaks with ``error``, every waiter wakes."""
        for stream in list(self._core.streams.values()):
            stream._connection_lost(error)
        self._accept_lot.unpark_all()
        self._slot_lot.unpark_all()
