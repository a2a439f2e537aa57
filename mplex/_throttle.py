"""When the reader must stop reading, and what gives: the slow-reader policies.

After each chunk it dispatches, the muxer's reader asks ``should_pause``.  It pauses
while a stream holds more than ``Config.max_stream_buffer`` unread bytes, while all
streams together hold more than ``Config.max_connection_buffer`` (the transport's own
flow control then pushes back on the peer), or while the control frames it had to
queue (replies to the peer's input) are over ``Config.send_high_water``.  The policy
decides what ends a pause besides the program reading:

* ``"block"``: nothing; nothing is lost.
* ``"reset"``: a stream over its limit is reset at once (``overflowed``), its data freed.
* ``"block-then-reset"``: after ``Config.slow_reader_timeout`` the streams over their
  limit are reset; failing that, the live stream holding the most.

Whatever the policy, streams nobody has accepted hold the reader up for at most
``Config.accept_grace`` while no task is in ``accept_stream``: then they are reset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import trio

from ._engine.config import Config
from ._engine.table import ConnectionCore
from ._engine.unread import UnreadData
from ._sendqueue import SendQueue
from ._stream import MplexStream

__all__ = ["ReaderThrottle"]


def _unread(stream: MplexStream) -> int:
    return stream.unread_bytes



def _ignore(_: object) -> None:
    pass

class ReaderThrottle:
    """The reader's pauses, the policy's verdicts, and the time the reader lost."""

    def __init__(
        self,
        config: Config,
        core: ConnectionCore[MplexStream],
        unread: UnreadData[MplexStream],
        queue: SendQueue,
        *,
        reset_stream: Callable[[MplexStream], None],
        running: Callable[[], bool],
        on_stall: Callable[[bool], None],
    ) -> None:
        self._config = config
        self._core = core
        self._unread = unread
        self._queue = queue
        self._reset_stream = reset_stream  # frees a stream's data, resets it
        self._running = running
        self._on_stall = on_stall  # called with True when a pause begins, False at its end
        #: Tasks inside ``accept_stream`` (unaccepted streams never stall a server).
        self.acceptors = 0
        #: True while the reader is paused.
        self.blocked = False
        #: Seconds the reader spent paused, not counting a pause still going on.
        self.blocked_seconds = 0.0
        self._blocked_since: float | None = None
        self._drain_lot = trio.lowlevel.ParkingLot()

    def detach(self) -> None:
        """Drop the callbacks (they hold the connection): it has ended."""
        self._reset_stream = _ignore
        self._on_stall = _ignore

    def blocked_for(self) -> float:
        """Seconds the reader spent paused, a pause still going on included."""
        if self._blocked_since is None:
            return self.blocked_seconds
        return self.blocked_seconds + trio.current_time() - self._blocked_since

    def overflowed(self, stream: MplexStream) -> None:
        """``stream`` holds more than ``Config.max_stream_buffer`` unread bytes."""
        if self._config.slow_reader_policy == "reset":
            self._reset_stream(stream)
        else:
            self._unread.overfull.add(stream)

    def recheck(self) -> None:
        """Something a paused reader waits for may have changed: let it look again."""
        if self.blocked and self._drain_lot:
            self._drain_lot.unpark_all()

    def wake(self) -> None:
        """Wake a paused reader whatever changed (the connection ended)."""
        self._drain_lot.unpark_all()

    def should_pause(self) -> bool:
        return self._unread.over_limits() or self._queue.control > self._queue.high_water

    async def pause(self) -> None:
        """Wait until the reader may read again (see the module docstring)."""
        if self._unread.over_limits():
            await self._wait_for_readers()
        if self._queue.control > self._queue.high_water:
            await self._wait_for_send_room()

    def _stalled_by_unaccepted(self) -> bool:
        """True if only streams nobody has accepted keep the reader from reading, and
        no task is in ``accept_stream`` to take them."""
        unread = self._unread
        if self.acceptors or any(not self._core.unaccepted(s) for s in unread.overfull):
            return False
        if unread.total > unread.max_connection:
            waiting = sum(s.unread_bytes for s in self._core.backlog)
            return waiting > 0 and unread.total - waiting <= unread.max_connection
        return bool(unread.overfull)

    def _shed_unaccepted(self) -> None:
        """Reset the unaccepted streams over their limit, then, while the connection is
        over its budget, the unaccepted stream holding the most."""
        for stream in [s for s in self._unread.overfull if self._core.unaccepted(s)]:
            self._reset_stream(stream)
        while self._unread.total > self._unread.max_connection:
            holding = [s for s in self._core.backlog if s.unread_bytes]
            if not holding:
                return
            self._reset_stream(max(holding, key=_unread))

    async def _wait_for_readers(self) -> None:
        config = self._config
        started = trio.current_time()
        policy_deadline = float("inf")
        if config.slow_reader_policy == "block-then-reset":
            policy_deadline = started + config.slow_reader_timeout
        stalled_since: float | None = None  # by unaccepted streams only, since when
        with self._stalled():
            while self._unread.over_limits():
                shed_at = float("inf")
                if self._stalled_by_unaccepted():
                    stalled_since = stalled_since or trio.current_time()
                    shed_at = stalled_since + config.accept_grace
                else:
                    stalled_since = None
                with trio.move_on_at(min(policy_deadline, shed_at)) as scope:
                    await self._drain_lot.park()
                if not scope.cancelled_caught:
                    continue
                if trio.current_time() >= shed_at:
                    # Nobody came to accept them: they must not stall the streams the
                    # program does read (a program that only dials never accepts).
                    self._shed_unaccepted()
                    stalled_since = None
                    continue
                # Timed out: give up on the streams over their own limit; failing that,
                # on the live stream holding the most.  Resetting frees their data;
                # each further victim gets another full timeout first.
                victims = list(self._unread.overfull)
                if not victims and (candidates := [s for s in self._core.streams.values() if s.unread_bytes]):
                    victims = [max(candidates, key=_unread)]
                for stream in victims:
                    self._reset_stream(stream)
                policy_deadline = trio.current_time() + config.slow_reader_timeout

    async def _wait_for_send_room(self) -> None:
        """Control frames waiting in the send queue (replies to the peer's input, Closes
        of the streams it opened) are over ``send_high_water``: read no more until
        the writer has taken them, so a peer that never reads cannot grow our send
        queue.  Only control frames count: pausing for data would let two peers that
        both send in bulk wait for each other's reads forever."""
        queue = self._queue
        with self._stalled():
            while queue.control > queue.high_water and self._running():
                await queue.wait_for_room()

    @contextlib.contextmanager
    def _stalled(self) -> Iterator[None]:
        """The reader is not reading: receivers must not read for it (the read turn is
        not lent), and the time counts in ``stats.reader_blocked_seconds``."""
        started = trio.current_time()
        self.blocked = True
        self._blocked_since = started
        self._on_stall(True)
        try:
            yield
        finally:
            self.blocked = False
            self._blocked_since = None
            self.blocked_seconds += trio.current_time() - started
            self._on_stall(False)
