"""The socket fast path: a TCP ``trio.SocketStream`` driven through its descriptor.

Every other transport (TLS, noise, memory, any ``trio.abc.Stream``) takes the generic
path: the writer calls ``send_all``, the reader ``receive_some``.  Over a socket on
POSIX, ``SocketPath`` instead does non-blocking ``os.read``/``os.write``/``os.writev``
on the descriptor, which saves trio's per-call hops and lets two things happen in the
task that wants them:

* a sender whose frame arrives after a quiet spell writes it itself (``write_queued``),
  one scheduler pass sooner than the writer task would;
* a large send goes to the kernel straight from the caller's buffer with one
  ``writev`` (``write_frames``), no copy into the queue;
* a task waiting in ``receive_some`` may take the *read turn* and read the socket
  itself, so the kernel's wake-up reaches it directly (``borrower``: see the
  ``Reader.receive_for``).

Every write here is synchronous and non-blocking: it cannot be cancelled half-way, and
what the kernel does not take stays queued, whole-frame-ordered, for the writer.  Waits
on the socket use trio's documented ``wait_readable``/``wait_writable``.  To move a
waiting task aside (the reader when a receiver takes the turn, a receiver whose stream
was closed locally) ``wake_waiters`` uses ``notify_closing``; see spec section 8 for
why, and why our waits treat that as a wake-up call while the socket stays open.

Chosen at construction (``Config.socket_fast_path``), never switched later.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable

import trio

from ._logging import logger
from ._read_turn import ReadTurn
from ._sendqueue import QUIET, SendQueue
from ._stream_path import READ_SIZE

__all__ = ["POSIX_SOCKETS", "SocketPath"]

#: Socket descriptors work with os.read, os.write and os.writev.
POSIX_SOCKETS = os.name == "posix" and hasattr(os, "writev")
#: Most payload bytes handed to one ``writev``: a few socket buffers' worth, so a large
#: send does not build a huge list of frames the kernel cannot take yet.
_DIRECT_BATCH = 1024 * 1024
#: Buffers one writev may take (the kernel refuses more with EINVAL).
_IOV_MAX = (os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 0) or 1024


class SocketPath(ReadTurn):
    """Non-blocking descriptor I/O on one TCP socket, for the muxer and its streams."""

    def __init__(self, sock: trio.socket.SocketType, queue: SendQueue, running: Callable[[], bool]) -> None:
        super().__init__()
        self.sock = sock
        self._queue = queue
        self._running = running  # True while the connection runs
        queue.direct_write = self.write_queued

    # -- writing ---------------------------------------------------------------------------

    def write_queued(self) -> bool:
        """After a quiet spell, hand the queue to the kernel from the calling task.

        A lone message (a request, a reply) saves the writer's scheduler pass.  True
        when everything left; what the kernel did not take, the writer sends.
        """
        queue = self._queue
        if time.perf_counter() - queue.last_write < QUIET or logger.isEnabledFor(logging.DEBUG):
            return False  # busy (let frames gather for the writer), or tracing frames
        fd = self.sock.fileno()
        if fd < 0:
            return False
        data = queue.buffer
        try:
            sent = os.write(fd, data)
        except OSError:
            return False  # full, or broken: the writer waits, or reports the failure
        queue.sent(sent)
        if sent == len(data):
            data.clear()
            queue.trace_skip = 0
            queue.control = 0
            return True
        if sent:
            del data[:sent]
            queue.trace_skip = -1  # the queue now starts inside some frame
        return False

    def write_frames(
        self, prefix: Callable[[int], bytes], frame_size: int, view: memoryview, pos: int
    ) -> tuple[int, int]:
        """Write frames of ``view[pos:]`` (``prefix(size)`` goes before each body) with
        one ``writev`` from the calling task; return how far in ``view`` the frames
        reach and how many there are.

        Only when nothing is queued or being written, so order holds.  The kernel takes
        whole frames and at most part of one more, whose rest is queued for the writer.
        If it takes nothing, the first frame is queued instead, so the caller always
        progresses (and the writer waits for room, or reports a failure).
        """
        end = min(len(view), pos + _DIRECT_BATCH, pos + frame_size * (_IOV_MAX // 2))  # 2 buffers a frame
        pieces = [view[start : start + frame_size] for start in range(pos, end, frame_size)]
        prefixes = [prefix(len(piece)) for piece in pieces]
        parts = [part for frame in zip(prefixes, pieces, strict=True) for part in frame]
        try:
            sent = os.writev(self.sock.fileno(), parts)
        except OSError:
            sent = 0  # full, or broken: the writer waits, or reports the failure
        queue = self._queue
        queue.sent(sent)
        queue.bytes_sent_without_copy += sent
        frames = 0
        for head, piece in zip(prefixes, pieces, strict=True):
            size = len(head) + len(piece)
            frames += 1
            pos += len(piece)
            if sent >= size:
                sent -= size
                continue
            out = queue.buffer  # the rest of this frame, for the writer
            if sent:
                if sent < len(head):
                    out += head[sent:]
                    out += piece
                else:
                    out += piece[sent - len(head) :]
                queue.trace_skip = len(out)  # a frame's tail, not a frame
            else:
                out += head
                out += piece
            break
        return pos, frames

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """``SocketStream.send_all`` of ``data``, through ``wake_waiters``' rules."""
        sock = self.sock
        waited = False
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            try:
                pos += os.write(sock.fileno(), view[pos:])
            except BlockingIOError:
                waited = True
                await self.wait(trio.lowlevel.wait_writable)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    # -- reading ---------------------------------------------------------------------------

    def read_nowait(self) -> bytes | None:
        """One non-blocking read: None if the socket has nothing now.  Raises
        ``OSError`` if the read failed."""
        try:
            return os.read(self.sock.fileno(), READ_SIZE)
        except BlockingIOError:
            return None

    async def wait(self, wait: Callable[[trio.socket.SocketType], Awaitable[None]]) -> None:
        """``wait(sock)``, which also returns on a wake-up call (the caller looks
        again).  ``wake_waiters`` makes every wait on the socket raise
        ``trio.ClosedResourceError``, which is real only once the connection has
        ended or the socket is closed."""
        try:
            await wait(self.sock)
        except trio.ClosedResourceError:
            if not self._running() or self.sock.fileno() < 0:
                raise

    def wake_waiters(self) -> None:
        """Wake every task waiting on the socket, to look at its situation again.

        trio has no way to wake one task out of ``wait_readable`` short of a cancel
        scope around every wait, which costs about as much as a tenth of a loopback
        round trip.  ``notify_closing`` wakes them all with ``ClosedResourceError`` and
        keeps the socket usable (the next wait registers it again).  Rare: a borrowed
        receive interrupted by a local close, or the reader moved aside.
        """
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)

    def move_reader_aside(self) -> None:
        self.wake_waiters()

    def wake_borrower(self) -> None:
        self.wake_waiters()
