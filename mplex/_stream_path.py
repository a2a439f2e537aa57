"""The generic transport path: any ``trio.abc.Stream`` (TLS, noise, memory, a socket
with ``Config.socket_fast_path`` off), through its own ``receive_some``.

The read turn (see ``_read_turn``) works here as over the socket path, with documented
trio behaviour only: a task waiting in ``receive_some`` is moved out of its wait by
cancelling a cancel scope around that one call.  That is safe only where a cancelled
``receive_some`` had no effect, which trio guarantees for its own streams (every
operation but ``send_all``) but another implementation need not: a read of a
length-prefixed message cancelled half-way loses the part it read.  So the turn is
lent only over transports known to be safe (``cancel_safe_receive``); over any other,
the reader task alone reads, as it always may.

Over ``trio.SSLStream`` the turn is not lent either, although its reads are safe once
the handshake is done: each TLS read already takes two scheduler passes of its own
(``SSLStream`` takes an internal lock before it reads the socket), so moving the
reader out of one costs more passes than the borrower's direct wake-up saves.  The
reader task finishes the handshake first (``prepare``), so that a failed handshake is
reported as the transport's failure before anything is read.
"""

from __future__ import annotations

import trio
import trio.testing

from ._read_turn import ReadTurn

__all__ = ["READ_SIZE", "StreamPath", "cancel_safe_receive"]

#: Bytes requested per transport read.  Large enough that thousands of small frames
#: are decoded per wake-up, small enough to keep the unparsed input bounded.
READ_SIZE = 256 * 1024


def cancel_safe_receive(stream: trio.abc.ReceiveStream) -> bool:
    """True if a cancelled ``stream.receive_some()`` is known to have had no effect:
    trio's socket and memory streams, and ``SSLStream`` or ``StapledStream`` over one."""
    if isinstance(stream, trio.SSLStream):
        inner = stream.transport_stream
        return not isinstance(inner, trio.SSLStream) and cancel_safe_receive(inner)
    if isinstance(stream, trio.StapledStream):
        return cancel_safe_receive(stream.receive_stream)
    return isinstance(stream, trio.SocketStream | trio.testing.MemoryReceiveStream)


class StreamPath(ReadTurn):
    """Reads of one ``trio.abc.Stream`` by the reader task or a borrowing task."""

    def __init__(self, transport: trio.abc.Stream) -> None:
        super().__init__()
        self._transport = transport
        #: The transport's own ``receive_some``: the reader task calls it directly,
        #: inside its ``reader_scope``, with ``reader_waiting`` set around the call
        #: and ``reader_left()`` after it.
        self.receive_some = transport.receive_some
        # Receiving tasks borrow the read turn only where that is safe and pays (see above).
        self.lends = cancel_safe_receive(transport) and not isinstance(transport, trio.SSLStream)
        self._reader_scope: trio.CancelScope | None = None
        self._borrower_scope: trio.CancelScope | None = None
        self._reader_out = trio.lowlevel.ParkingLot()

    async def prepare(self) -> None:
        """Before the reader's first read: finish a TLS handshake."""
        transport = self._transport
        if isinstance(transport, trio.SSLStream):
            await transport.do_handshake()

    def reader_scope(self) -> trio.CancelScope:
        """A cancel scope for the reader's reads until it is next moved aside (one
        scope for many reads: a scope per read would cost more than the read)."""
        self._reader_scope = trio.CancelScope()
        return self._reader_scope

    def reader_left(self) -> None:
        """The reader task left its read: wake whoever waits for that."""
        if self._reader_out:
            self._reader_out.unpark_all()

    def move_reader_aside(self) -> None:
        if self._reader_scope is not None:
            self._reader_scope.cancel()

    async def wait_reader_out(self) -> None:
        """Wait until the reader task has left its read (after ``move_reader_aside``)."""
        while self.reader_waiting:
            await self._reader_out.park()

    async def borrower_receive(self) -> bytes | bytearray | None:
        """A borrowing task's read; None if it was woken to look at its stream again."""
        with trio.CancelScope() as scope:
            self._borrower_scope = scope
            try:
                return await self.receive_some(READ_SIZE)
            finally:
                self._borrower_scope = None
        return None

    def wake_borrower(self) -> None:
        if self._borrower_scope is not None:
            self._borrower_scope.cancel()
