"""The connection's receive side: who reads the transport, and what becomes of it.

The reader task reads the transport, feeds each chunk to the sans-IO ``Decoder`` and
dispatches the frames: data to the stream's buffer, Close and Reset to the stream's
state machine, NewStream to the connection (its ``on_new_stream``).  Between
reads it applies the slow-reader policy (``ReaderThrottle``).

It also lends the read turn (see ``_read_turn``): a task waiting in
``MplexStream.receive_some`` while nothing is buffered reads the transport itself
(``receive_for``) and dispatches what it read exactly as the reader task would.

After a write failed, the receive side outlives the send side (``linger``): what the
peer sent is still delivered, and the connection ends when the input does.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import trio

from ._endings import ConnectionLost, EndReason, MuxerClosed
from ._engine.config import Config
from ._engine.decoder import Decoder, RawFrame
from ._engine.errors import ProtocolError
from ._engine.stats import Counters
from ._engine.table import ConnectionCore, key_of
from ._engine.unread import UnreadData
from ._logging import ConnectionLog, logger
from ._read_turn import ReadTurn
from ._sendqueue import wait_for_idle
from ._socket_path import SocketPath
from ._stream_path import READ_SIZE, StreamPath
from ._throttle import ReaderThrottle

if TYPE_CHECKING:
    from ._stream import MplexStream

__all__ = ["Reader"]


def _ignore_failure(error: ConnectionLost, cause: BaseException | None) -> None:
    pass


def _ignore_new_stream(stream_id: int, name: bytes) -> None:
    pass


class Reader:
    """The receive side of one connection; ``run()`` is the reader task."""

    def __init__(
        self,
        config: Config,
        core: ConnectionCore[MplexStream],
        *,
        unread: UnreadData[MplexStream],
        throttle: ReaderThrottle,
        stats: Counters,
        log: ConnectionLog,
        path: StreamPath | SocketPath,
        running: Callable[[], bool],
        fail: Callable[[ConnectionLost, BaseException | None], None],
        on_new_stream: Callable[[int, bytes], None],
    ) -> None:
        # What the reader needs from its connection: whether it still runs, how to end
        # it (see Muxer's theory of operation), and what to do with a peer's new stream.
        self._running = running
        self._fail = fail
        self._on_new_stream = on_new_stream
        self._flush_delay = config.max_flush_delay
        self._close_timeout = config.close_timeout
        self._core = core
        self._unread = unread
        self._throttle = throttle
        self._stats = stats
        self._log = log
        self._path = path
        self._socket = path if isinstance(path, SocketPath) else None
        #: The read turn (whichever transport path it is).
        self.turn: ReadTurn = path
        #: Decodes everything the transport delivers, at most
        #: ``Config.frames_per_yield`` frames between two yields of the reader.
        self.decoder = Decoder(
            config.max_message_size, coalesce=True, frames_per_feed=config.frames_per_yield
        )
        #: What the reader task is doing (``MuxerStats.reader``).
        self.state = "reading"
        # After a failed write: why the send side ended, and the scope whose deadline
        # bounds the wait for the input to end.
        self._send_failure: ConnectionLost | MuxerClosed | None = None
        self._linger_scope: trio.CancelScope | None = None

    def detach(self) -> None:
        """Drop the callbacks (they hold the connection): it has ended."""
        self._fail = _ignore_failure
        self._on_new_stream = _ignore_new_stream

    # -- the reader task ------------------------------------------------------------------

    def run(self) -> Coroutine[Any, Any, None]:
        """The reader task (``nursery.start_soon(reader.run)``): reads the transport
        whenever no receiving task holds the read turn (see ``_read_turn``),
        dispatches, and pauses for the slow-reader policy.  Returns the read loop's
        own coroutine, so that every read resumes one frame fewer."""
        if self._socket is not None:
            return self._read_socket_loop(self._socket)
        assert isinstance(self._path, StreamPath)
        return self._read_stream_loop(self._path)

    async def _read_stream_loop(self, path: StreamPath) -> None:
        try:
            await path.prepare()
        except Exception as exc:  # a failed TLS handshake: the connection is lost
            self._receive_failed(exc)
            return
        running = self._running
        receive_some = path.receive_some
        decoder = self.decoder
        while running():
            if decoder.pending:
                if not await self._consume_pending():
                    return
                continue
            if path.borrower is not None:
                await self._lend(path, until_idle=True)
                continue
            # A borrower moves the reader aside by cancelling this scope, which it does
            # only while the reader waits inside the transport's receive_some.
            with path.reader_scope():
                while path.borrower is None and running():
                    if self._throttle.should_pause():
                        await self._throttle.pause()
                    self.state = "waiting"
                    path.reader_waiting = True
                    try:
                        data = await receive_some(READ_SIZE)
                    except Exception as exc:  # any failure of any transport: it is lost
                        self._receive_failed(exc)
                        return
                    finally:
                        path.reader_waiting = False
                        path.reader_left()
                        self.state = "reading"
                    if not self._consume(data):
                        return
                    if decoder.pending:
                        break  # the rest of this read first, between yields

    async def _read_socket_loop(self, path: SocketPath) -> None:
        running = self._running
        decoder = self.decoder
        while running():
            if decoder.pending:
                if not await self._consume_pending():
                    return
                continue
            if self._throttle.should_pause():
                await self._throttle.pause()
            if path.borrower is not None:
                await self._lend(path)
                continue
            data = self._read_socket(path)
            if data is None:
                path.reader_waiting = True
                self.state = "waiting"
                try:
                    await path.wait(trio.lowlevel.wait_readable)
                except (trio.ClosedResourceError, OSError) as exc:
                    self._receive_failed(exc)
                    return
                finally:
                    path.reader_waiting = False
                    self.state = "reading"
                continue  # and look at the read turn again before reading
            if not self._consume(data):
                return
            # The kernel had data without waiting: yield once per read, as trio's
            # own receive_some does, so a flood cannot starve other tasks.
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _lend(self, turn: ReadTurn, *, until_idle: bool = False) -> None:
        """Park the reader while a receiving task holds the read turn.

        The task that gave the turn back is usually about to take it again (a
        request/response loop), so the reader lets it, before it waits on the
        transport and the task would have to move it out of there: one scheduler pass
        over the socket path (moving it costs one ``notify_closing``), and until the
        program goes idle (at most ``Config.max_flush_delay``) over the generic path,
        where moving it means cancelling a wait inside the transport.
        """
        self.state = "lent"
        await turn.park_reader()
        self.state = "reading"
        if until_idle:
            with trio.move_on_after(self._flush_delay):
                await wait_for_idle()
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _read_socket(self, path: SocketPath) -> bytes | None:
        """One non-blocking read: None if the socket has nothing now.  A failed read
        ends the connection and returns b"" (end of input)."""
        try:
            return path.read_nowait()
        except OSError as exc:
            self._receive_failed(exc)
            return b""

    # -- lending the read turn ------------------------------------------------------------

    def wake_borrower(self, stream: MplexStream) -> None:
        """If ``stream``'s receiving task waits on the transport itself, wake it to
        look at its stream again."""
        if self.turn.borrower_waiting is stream:
            self.turn.wake_borrower()

    def may_lend(self, *, bulk: bool = False) -> bool:
        """True if a receiving task may read the transport itself now (``receive_for``).

        Not over the generic path to a stream taking a ``bulk`` transfer: there a read
        brings one TLS record or so, and handing the turn back and forth for each costs
        more than the reader task's wake-up saves; the turn pays off for the lone
        messages of a request/response exchange.

        Only while no stream has unread data: then the wait is for the peer, and the
        task that wants the next bytes should be the one the transport wakes.  While
        streams have data to read, the reader task (one read, then a yield) keeps the
        pace; if every waiting receiver read for itself, a hundred of them would read
        a hundred chunks in one scheduler pass and fill the buffers for nothing.
        """
        return (
            self.turn.borrower is None
            and self.turn.lends
            and not self.decoder.pending
            and not (bulk and self._socket is None)
            and not self._unread.total
            and not self._throttle.blocked
            and self._running()
        )

    async def receive_for(self, stream: MplexStream) -> None:
        """One read of the transport in ``stream``'s receiving task, waiting for the
        transport first if it has nothing (the caller checked ``may_lend``).

        What is read is dispatched as the reader would, to whichever streams it is
        for; if none of it is for ``stream``, the caller waits for the reader task
        like any other receiver (a busy connection is read by the reader, which
        yields between reads).  A checkpoint, like every receive.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._socket is not None:
            waited = await self._receive_from_socket(self._socket, stream)
        else:
            assert isinstance(self._path, StreamPath)
            waited = await self._receive_from_stream(self._path, stream)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _receive_from_socket(self, path: SocketPath, stream: MplexStream) -> bool:
        path.borrower = stream
        if path.reader_waiting:
            path.move_reader_aside()
        waited = False
        try:
            data = self._read_socket(path)
            if data is None:
                waited = True
                path.borrower_waiting = stream
                try:
                    await path.wait(trio.lowlevel.wait_readable)
                finally:
                    path.borrower_waiting = None
                if stream._waiting_for_data() and self._running():
                    data = self._read_socket(path)
            if data is not None:
                self._consume(data)
        except (trio.ClosedResourceError, OSError) as exc:
            self._receive_failed(exc)
        finally:
            path.give_turn_back()
        return waited

    async def _receive_from_stream(self, path: StreamPath, stream: MplexStream) -> bool:
        path.borrower = stream
        waited = False
        try:
            if path.reader_waiting:
                path.move_reader_aside()
                waited = True
                await path.wait_reader_out()  # it may deliver what it had read meanwhile
            if stream._waiting_for_data() and self._running() and not self.decoder.pending:
                waited = True
                path.borrower_waiting = stream
                try:
                    data = await path.borrower_receive()
                finally:
                    path.borrower_waiting = None
                if data is not None:
                    self._consume(data)
        except Exception as exc:  # any failure of any transport: the connection is lost
            self._receive_failed(exc)
        finally:
            path.give_turn_back()
        return waited

    # -- what was read ----------------------------------------------------------------------

    async def _consume_pending(self) -> bool:
        """The rest of a read that held more than ``Config.frames_per_yield`` frames: yield,
        then the next of them; False once the connection has ended."""
        await trio.lowlevel.cancel_shielded_checkpoint()
        if not self._running():
            return False
        return self._decoded(self.decoder.resume_raw, None)

    def _consume(self, data: bytes | bytearray) -> bool:
        """Decode and dispatch one chunk read from the transport; False once the
        connection has ended (b"" is the peer's end of input)."""
        if not self._running():
            return False
        if self._linger_scope is None and self.decoder.absorb(data):
            self._stats.bytes_received += len(data)  # the middle of a large frame
            return True
        if not data:
            if not self._ended_by_failed_write():
                if self.decoder.buffered:
                    # Not a clean end: the transport ended inside a frame.
                    cut = EOFError(f"the input ended inside a frame ({self.decoder.buffered} bytes of it)")
                    self._fail(ConnectionLost("the transport ended in the middle of a frame"), cut)
                else:
                    error = ConnectionLost("the peer closed the connection", reason=EndReason.PEER_CLOSED)
                    self._fail(error, None)
            return False
        if self._linger_scope is not None:
            self.input_progressed()
        self._stats.bytes_received += len(data)
        decoder = self.decoder
        while decoder.pending:  # rare: a borrower's read while the reader still had some
            if not self._decoded(decoder.resume_raw, None):
                return False
        return self._decoded(decoder.feed_raw, data)

    def _decoded(self, feed: Callable[..., list[RawFrame]], data: bytes | bytearray | None) -> bool:
        """Dispatch what ``feed(data)`` (or ``feed()``) decodes; False once it broke
        the protocol (the connection has then ended)."""
        try:
            try:
                frames = feed() if data is None else feed(data)
            except ProtocolError as exc:
                self._dispatch(exc.decoded)
                raise
            if logger.isEnabledFor(logging.DEBUG):  # one check per read, none per frame
                self._log.trace("recv", frames)
            self._dispatch(frames)
        except ProtocolError as exc:
            reason = EndReason.PROTOCOL_ERROR
            self._fail(ConnectionLost(f"the peer broke the mplex protocol: {exc}", reason=reason), exc)
            return False
        return True

    def _dispatch(self, frames: list[RawFrame]) -> None:
        streams = self._core.streams
        for header, body in frames:
            flag = header & 7
            stream = streams.get(key_of(header))
            if flag in {1, 2}:
                if not body:  # ignored on receipt (spec 5.9): nothing to store or wake
                    self._ignored()
                elif stream is not None and stream._can_receive:
                    if stream._deliver(body):
                        self._throttle.overflowed(stream)
                elif stream is None or not stream._on_late_data():
                    self._dropped(header, stream)
            elif flag == 0:
                self._on_new_stream(header >> 3, body)
            else:
                if flag >= 5:
                    self._stats.resets_received += 1
                    self._core.spend(self._core.reset_budget, trio.current_time())
                if stream is None:
                    self._dropped(header, stream)
                elif not (stream._on_remote_reset() if flag >= 5 else stream._on_remote_close()):
                    self._stats.frames_dropped += 1
                    self._ignored()  # a repeated Close

    def _dropped(self, header: int, stream: MplexStream | None) -> None:
        """A frame nobody can use (see ``ConnectionCore.dropped_unknown``)."""
        self._stats.frames_dropped += 1
        if stream is not None:
            self._ignored()  # data after the peer's own Close, on a live stream
        else:
            self._core.dropped_unknown(header, trio.current_time())

    def _ignored(self) -> None:
        """A frame that changes nothing on a live stream: cheap, but not free."""
        self._core.spend(self._core.ignored_budget, trio.current_time())

    # -- how the input ends -----------------------------------------------------------------

    def _receive_failed(self, exc: BaseException) -> None:
        if not self._ended_by_failed_write():
            self._fail(ConnectionLost("the transport failed while receiving"), exc)

    async def linger(self, send_failure: ConnectionLost | MuxerClosed) -> None:
        """A write failed (``send_failure`` says why; the send side has ended): keep
        delivering what the transport still hands over (a peer that sent everything
        and hung up).  The connection ends when the input does, or once the transport
        has delivered nothing for ``Config.close_timeout`` while the reader waited."""
        self._send_failure = send_failure
        self._linger_scope = trio.CancelScope()
        self.input_progressed(waiting=not self._throttle.blocked)
        with self._linger_scope:
            await trio.sleep_forever()
        self._end_by_failed_write()

    def input_progressed(self, *, waiting: bool = True) -> None:
        """After a failed write: restart the wait for the input to end (none while
        the reader is held up by our own buffers)."""
        if self._linger_scope is not None:
            waited = self._close_timeout if waiting else math.inf
            self._linger_scope.deadline = trio.current_time() + waited

    def paused(self, paused: bool) -> None:
        """The slow-reader policy stopped (or resumed) the reader."""
        self.state = "paused" if paused else "reading"
        # Time our own full buffers hold the reader up never counts as input silence.
        self.input_progressed(waiting=not paused)

    def _ended_by_failed_write(self) -> bool:
        """The input ended after a write had failed: that failure is the reason."""
        if self._linger_scope is None:
            return False
        self._end_by_failed_write()
        return True

    def _end_by_failed_write(self) -> None:
        error = self._send_failure
        assert error is not None
        self._fail(ConnectionLost(str(error)), error.__cause__)
