"""The generic path: any ``trio.abc.Stream`` (noise, memory, TLS over anything but a
TCP socket, a socket with ``Config.socket_fast_path`` off), through its own
``send_all`` and ``receive_some``.

Only the writer task writes: a generic stream cannot be written without waiting, and
a write cut short by cancellation would leave part of a frame on the wire, so no
sending task may write itself (``write_nowait`` is None).

The read turn works here with documented trio behaviour only: a task waiting in
``receive_some`` is moved out of its wait by cancelling a cancel scope around that
call.  That is safe only where a cancelled ``receive_some`` had no effect, which trio
guarantees for its own streams (every operation but ``send_all``) but another
implementation need not: a read of a length-prefixed message cancelled half-way loses
the part it read.  So the turn is lent only over transports known to be safe
(``cancel_safe_receive``).  Over ``trio.SSLStream`` it is not lent either: each TLS
read already takes two scheduler passes of its own (``SSLStream`` takes an internal
lock before it reads the socket), so moving the reader out of one costs more passes
than the borrower's direct wake-up saves.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from .._util import wait_for_idle
from .base import READ_SIZE, Lender, Transport

__all__ = ["TLS_RECORD", "GenericTransport", "cancel_safe_receive"]

#: The most plaintext one TLS record carries: each costs the receiver one
#: ``SSLStream.receive_some`` (a scheduler pass), however few bytes it holds.
TLS_RECORD = 16 * 1024


def cancel_safe_receive(stream: trio.abc.ReceiveStream) -> bool:
    """True if a cancelled ``stream.receive_some()`` is known to have had no effect:
    trio's socket and memory streams, and ``SSLStream`` or ``StapledStream`` over one."""
    if isinstance(stream, trio.SSLStream):
        inner = stream.transport_stream
        return not isinstance(inner, trio.SSLStream) and cancel_safe_receive(inner)
    if isinstance(stream, trio.StapledStream):
        return cancel_safe_receive(stream.receive_stream)
    return isinstance(stream, trio.SocketStream | trio.testing.MemoryReceiveStream)


class GenericTransport(Transport):
    """Reads and writes of one ``trio.abc.Stream`` through its own methods."""

    # fmt: off
    __slots__ = (
        "_borrower_scope", "_reader_out", "_reader_scope", "_receive_some", "_send_all", "_stream",
        "record_size"
    )
    # fmt: on

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__()
        self._stream = stream
        self._receive_some = stream.receive_some
        self._send_all = stream.send_all
        self.lends = cancel_safe_receive(stream) and not isinstance(stream, trio.SSLStream)
        self.record_size = TLS_RECORD if isinstance(stream, trio.SSLStream) else 0
        self._reader_scope: trio.CancelScope | None = None
        self._borrower_scope: trio.CancelScope | None = None
        self._reader_out = trio.lowlevel.ParkingLot()

    def reader_call(self) -> Callable[[], Awaitable[bytes | bytearray | None]] | None:
        if self.lends:
            return None
        # Nobody borrows the turn, so nobody needs to know when the reader waits: the
        # reader awaits the stream's own receive_some, one coroutine fewer a read.
        return functools.partial(self._receive_some, READ_SIZE)

    async def send_all(self, data: bytearray) -> None:
        await self._send_all(data)

    def writer_send_all(self) -> Callable[[bytearray], Awaitable[None]]:
        return self._send_all

    async def prepare(self) -> None:
        """Before the reader's first read: finish a TLS handshake, so that a failed one
        is reported as the transport's failure before anything is read."""
        if isinstance(self._stream, trio.SSLStream):
            await self._stream.do_handshake()

    def reading(self) -> trio.CancelScope:
        """A cancel scope for the reader's reads until it is next moved aside (one scope
        for many reads: a scope per read would cost more than the read)."""
        self._reader_scope = trio.CancelScope()
        return self._reader_scope

    async def read(self) -> bytes | bytearray | None:
        self.reader_waiting = True
        try:
            return await self._receive_some(READ_SIZE)
        finally:
            self.reader_waiting = False
            if self._reader_out:
                self._reader_out.unpark_all()

    async def borrow_read(self, record: object, lender: Lender) -> tuple[bytes | bytearray | None, bool]:
        waited = False
        if self.reader_waiting:
            self.move_reader_aside()
            waited = True
            while self.reader_waiting:  # it may hand what it read meanwhile to the engine
                await self._reader_out.park()
        if not lender.still_wanted():
            return None, waited
        self.borrower_waiting = record
        try:
            with trio.CancelScope() as scope:
                self._borrower_scope = scope
                return await self._receive_some(READ_SIZE), True
            return None, True  # woken to look at its stream again
        finally:
            self._borrower_scope = None
            self.borrower_waiting = None

    def move_reader_aside(self) -> None:
        if self._reader_scope is not None:
            self._reader_scope.cancel()

    def wake_borrower(self) -> None:
        if self._borrower_scope is not None:
            self._borrower_scope.cancel()

    async def after_lending(self, flush_delay: float) -> None:
        """The task that gave the turn back is usually about to take it again (a
        request/response loop): let it, until the program goes idle (at most
        ``flush_delay``), before the reader waits in the transport and moving it out
        again would mean cancelling that wait."""
        with trio.move_on_after(flush_delay):
            await wait_for_idle()
