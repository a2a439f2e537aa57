"""The wire under a connection: one interface (``Transport``), three implementations.

``GenericTransport`` (``generic``) drives any ``trio.abc.Stream`` (noise, memory, a
socket with ``Config.socket_fast_path`` off) through its own ``send_all`` and
``receive_some``; ``SocketTransport`` (``socket``) drives a TCP ``trio.SocketStream``'s
descriptor directly with non-blocking reads and writes, and ``TLSSocketTransport``
(``tls_socket``) does the same with the TLS records of a ``trio.SSLStream`` over one.
``transport_for`` picks one at construction.  A new transport is one new module with
a subclass of ``Transport``.

The reader task (``mplex._trio.reader``) is the one loop that reads, and the writer
(``mplex._trio.writer``) the one that writes: only the writer task awaits ``send_all``.
Where a transport can write without waiting (``write_nowait``), a sending task may hand
it queued bytes on the writer's behalf: the write is synchronous, so nothing can cancel
it half-way, and whatever it does not take stays queued for the writer, in order.

**The read turn.**  Normally the reader task reads the transport and wakes the
receiving tasks.  But a task waiting in ``receive_some`` while no stream has unread
data waits for the peer; if it reads the transport itself, the arrival of the data
wakes the task that wants it directly, one scheduler pass sooner.  It then *borrows*
the read turn: the reader task is moved out of its wait and parks, the borrower reads
once (``borrow_read``) and hands what it read to the engine exactly as the reader
would, and gives the turn back (not on a stream's first receive: see
``Reader.may_lend``).  Transports where this is unsafe or does not pay set
``lends`` to False.
"""

from __future__ import annotations

import trio

from ..._engine.config import Config
from . import tls_socket
from .base import READ_SIZE, Transport
from .generic import GenericTransport
from .socket import POSIX_SOCKETS, SocketTransport

__all__ = ["READ_SIZE", "Transport", "transport_for"]


def transport_for(stream: trio.abc.Stream, config: Config) -> Transport:
    """The socket fast path for a TCP ``trio.SocketStream`` on POSIX, or a
    ``trio.SSLStream`` over one (unless ``Config.socket_fast_path`` is off), the
    generic path for everything else."""
    if config.socket_fast_path and POSIX_SOCKETS:
        if isinstance(stream, trio.SocketStream):
            return SocketTransport(stream)
        if tls_socket.usable(stream):
            return tls_socket.TLSSocketTransport(stream)  # type: ignore[arg-type]
    return GenericTransport(stream)
