"""A ``trio.abc.Stream`` over py-libp2p's secured connection (``ISecureConn``)."""

from __future__ import annotations

import trio
from libp2p.abc import ISecureConn
from libp2p.io.exceptions import ConnectionClosedError, IncompleteReadError
from libp2p.security.secure_session import SecureSession

__all__ = ["SecuredConnectionStream"]

#: The largest plaintext one noise transport message carries (65,535 bytes less the
#: 16-byte tag); TLS and secio sessions take it too.
MAX_SECURE_MESSAGE = 65535 - 16

_READ_SIZE = 65536

# Every way py-libp2p's layers say "the input ended" (a plain session also returns b"").
_END_OF_INPUT = (ConnectionClosedError, IncompleteReadError, EOFError)


class SecuredConnectionStream(trio.abc.Stream):
    """A py-libp2p secured connection as a ``trio.abc.Stream``, for any trio framework.

    py-libp2p's sessions read in two ways.  An encrypted ``SecureSession`` (noise,
    TLS, secio) reads exactly ``n`` bytes for ``read(n)`` and one decrypted message
    (or what is buffered) for ``read(None)``: this stream uses the latter, so a
    receive never waits for more than the peer has sent.  Other sessions (plaintext)
    read up to ``n`` bytes.  Every form of end of input becomes ``b""``; every other
    py-libp2p error becomes ``trio.BrokenResourceError`` with the error as its cause.
    Writes go out as ``bytes`` of at most ``MAX_SECURE_MESSAGE`` per call, since
    noise encrypts nothing else.
    """

    def __init__(self, conn: ISecureConn) -> None:
        self.conn = conn
        self._whole_messages = isinstance(conn, SecureSession)
        self._leftover = b""
        self._closed = False
        self._sending = False
        self._receiving = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` as bytes, one secure message per ``MAX_SECURE_MESSAGE``."""
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._check_open()
        self._sending = True
        try:
            view = memoryview(data).cast("B")
            if not view:
                await trio.lowlevel.checkpoint()
                return
            write = self.conn.write
            for start in range(0, len(view), MAX_SECURE_MESSAGE):
                try:
                    await write(bytes(view[start : start + MAX_SECURE_MESSAGE]))
                except Exception as exc:  # any py-libp2p layer: the connection failed
                    self._check_open()
                    raise trio.BrokenResourceError(f"the secured connection failed: {exc!r}") from exc
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        """py-libp2p's sessions cannot tell: returns at once (a checkpoint)."""
        self._check_open()
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """What the peer sent next (at most ``max_bytes``), or ``b""`` at the end."""
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self._check_open()
        self._receiving = True
        try:
            if self._leftover:
                await trio.lowlevel.checkpoint()
                data = self._leftover
            else:
                try:
                    data = await self.conn.read(None if self._whole_messages else max_bytes or _READ_SIZE)
                except _END_OF_INPUT:
                    data = b""
                except Exception as exc:  # any py-libp2p layer: the connection failed
                    self._check_open()
                    raise trio.BrokenResourceError(f"the secured connection failed: {exc!r}") from exc
            if max_bytes is not None and len(data) > max_bytes:
                data, self._leftover = data[:max_bytes], data[max_bytes:]
            else:
                self._leftover = b""
            return bytes(data)
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        """Close the secured connection (idempotent; errors while closing are ignored)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            await self.conn.close()
        except Exception:  # already broken: closing it is all that was asked
            pass
        await trio.lowlevel.checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this stream was closed")
