"""TLS on the socket fast path: a ``trio.SSLStream`` over a TCP ``trio.SocketStream``,
its records read and written through the socket's descriptor.

``trio.SSLStream`` takes an internal lock around every read and every write, and each
lock costs a scheduler pass even when nobody else holds it; its ``send_all`` also
cannot be cancelled without breaking the stream, so over the generic path every
write waits for the writer task.  Here the ``SSLStream`` does the handshake (and the
closing ``close_notify``); after the handshake this transport drives the same
``ssl.SSLObject`` and memory buffers itself, as the socket path drives a plain
socket: a read is one non-blocking ``os.read`` and a decryption, a write an
encryption and one non-blocking ``os.write``, synchronous, so nothing can cancel it
half-way, and a sending task may write itself.

The ciphertext of a write the kernel did not take whole is kept (``_stash``), with
the number of plaintext bytes it carries (``_stash_plain``): until all of it has
left, ``write_nowait`` reports nothing taken, so the outbox keeps those bytes first,
and the next write (a task's or the writer's) sends the kept ciphertext instead of
encrypting them again.  So records leave whole and in order, however writes are
interleaved or cancelled.

It reads ``SSLStream``'s private ``_ssl_object``, ``_incoming``, ``_outgoing``,
``_delayed_outgoing`` and ``_https_compatible`` (the same in every trio this
library supports); ``usable`` says whether a stream has them, and otherwise the
generic path is taken.
"""

from __future__ import annotations

import contextlib
import os
import ssl

import trio

from .base import READ_SIZE
from .generic import TLS_RECORD
from .socket import SocketTransport

__all__ = ["TLSSocketTransport", "usable"]

_INTERNALS = ("_ssl_object", "_incoming", "_outgoing", "_https_compatible")


def usable(stream: trio.abc.Stream) -> bool:
    """True for a ``trio.SSLStream`` over a TCP ``trio.SocketStream`` whose internals
    this transport knows."""
    return (
        isinstance(stream, trio.SSLStream)
        and isinstance(stream.transport_stream, trio.SocketStream)
        and all(hasattr(stream, name) for name in _INTERNALS)
    )


def _is_eof(exc: BaseException) -> bool:
    """A TLS connection cut without ``close_notify`` (as trio recognises one)."""
    return isinstance(exc, ssl.SSLEOFError) or "UNEXPECTED_EOF_WHILE_READING" in str(exc)


class TLSSocketTransport(SocketTransport):
    """Non-blocking descriptor I/O of TLS records on one TCP socket."""

    __slots__ = ("_incoming", "_outgoing", "_ssl", "_stash", "_stash_plain", "_tls")

    record_size = TLS_RECORD
    #: A large send is queued, not written from the caller's buffers (``writev``): its
    #: bytes are encrypted into new ones anyway.
    max_buffers = 1

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        super().__init__(stream.transport_stream)
        self._tls = stream
        self._ssl: ssl.SSLObject = stream._ssl_object
        self._incoming: ssl.MemoryBIO = stream._incoming
        self._outgoing: ssl.MemoryBIO = stream._outgoing
        # Ciphertext the kernel has not taken yet, and the plaintext bytes at the head
        # of the outbox that it carries.
        self._stash = b""
        self._stash_plain = 0

    async def prepare(self) -> None:
        """The handshake, by the ``SSLStream``; then what it kept back (TLS 1.3
        session tickets a server sends with its first write) leaves first."""
        await self._tls.do_handshake()
        delayed = getattr(self._tls, "_delayed_outgoing", None)
        if delayed:
            self._tls._delayed_outgoing = None
            self._stash = bytes(delayed)
        self._stash += self._outgoing.read()

    # -- reading ------------------------------------------------------------------------

    def read_nowait(self) -> bytes | None:
        """The plaintext that the socket's input makes whole now: None if there is
        none yet, ``b""`` at the end of the input.  Raises on a TLS error."""
        data = self._decrypt()
        if data is not None:
            return data
        try:
            raw = os.read(self.sock.fileno(), READ_SIZE)
        except BlockingIOError:
            return None
        if raw:
            self._incoming.write(raw)
        else:
            self._incoming.write_eof()
        return self._decrypt()

    def _decrypt(self) -> bytes | None:
        """Everything the records received so far hold (None if they hold nothing)."""
        chunks: list[bytes] = []
        ssl_object = self._ssl
        try:
            while True:
                chunk = ssl_object.read(READ_SIZE)
                chunks.append(chunk)
                if not chunk:  # the peer's close_notify
                    break
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:  # the same, as some versions report it
            chunks.append(b"")
        except ssl.SSLError as exc:
            if not (self._tls._https_compatible and _is_eof(exc)):
                raise trio.BrokenResourceError("the TLS connection failed") from exc
            chunks.append(b"")  # a cut without close_notify, taken as an end
        if self._outgoing.pending:  # the TLS layer answers (a key update, say)
            self._stash += self._outgoing.read()
            with contextlib.suppress(OSError):
                self._flush_nowait()  # else with the next write
        if not chunks:
            return None
        return b"".join(chunks) if len(chunks) > 1 else chunks[0]

    # -- writing ------------------------------------------------------------------------

    def _flush_nowait(self) -> bool:
        """Hand the kept ciphertext to the kernel without waiting; True once none is
        left.  Raises ``BlockingIOError`` if the kernel takes none, or the failure."""
        if self._stash:
            sent = os.write(self.sock.fileno(), self._stash)
            self._stash = self._stash[sent:]
        return not self._stash

    def _taken(self, size: int) -> int:
        """Once the kept ciphertext has left: how many of the next ``size`` plaintext
        bytes (at the head of the outbox) it carried, now reported as sent."""
        taken = min(self._stash_plain, size)
        self._stash_plain -= taken
        return taken

    def write_nowait(self, data: bytearray) -> int:
        taken = 0
        try:
            if self.sock.fileno() < 0 or not self._flush_nowait():
                return 0
            taken = self._taken(len(data))
            if len(data) > taken:
                self._ssl.write(memoryview(data)[taken:])
                self._stash = self._outgoing.read()
                self._stash_plain = len(data) - taken
                if self._flush_nowait():
                    taken = len(data)
                    self._stash_plain = 0
        except OSError:
            pass  # full, or broken: the writer waits, or finds the failure
        return taken

    async def send_all(self, data: bytearray) -> None:
        """The writer's write: the kept ciphertext, then the rest of ``data``
        encrypted, waiting for the socket as needed."""
        waited = False
        view = memoryview(data)
        while True:
            try:
                if self._flush_nowait():
                    view = view[self._taken(len(view)) :]
                    if not view:
                        break
                    self._ssl.write(view)
                    self._stash = self._outgoing.read()
                    self._stash_plain = len(view)
                    continue
            except BlockingIOError:
                pass
            waited = True
            await self._wait(trio.lowlevel.wait_writable)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()
