"""multistream-select 1.0.0, sans-IO: agree on a protocol before speaking it.

libp2p runs it twice: on a fresh connection, to agree on the muxer (``/mplex/6.7.0``),
and on every new muxed stream, to agree on the application protocol.  Each message
is a varint length, then a UTF-8 protocol id, then ``\\n``; the length counts the
newline.  Both sides send the header ``/multistream/1.0.0``; the dialer proposes ids
in order of preference, and the listener echoes the one it accepts or answers
``na``.  ``ls`` asks the listener for its ids.

Two machines, ``DialerNegotiation`` and ``ListenerNegotiation``, hold the whole
exchange.  They never read ahead: ``bytes_wanted`` says how many bytes the next read
may take without swallowing the first bytes of the protocol that follows, so the
I/O layer can hand over the same connection, untouched, once a protocol is chosen.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InvalidVarintError, MplexError
from .varint import decode_uvarint, encode_uvarint

__all__ = [
    "MAX_PROPOSALS",
    "MAX_PROTOCOL_MESSAGE_SIZE",
    "MULTISTREAM_PROTOCOL_ID",
    "DialerNegotiation",
    "ListenerNegotiation",
    "NegotiationError",
    "ProtocolNotSupportedError",
    "encode_message",
    "leading_handshake",
]

#: The header both sides send first.
MULTISTREAM_PROTOCOL_ID = "/multistream/1.0.0"
#: The largest message, newline included, that go-multistream and js accept (1024);
#: a protocol id can therefore be at most 1023 bytes of UTF-8.
MAX_PROTOCOL_MESSAGE_SIZE = 1024
#: Proposals a listener answers before it gives up on a dialer that never finds a
#: protocol: each costs a round trip and nothing else, but a negotiation must end.
MAX_PROPOSALS = 100
NOT_AVAILABLE = "na"
LIST = "ls"
# A length up to 1024 takes at most 2 varint bytes; a third byte means it is too long.
_MAX_LENGTH_BYTES = 2


class NegotiationError(MplexError):
    """multistream-select failed: a malformed message, an unexpected answer or a limit."""


class ProtocolNotSupportedError(NegotiationError):
    """The listener answered ``na`` to every protocol the dialer proposed."""

    def __init__(self, protocols: Sequence[str]) -> None:
        super().__init__(f"the peer supports none of {list(protocols)!r}")
        self.protocols = list(protocols)


def encode_message(text: str) -> bytes:
    """One multistream message: varint length, ``text`` in UTF-8, newline.

    Raises ``ValueError`` for text that holds a newline or whose message would exceed
    ``MAX_PROTOCOL_MESSAGE_SIZE``, before anything reaches the wire: peers reject such
    a message, and the error is clearer here.
    """
    body = text.encode() + b"\n"
    if b"\n" in body[:-1]:
        raise ValueError(f"a protocol id cannot contain a newline: {text!r}")
    if len(body) > MAX_PROTOCOL_MESSAGE_SIZE:
        raise ValueError(
            f"protocol id of {len(body) - 1} bytes is over the limit of {MAX_PROTOCOL_MESSAGE_SIZE - 1}"
        )
    return encode_uvarint(len(body)) + body


def _encode_list(protocols: Sequence[str]) -> bytes:
    """The answer to ``ls``: one message holding each id as a message, then a newline
    (the form go-multistream and js-libp2p send)."""
    body = b"".join(encode_message(p) for p in protocols) + b"\n"
    return encode_uvarint(len(body)) + body


class _MessageReader:
    """Incremental reader of multistream messages that never asks for a byte too many."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._length: int | None = None

    @property
    def bytes_wanted(self) -> int:
        """Bytes that may be read now without reading past the current message."""
        if self._length is None:
            return 1
        return self._length - len(self._buffer)

    def feed(self, data: bytes) -> None:
        """Take bytes from the peer; ``next_message`` then parses them."""
        self._buffer += data

    def next_message(self) -> str | None:
        """The next complete message, or ``None`` until more bytes arrive.

        One at a time, because whatever follows the final message belongs to the
        protocol just chosen and must stay unparsed.
        """
        if self._length is None:
            try:
                decoded = decode_uvarint(self._buffer)
            except InvalidVarintError as exc:
                raise NegotiationError(f"malformed message length: {exc}") from exc
            if decoded is None:
                if len(self._buffer) >= _MAX_LENGTH_BYTES:
                    raise NegotiationError(self._too_long_message())
                return None
            length, used = decoded
            if length > MAX_PROTOCOL_MESSAGE_SIZE:
                raise NegotiationError(self._too_long_message(length))
            if length == 0:
                raise NegotiationError("empty message: a multistream message ends with a newline")
            del self._buffer[:used]
            self._length = length
        if len(self._buffer) < self._length:
            return None
        body = bytes(self._buffer[: self._length])
        del self._buffer[: self._length]
        self._length = None
        return _decode_body(body)

    @property
    def trailing(self) -> bytes:
        """Bytes received beyond the last complete message."""
        return bytes(self._buffer)

    @staticmethod
    def _too_long_message(length: int | None = None) -> str:
        declared = "more than 16383" if length is None else str(length)
        return f"message declares {declared} bytes, over the limit of {MAX_PROTOCOL_MESSAGE_SIZE}"


def _decode_body(body: bytes) -> str:
    if not body.endswith(b"\n"):
        raise NegotiationError(f"message does not end with a newline: {body[:80]!r}")
    try:
        return body[:-1].decode()
    except UnicodeDecodeError as exc:
        raise NegotiationError(f"protocol id is not UTF-8: {body[:80]!r}") from exc


class _Negotiation:
    """What both roles share: outgoing bytes, the reader, and the outcome."""

    def __init__(self) -> None:
        self._reader = _MessageReader()
        self._outgoing = bytearray()
        self._header_seen = False
        #: The protocol both sides agreed on, once they have.
        self.selected: str | None = None

    @property
    def done(self) -> bool:
        """True once a protocol is selected."""
        return self.selected is not None

    @property
    def bytes_wanted(self) -> int:
        """How many bytes the next read may take without reading past negotiation."""
        return 0 if self.done else self._reader.bytes_wanted

    @property
    def trailing_data(self) -> bytes:
        """Bytes fed after the final message: the first bytes of the chosen protocol."""
        return self._reader.trailing if self.done else b""

    def data_to_send(self) -> bytes:
        """Return, and forget, the bytes waiting to be written to the peer."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        return data

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the peer; raises ``NegotiationError`` when they break the rules."""
        if self.done:
            raise RuntimeError("negotiation is already finished")
        self._reader.feed(data)
        while not self.done and (message := self._reader.next_message()) is not None:
            if not self._header_seen:
                if message != MULTISTREAM_PROTOCOL_ID:
                    raise NegotiationError(
                        f"peer does not speak {MULTISTREAM_PROTOCOL_ID}: it sent {message[:80]!r}"
                    )
                self._header_seen = True
            else:
                self._on_message(message)

    def _on_message(self, message: str) -> None:
        raise NotImplementedError


def leading_handshake(data: bytes, protocol: str) -> tuple[list[str], int] | None:
    """The multistream-select messages at the start of ``data`` that end by agreeing on
    ``protocol``, and the offset where ``protocol``'s bytes begin.

    ``None`` when ``data`` does not start with the multistream header.  For one side
    of a recorded connection (``mplex decode``); raises ``NegotiationError`` when the
    messages are malformed or stop before ``protocol`` is named.
    """
    header = encode_message(MULTISTREAM_PROTOCOL_ID)
    if not data.startswith(header):
        return None
    reader = _MessageReader()
    reader.feed(data)
    messages: list[str] = []
    while (message := reader.next_message()) is not None:
        messages.append(message)
        if message == protocol:
            return messages, len(data) - len(reader.trailing)
    raise NegotiationError(f"the handshake ({', '.join(messages)}) stops before {protocol} is agreed")


def protocol_list(protocols: str | Sequence[str]) -> list[str]:
    """``protocols`` as a list of ids: one ``str`` is one id (never its characters)."""
    if isinstance(protocols, str):
        return [protocols]
    if isinstance(protocols, bytes | bytearray | memoryview):
        raise TypeError("protocol ids are str, not bytes")
    ids = list(protocols)
    for protocol in ids:
        if not isinstance(protocol, str):
            raise TypeError(f"a protocol id is a str, not {type(protocol).__name__}: {protocol!r}")
    return ids


class DialerNegotiation(_Negotiation):
    """The side that proposes protocols, in order of preference.

    Sends the header and the first proposal together, as go and js do, so a
    successful negotiation costs one round trip.
    """

    def __init__(self, protocols: str | Sequence[str]) -> None:
        super().__init__()
        self.protocols = protocol_list(protocols)
        if not self.protocols:
            raise ValueError("propose at least one protocol")
        for protocol in self.protocols:
            encode_message(protocol)  # reject an unsendable id before anything is sent
        self._index = 0
        self._outgoing += encode_message(MULTISTREAM_PROTOCOL_ID) + encode_message(self.protocols[0])

    def _on_message(self, message: str) -> None:
        proposed = self.protocols[self._index]
        if message == proposed:
            self.selected = proposed
        elif message == NOT_AVAILABLE:
            self._index += 1
            if self._index == len(self.protocols):
                raise ProtocolNotSupportedError(self.protocols)
            self._outgoing += encode_message(self.protocols[self._index])
        else:
            raise NegotiationError(f"expected {proposed!r} or 'na', the peer answered {message[:80]!r}")


class ListenerNegotiation(_Negotiation):
    """The side that accepts the first proposal it supports and answers ``na`` to others.

    Sends its header at once, without waiting for the dialer's: go, js and py-libp2p
    all accept that order, and it saves the dialer a wait.
    """

    def __init__(self, protocols: str | Sequence[str], *, max_proposals: int = MAX_PROPOSALS) -> None:
        super().__init__()
        self.protocols = protocol_list(protocols)
        for protocol in self.protocols:
            encode_message(protocol)  # an id we could never send back is a mistake here
        self.max_proposals = max_proposals
        self._proposals = 0
        self._outgoing += encode_message(MULTISTREAM_PROTOCOL_ID)

    def _on_message(self, message: str) -> None:
        if message in self.protocols:
            self.selected = message
            self._outgoing += encode_message(message)
            return
        self._proposals += 1
        if self._proposals > self.max_proposals:
            raise NegotiationError(f"dialer made more than {self.max_proposals} proposals without agreement")
        if message == LIST:
            self._outgoing += _encode_list(self.protocols)
        else:
            self._outgoing += encode_message(NOT_AVAILABLE)
