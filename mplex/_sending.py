"""A stream's send side: whole Message frames appended to the connection's
``SendQueue`` (``SendSide``, the base of ``MplexStream``).

Every byte a stream sends is appended as whole frames, synchronously, so two streams'
frames never interleave within a frame and a cancelled ``send_all`` leaves only whole
frames behind.  The queue's writer writes them in order (over the socket path, a
sender may hand a lone message to the kernel with one non-blocking write); a sender
never waits on the transport, so a cancelled ``send_all`` returns at once.  The
stream's state decides whether it may send (``_can_send``) and what to raise when not
(``_raise_send_error``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import trio

from ._engine.wire import Encoder, Flag
from ._guard import ConflictGuard
from ._sendqueue import SendQueue

if TYPE_CHECKING:
    from ._writer import Writer

__all__ = ["Buffer", "SendSide"]

Buffer = bytes | bytearray | memoryview
# send_all's checkpoints, bound once: the 32-byte send_all loop calls them millions of times.
_checkpoint = trio.lowlevel.checkpoint
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_yield = trio.lowlevel.cancel_shielded_checkpoint


def _byte_buffer(data: object) -> Buffer:
    """``data``, any object with the buffer protocol, as a flat buffer whose ``len()`` is
    its byte count (as ``trio.SocketStream.send_all`` takes it); ``TypeError`` otherwise."""
    if isinstance(data, bytes | bytearray):
        return data
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    if not view.c_contiguous:
        return view.tobytes()
    if view.ndim == 1 and view.itemsize == 1:
        return view
    try:
        return view.cast("B")
    except TypeError:  # a shape cast() cannot flatten (a 0-d view, say)
        return view.tobytes()


class SendSide:
    """The sending half of an ``MplexStream``: ``send_all``, ``send_nowait`` and
    ``wait_send_all_might_not_block`` over the connection's ``SendQueue``."""

    #: The stream number (set by the stream).
    id: int
    #: False once the stream's state forbids sending (kept by the stream).
    _can_send: bool

    def __init__(self, writer: Writer, queue: SendQueue, encoder: Encoder, data_flag: Flag) -> None:
        self._writer = writer
        self._queue = queue
        self._encoder = encoder
        self._frame_size = encoder.frame_size
        self._data_flag = data_flag
        self._last_size = -1
        self._last_prefix = b""
        #: Held while a task is in send_all, send_eof or wait_send_all_might_not_block.
        self._send_guard = ConflictGuard("another task is sending on this stream")

    def _raise_send_error(self) -> NoReturn:
        """Why this stream cannot send (the stream's state knows)."""
        raise NotImplementedError

    def send_nowait(self, data: Buffer) -> None:
        """Queue ``data`` for sending without yielding.

        Raises ``trio.WouldBlock`` (queuing nothing) when the connection's send buffer
        already holds ``Config.send_high_water`` bytes or more (one call may pass the
        mark by its own size); wait with ``wait_send_all_might_not_block``
        or fall back to ``send_all``.  Otherwise the same errors as ``send_all``.
        """
        q = self._queue
        out = q.buffer
        if self._send_guard.held or not self._can_send or len(out) >= q.high_water:
            self._refuse_send_nowait()
        if data.__class__ is not bytes:
            data = _byte_buffer(data)  # len() must count bytes, before anything is queued
        size = len(data)
        if size == self._last_size:
            # The hot path: _append_frame inlined for a write of the same size as the
            # last one (many small messages: the prefix is cached).  A method call here
            # costs a fifth of the whole call, so this stays a copy.
            out += self._last_prefix
            out += data
            q.frames += 1
            if len(out) >= q.wake_at:
                q.queued(0)
            return
        if size <= self._frame_size:
            if size:
                self._append_frame(out, data, size)
        else:
            self._queue_frames(memoryview(data).cast("B"))

    def _append_frame(self, out: bytearray, data: Buffer, size: int) -> None:
        """Append one Message frame of ``size`` bytes (0 < size <= frame size) to the
        send buffer and make sure it leaves."""
        self._frame_into(out, data, size)
        self._queue.queued(1)

    def _frame_into(self, out: bytearray, data: Buffer, size: int) -> None:
        """Append one Message frame to ``out``, caching its prefix for the next write
        of the same size."""
        if size != self._last_size:
            self._last_size = size
            self._last_prefix = self._encoder.prefix(self.id, self._data_flag, size)
        out += self._last_prefix
        out += data

    def _refuse_send_nowait(self) -> None:
        """Why send_nowait cannot queue now, as the exception to raise."""
        if self._send_guard.held:
            raise trio.BusyResourceError(self._send_guard.message)
        if not self._can_send:
            self._raise_send_error()
        raise trio.WouldBlock

    async def send_all(self, data: Buffer) -> None:
        """See `trio.abc.SendStream.send_all`.

        If cancelled, whole frames of ``data`` may have been queued; never part of one.
        """
        # The guard's idiom inlined (check, hold, let go): a ``with`` block calls two
        # Python methods, a cost this, the hottest call, shows (probe_busy_guard).
        guard = self._send_guard
        if guard.held:
            raise trio.BusyResourceError(guard.message)
        guard.held = True
        try:
            if data.__class__ is not bytes:
                data = _byte_buffer(data)  # len() must count bytes, before anything is queued
            q = self._queue
            if not q.gathering:
                # trio's socket idiom: raise if already cancelled, queue, then yield
                # without cancellation.  The writer is then scheduled in the same pass
                # as our yield (one pass less latency than yielding first), and a
                # cancelled call has queued nothing.
                await _checkpoint_if_cancelled()
                yielded = False
            else:
                # The writer is gathering a busy program's frames until every task is
                # blocked, so queuing after the yield delays nothing; one checkpoint
                # costs a call less than the check and the yield apart.
                await _checkpoint()
                yielded = True
            if not self._can_send:
                if not yielded:
                    await _yield()
                self._raise_send_error()
            out = q.buffer
            size = len(data)
            if not size:
                if not yielded:
                    await _yield()
                return
            if size <= self._frame_size and len(out) < q.high_water:
                if size == self._last_size:
                    # The hot path, as in send_nowait (a repeated size: cached prefix).
                    out += self._last_prefix
                    out += data
                    q.frames += 1
                else:
                    self._frame_into(out, data, size)
                    q.frames += 1
                if len(out) >= q.wake_at:
                    q.queued(0)
                if not yielded:
                    await _yield()
                return
            if size <= self._frame_size:  # one frame, but the buffer is at the mark
                if size:
                    while not q.has_room:
                        yielded = await self._wait_for_writer()
                    self._append_frame(q.buffer, data, size)
            elif await self._send_frames(memoryview(data).cast("B")):
                yielded = True
            if not yielded:
                await _yield()
        finally:
            guard.held = False

    async def _send_frames(self, view: memoryview) -> bool:
        """send_all's part for data longer than one frame; True if it yielded.

        Over TCP, whenever nothing is queued or being written, the frames go to the
        kernel from this task without a copy (the socket path's ``writev``); then it
        waits for the writer to send what the kernel did not take.  If other senders
        keep the buffer busy, it queues copies up to the high-water mark like everyone
        else, so it is never starved.
        """
        writer = self._writer
        q = self._queue
        step = self._frame_size
        pos, end = 0, len(view)
        direct = writer.may_write_directly()
        waited = yielded = False
        while pos < end:
            if direct and not q.buffer and not q.writing:
                pos = writer.write_directly(self.id, self._data_flag, view, pos)
                waited = False
            elif direct and not waited:
                q.flush_now()  # write now, not when the program idles
                yielded = waited = await self._wait_for_writer()
            elif not q.has_room:
                yielded = await self._wait_for_writer()
            else:
                self._queue_frames(view[pos : pos + step])
                pos += step
        return yielded

    async def _wait_for_writer(self) -> bool:
        """Wait until the writer has sent something (or the stream broke); True."""
        if self._can_send:  # else nothing would wake us: the failure woke everyone already
            await self._queue.wait_for_room()
        if not self._can_send:
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._raise_send_error()
        return True

    def _queue_frames(self, view: memoryview) -> None:
        self._queue.queued(self._encoder.append(self._queue.buffer, self.id, self._data_flag, view))

    async def wait_send_all_might_not_block(self) -> None:
        """See `trio.abc.SendStream.wait_send_all_might_not_block`."""
        with self._send_guard:
            q = self._queue
            if not self._can_send or q.has_room:
                await trio.lowlevel.checkpoint()
            else:
                await q.wait_for_room()
            if not self._can_send:
                self._raise_send_error()
