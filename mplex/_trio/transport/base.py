"""The interface every transport implements (see the package docstring)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from .._util import NO_CONTEXT
from ..lot import OneTaskLot

__all__ = ["READ_SIZE", "Lender", "Transport"]

#: Bytes requested per transport read.  Large enough that thousands of small frames
#: are decoded per wake-up, small enough to keep the unparsed input bounded.
READ_SIZE = 256 * 1024


class Lender(Protocol):
    """Who lent the read turn (the reader; kept, not a bound method of it, which a
    waiting handler would hold)."""

    def still_wanted(self) -> bool:
        """After the borrowing task's wait: whether it still wants to read."""


class Transport:
    """What the reader and the writer need of the wire; subclasses say how."""

    # fmt: off
    __slots__ = (
        "_reader_lot", "borrower", "borrower_waiting", "lends", "reader_waiting",
        "yield_due"
    )
    # fmt: on

    #: ``"socket"`` or ``"generic"`` (``Muxer.uses_socket_fast_path``).
    kind = "generic"
    #: True where ``write_nowait`` and ``writev_nowait`` work: a sending task may then
    #: write on the writer's behalf.
    writes_without_waiting = False
    #: Most buffers one ``writev_nowait`` takes.
    max_buffers = 1
    #: True where ``stop_reader`` makes the reader task return, as the connection has
    #: ended: then its reads need no cancel scope to end them.
    stops_reader = False
    #: Where the transport sends in records of this many bytes (TLS: 16 KiB), the
    #: writer of a bulk transfer sends whole records (0: no such unit).
    record_size = 0
    #: The socket the reader task waits on itself (``trio.lowlevel.wait_readable``),
    #: where its reads never wait (``read_now``); None where it awaits ``read``.
    sock: trio.socket.SocketType | None = None
    #: Where ``sock`` is set: True while the reader task awaits trio's wait for it
    #: itself, which no receiving task has yet asked to interrupt.  A wake-up call
    #: (``move_reader_aside``) raises in the frame that awaits the wait, and a frame
    #: an exception has passed keeps an object as large as itself: the reader's is
    #: large and lives as long as the connection.  So the first request for the read
    #: turn while the reader waits so is refused (``may_lend``), and from then on the
    #: reader waits through ``wait_readable``, whose small frame takes the wake-up.
    #: Until then (on most idle connections) the reader holds no frame of the
    #: transport's while it waits.
    waits_directly = False

    def __init__(self) -> None:
        #: True where a receiving task may borrow the read turn.
        self.lends = True
        #: The stream record whose receiving task holds the read turn, or None.
        self.borrower: object | None = None
        #: That record again, while its task waits on the transport.
        self.borrower_waiting: object | None = None
        #: True while the reader task waits on the transport.
        self.reader_waiting = False
        #: True after a read that did not wait: the reader yields once before the
        #: next, as trio's own ``receive_some`` does, so a flood cannot starve others.
        self.yield_due = False
        # Where the reader parks while the turn is lent: made when first lent.
        self._reader_lot: OneTaskLot | None = None

    # -- reading ------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the first read (a TLS handshake, say)."""

    def reading(self) -> contextlib.AbstractContextManager[Any]:
        """The context of the reader's reads until it is next moved aside."""
        return NO_CONTEXT

    def reader_call(self) -> Callable[[], Awaitable[bytes | bytearray | None]] | None:
        """The reader task's read, fetched once per run, if not ``read`` itself (None):
        a transport may hand out the underlying call as it is.  (Not a bound method of
        the transport's own: the reader's frame would hold it, memory an idle
        connection keeps, and kept on the transport it would be a reference cycle.)"""
        return None

    async def read(self) -> bytes | bytearray | None:
        """The reader task's read where ``sock`` is None: the bytes (``b""`` at the end
        of input), or None when the reader was moved aside (it looks again)."""
        raise NotImplementedError

    def read_now(self) -> bytes | bytearray | None:
        """The reader task's read where ``sock`` is set, without waiting: the bytes, or
        None when the reader is to wait for ``sock``, call ``reader_woke`` and look
        again."""
        raise NotImplementedError

    async def wait_readable(self) -> None:
        """The reader's wait for ``sock`` once it no longer ``waits_directly``;
        returns on a wake-up call too (the reader looks again)."""
        raise NotImplementedError

    def end_direct_waits(self) -> bool:
        """A receiving task asks for the read turn: the reader waits through
        ``wait_readable`` from now on.  True if the turn may be lent now (the reader
        is not waiting directly)."""
        return True

    def reader_woke(self) -> None:
        """The reader's wait for ``sock`` (after ``read_now``) ended."""
        raise NotImplementedError

    async def borrow_read(self, record: object, lender: Lender) -> tuple[bytes | bytearray | None, bool]:
        """One read in a receiving task that took the turn (``borrower`` is set): the
        bytes or None, and whether it waited.  ``lender.still_wanted()`` says, after a wait,
        whether the task still wants to read (its stream may have data by then)."""
        raise NotImplementedError

    # -- writing ------------------------------------------------------------------------

    async def send_all(self, data: bytearray) -> None:
        """The writer task's write of ``data`` (whole)."""
        raise NotImplementedError

    def writer_send_all(self) -> Callable[[bytearray], Awaitable[None]]:
        """``send_all`` as the writer task calls it (a transport may hand out the
        underlying stream's own method, saving a call per write)."""
        return self.send_all

    def write_nowait(self, data: bytearray) -> int:
        """Write what the kernel takes of ``data`` now, without waiting; how much (only
        where ``writes_without_waiting``).  Never raises: a failure is the writer's to
        find."""
        raise NotImplementedError

    def writev_nowait(self, parts: list[Any]) -> int:
        """Like ``write_nowait``, for at most ``max_buffers`` buffers."""
        raise NotImplementedError

    # -- the read turn ------------------------------------------------------------------

    def move_reader_aside(self) -> None:
        """Make the reader task leave its wait on the transport (it looks again)."""
        raise NotImplementedError

    def wake_borrower(self) -> None:
        """Make the borrowing task leave its wait on the transport (it looks again)."""
        raise NotImplementedError

    def stop_reader(self) -> None:
        """The connection has ended: make the reader task look again, wherever it waits
        on the transport.  Nothing here: without ``stops_reader``, the driver cancels
        the reader's scope instead."""

    def park_reader(self) -> Awaitable[None]:
        """``await park_reader()`` parks the reader task until the borrowing task gives
        the read turn back (the lot's own wait: no frame of ours while it is parked)."""
        lot = self._reader_lot
        if lot is None:
            lot = self._reader_lot = OneTaskLot()
        return lot.park()

    def give_turn_back(self) -> None:
        """The borrowing task is done with the read turn: the reader task takes over."""
        self.borrower = None
        self.unpark_reader()

    def unpark_reader(self) -> None:
        """Wake the reader task if it is parked (the turn was lent)."""
        if self._reader_lot is not None:
            self._reader_lot.unpark()

    async def after_lending(self, flush_delay: float) -> None:
        """What the reader does when the turn comes back, before it reads again."""
        await trio.lowlevel.cancel_shielded_checkpoint()
