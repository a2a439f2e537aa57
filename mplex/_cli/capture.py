"""What a peer sent, kept by ``mplex dial`` and ``mplex serve``: the first bytes, to say
what the peer speaks when it is not mplex, and with ``--capture FILE`` everything, raw,
in the format ``mplex decode`` reads (a leading multistream-select exchange included:
``decode`` skips it)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import IO, Any

import trio

__all__ = ["CapturingListener", "CapturingStream", "not_mplex"]

#: Bytes of the peer's first input kept for the diagnosis.
FIRST_BYTES = 64
_MULTISTREAM = b"\x13/multistream/1.0.0\n"


class CapturingStream(trio.abc.Stream):
    """``inner``, keeping what it receives: the first ``FIRST_BYTES`` in ``first``, and
    all of it in the file at ``path`` if one is given."""

    def __init__(self, inner: trio.abc.Stream, path: Path | None = None) -> None:
        self.inner = inner
        #: The first bytes the peer sent.
        self.first = bytearray()
        self._file: IO[bytes] | None = path.open("wb") if path is not None else None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if len(self.first) < FIRST_BYTES:
            self.first += data[: FIRST_BYTES - len(self.first)]
        if self._file is not None:
            self._file.write(data)  # a debugging aid: a blocking write is fine here
        return data

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if self._file is not None:
                self._file.close()


class CapturingListener(trio.abc.Listener[trio.abc.Stream]):
    """``inner``'s connections, each captured to ``<path>.<n>`` (n = 1, 2, ...)."""

    def __init__(self, inner: trio.abc.Listener[Any], path: Path, numbers: itertools.count[int]) -> None:
        self.inner = inner
        self._path = path
        self._numbers = numbers

    async def accept(self) -> trio.abc.Stream:
        stream = await self.inner.accept()
        return CapturingStream(stream, self._path.with_name(f"{self._path.name}.{next(self._numbers)}"))

    async def aclose(self) -> None:
        await self.inner.aclose()


def not_mplex(first: bytes | bytearray) -> str | None:
    """Why the peer's first bytes are not mplex, as the end of a sentence, or None if
    they may well be mplex."""
    if first.startswith(_MULTISTREAM):
        return "the peer speaks multistream-select first, as libp2p peers do: add --negotiate"
    head = bytes(first[:16])
    if len(head) >= 4 and all(32 <= byte < 127 or byte in b"\r\n\t" for byte in head):
        # An mplex input opens with a NewStream frame (a header byte, a length, a short
        # name): in practice its first bytes are never all printable text.
        line = bytes(first).split(b"\n")[0].rstrip(b"\r")[:60]
        return f"the peer does not speak mplex (it speaks a text protocol: it sent {line!r})"
    return None
