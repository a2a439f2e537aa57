"""The socket fast path: a TCP ``trio.SocketStream`` driven through its descriptor.

Non-blocking ``os.read``/``os.write``/``os.writev`` on the descriptor save trio's
per-call hops, and let two things happen in the task that wants them:

* a sender can hand queued bytes to the kernel itself (``write_nowait``), one
  scheduler pass sooner than the writer task would, and a large send can go to the
  kernel straight from the caller's buffer (``writev_nowait``), with no copy;
* a task waiting in ``receive_some`` can borrow the read turn and read the socket
  itself, so the kernel's wake-up reaches it directly.

Every write here is synchronous and non-blocking, so it cannot be cancelled half-way.
Waits use trio's documented ``wait_readable``/``wait_writable``.  To move a waiting
task aside (the reader when a receiver takes the turn, a receiver whose stream was
closed here) ``_wake_waiters`` uses ``notify_closing``, which wakes every task waiting
on the socket with ``trio.ClosedResourceError`` and leaves the socket usable: our
waits treat that as a wake-up call while the socket is open (see spec section 8).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .base import READ_SIZE, Lender, Transport

__all__ = ["DRAINED_BELOW", "POSIX_SOCKETS", "SocketTransport"]

#: A read right after a wait that brings fewer bytes than this is a peer's request or
#: reply, not a stream: the reader waits before it reads again (a message or two; a
#: streaming peer's input comes in far larger reads).
DRAINED_BELOW = 4096
#: Socket descriptors work with os.read, os.write and os.writev.
POSIX_SOCKETS = os.name == "posix" and hasattr(os, "writev")


class SocketTransport(Transport):
    """Non-blocking descriptor I/O on one TCP socket."""

    __slots__ = ("_drained", "_woke", "sock", "waits_directly")

    sock: trio.socket.SocketType

    kind = "socket"
    writes_without_waiting = True
    stops_reader = True
    #: The kernel refuses a ``writev`` of more buffers with EINVAL.
    max_buffers = (os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 0) or 1024

    def __init__(self, stream: trio.SocketStream) -> None:
        super().__init__()
        self.sock = stream.socket
        # True when the reader's last wait for the socket ended (a yield) and no read
        # has followed it yet.
        self._woke = False
        # True when the reader's last read followed a wait and found a little input
        # (``DRAINED_BELOW``): the peer is not streaming, and a read now would most
        # likely find nothing.
        self._drained = False
        # True until a receiving task first asks for the read turn (see the base class).
        self.waits_directly = True

    # -- reading ------------------------------------------------------------------------

    def read_nowait(self) -> bytes | None:
        """One non-blocking read: None if the socket has nothing now.  Raises
        ``OSError`` if the read failed."""
        try:
            return os.read(self.sock.fileno(), READ_SIZE)
        except BlockingIOError:
            return None

    def read_now(self) -> bytes | None:
        """The reader task's read, without waiting: the bytes (``b""`` at the end of
        the input), or None when the reader is to wait for ``sock`` to be readable,
        call ``reader_woke`` and look again."""
        # After a little input, wait first: a read that finds nothing costs a system
        # call and an exception, and the wait follows it anyway.
        data = None if self._drained else self.read_nowait()
        if data is not None:
            # A read right after a wait for the socket follows a yield already: the
            # reader yields only between reads that found data waiting.
            self.yield_due = not self._woke
            self._drained = self._woke and len(data) < DRAINED_BELOW
            self._woke = False
            return data
        self.yield_due = False
        self._drained = False
        self.reader_waiting = True
        return None

    async def wait_readable(self) -> None:
        """The reader's wait for ``sock`` once it may be moved aside: the wake-up call
        ends here, not in the reader's own frame."""
        try:
            # ``_wait``, inline: a connection whose reader waits holds this chain.
            await trio.lowlevel.wait_readable(self.sock)
        except trio.ClosedResourceError:
            if self.sock.fileno() < 0:
                raise

    def end_direct_waits(self) -> bool:
        self.waits_directly = False
        return not self.reader_waiting

    def reader_woke(self) -> None:
        """The reader's wait for ``sock`` after ``read_now`` ended."""
        self.reader_waiting = False
        self._woke = True

    async def borrow_read(self, record: object, lender: Lender) -> tuple[bytes | bytearray | None, bool]:
        if self.reader_waiting:
            self.move_reader_aside()
        data = self.read_nowait()
        if data is not None:
            return data, False
        self.borrower_waiting = record
        try:
            # ``_wait``, inline: an idle connection's waiting handler holds this chain.
            await trio.lowlevel.wait_readable(self.sock)
        except trio.ClosedResourceError:
            if self.sock.fileno() < 0:
                raise
        finally:
            self.borrower_waiting = None
        return (self.read_nowait() if lender.still_wanted() else None), True

    # -- writing ------------------------------------------------------------------------

    def write_nowait(self, data: bytearray) -> int:
        fd = self.sock.fileno()
        if fd < 0:
            return 0
        try:
            return os.write(fd, data)
        except OSError:
            return 0  # full, or broken: the writer waits, or finds the failure

    def writev_nowait(self, parts: list[Any]) -> int:
        try:
            return os.writev(self.sock.fileno(), parts)
        except OSError:
            return 0  # full, or broken: the writer waits, or finds the failure

    async def send_all(self, data: bytearray) -> None:
        """The writer's write, like ``SocketStream.send_all``, through ``_wait``."""
        sock = self.sock
        waited = False
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            try:
                pos += os.write(sock.fileno(), view[pos:])
            except BlockingIOError:
                waited = True
                await self._wait(trio.lowlevel.wait_writable)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    # -- waiting ------------------------------------------------------------------------

    async def _wait(self, wait: Callable[[trio.socket.SocketType], Awaitable[None]]) -> None:
        """``wait(sock)``, which also returns on a wake-up call (the caller looks
        again); a ``ClosedResourceError`` is real only once the socket is closed."""
        try:
            await wait(self.sock)
        except trio.ClosedResourceError:
            if self.sock.fileno() < 0:
                raise

    def _wake_waiters(self) -> None:
        """Wake every task waiting on the socket, to look at its situation again.

        trio has no way to wake one task out of ``wait_readable`` short of a cancel
        scope around every wait, which would tax every wait for this rare event;
        ``notify_closing`` wakes them all and keeps the socket usable.
        Rare: a borrowed receive interrupted by a local close, or the reader moved aside.
        """
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)

    async def after_lending(self, flush_delay: float) -> None:
        """Nothing: the reader's wake-up was a scheduler pass already, and one more
        before it waits on the socket again delays the next exchange of a stream
        that borrows the turn each time (see "Changes measured" in
        benchmarks/RESULTS.md)."""

    def move_reader_aside(self) -> None:
        self._wake_waiters()

    def wake_borrower(self) -> None:
        self._wake_waiters()

    def stop_reader(self) -> None:
        if self.reader_waiting:
            self._wake_waiters()
        self.unpark_reader()  # lent: parked until the turn came back
