"""py-libp2p's own session classes over in-memory lower layers.

``SecureSession`` (the class noise, TLS and secio produce) runs over ``MessagePipe``
ends: whole messages, like a decrypted noise channel.  ``InsecureSession``
(plaintext) runs over ``BytePipe`` ends: bytes, ``b""`` at the end.  Both record
what was written, and can be told to fail.
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.io.exceptions import ConnectionClosedError
from libp2p.peer.id import ID
from libp2p.security.insecure.transport import InsecureSession
from libp2p.security.secure_session import SecureSession


class _End:
    """What both fakes share: a record of writes, an injectable failure, closing."""

    def __init__(self) -> None:
        self.written: list[Any] = []
        self.fail_with: BaseException | None = None
        self.stalled = False  # writes never complete (a peer that stopped reading)...
        self.unstalled = trio.Event()  # ...unless a test gives up on them
        self.closed = False
        self.peer: _End | None = None

    def _check(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    async def close(self) -> None:
        self.closed = True
        self._hang_up()
        await trio.lowlevel.checkpoint()

    def _hang_up(self) -> None:
        raise NotImplementedError

    def get_remote_address(self) -> tuple[str, int] | None:
        return ("127.0.0.1", 4001)

    def get_transport_addresses(self) -> list[Any]:
        return []

    def get_connection_type(self) -> Any:
        return None


class MessagePipe(_End):
    """One end of a message channel; the end of input is ``end_error`` (py-libp2p's
    noise layer raises there)."""

    def __init__(
        self, inbox: trio.MemoryReceiveChannel[bytes], outbox: trio.MemorySendChannel[bytes]
    ) -> None:
        super().__init__()
        self.inbox, self.outbox = inbox, outbox
        self.end_error: BaseException = ConnectionClosedError("closed")

    async def write_msg(self, msg: bytes) -> None:
        self._check()
        if self.stalled:
            await self.unstalled.wait()
        self.written.append(msg)
        try:
            await self.outbox.send(msg)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionClosedError("the peer hung up") from exc

    async def read_msg(self) -> bytes:
        self._check()
        try:
            return await self.inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise self.end_error from None

    def _hang_up(self) -> None:
        self.outbox.close()
        self.inbox.close()


class BytePipe(_End):
    """One end of a byte pipe (a plaintext connection): ``b""`` at the end."""

    def __init__(
        self, inbox: trio.MemoryReceiveChannel[bytes], outbox: trio.MemorySendChannel[bytes]
    ) -> None:
        super().__init__()
        self.inbox, self.outbox = inbox, outbox
        self._buffer = b""

    async def write(self, data: bytes) -> None:
        self._check()
        self.written.append(data)
        try:
            await self.outbox.send(bytes(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionClosedError("the peer hung up") from exc

    async def read(self, n: int | None = None) -> bytes:
        self._check()
        if not self._buffer:
            try:
                self._buffer = await self.inbox.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                return b""
        size = len(self._buffer) if n is None else n
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _hang_up(self) -> None:
        self.outbox.close()
        self.inbox.close()


def _pipes(kind: type[_End]) -> tuple[Any, Any]:
    a_out, b_in = trio.open_memory_channel[bytes](1000)
    b_out, a_in = trio.open_memory_channel[bytes](1000)
    a, b = kind(a_in, a_out), kind(b_in, b_out)  # type: ignore[call-arg]
    a.peer, b.peer = b, a
    return a, b


def _identities() -> tuple[Any, Any]:
    return create_new_key_pair(), create_new_key_pair()


def _session_pair(session_class: type[Any], pipe_class: type[_End]) -> tuple[Any, Any, Any, Any]:
    pipe_a, pipe_b = _pipes(pipe_class)
    key_a, key_b = _identities()
    sessions = [
        session_class(
            local_peer=ID.from_pubkey(mine.public_key),
            local_private_key=mine.private_key,
            remote_peer=ID.from_pubkey(theirs.public_key),
            remote_permanent_pubkey=theirs.public_key,
            is_initiator=initiator,
            conn=pipe,
        )
        for mine, theirs, initiator, pipe in ((key_a, key_b, True, pipe_a), (key_b, key_a, False, pipe_b))
    ]
    return sessions[0], sessions[1], pipe_a, pipe_b


def secure_session_pair() -> tuple[SecureSession, SecureSession, MessagePipe, MessagePipe]:
    """(dialer session, listener session, and their message pipes)."""
    return _session_pair(SecureSession, MessagePipe)


def plaintext_session_pair() -> tuple[InsecureSession, InsecureSession, BytePipe, BytePipe]:
    """(dialer session, listener session, and their byte pipes)."""
    return _session_pair(InsecureSession, BytePipe)
