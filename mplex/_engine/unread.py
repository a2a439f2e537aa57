"""What was received and not read yet (sans-IO): each stream's ``ReceiveBuffer``, and the
connection's ``UnreadAccount`` of every stream's unread bytes together.

Small pieces that pile up unread are merged into one chunk of up to ``_MERGE_BELOW``
bytes, so unread data costs about its size in memory, not an object per frame (a peer
sending one byte per read would otherwise make the limits count a twentieth of what is
held).  Every byte is counted from the moment it is delivered until it is read or
dropped, so what ``Config.max_connection_buffer`` bounds is what the program holds: a
piece partly read is kept whole only while the rest is more than half of it, then the
rest is copied out, so a stream holds at most twice its unread bytes.  A
large piece may arrive as a view of the transport read it came in, which ``take``
copies once, as it would have to copy a piece of its own; the engine has every view
still unread replaced by a copy (``own``) before the next read goes in, so views keep
at most that one read alive.  The engine keeps the account; a buffer only holds bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Set
from typing import Generic, TypeVar

__all__ = ["PRIME_BLOCK", "ReceiveBuffer", "UnreadAccount", "prime_allocator"]

#: Received pieces shorter than this are merged while unread.
_MERGE_BELOW = 4096

#: The block ``prime_allocator`` frees: above the largest buffer a bulk receive
#: allocates (reads of 256 KiB, the joins of up to Config.max_stream_buffer plus one).
PRIME_BLOCK = 2 * 1024 * 1024

T = TypeVar("T")


class UnreadAccount(Generic[T]):
    """All streams' unread bytes, and the streams (``T``) over their own limit."""

    __slots__ = ("_overfull", "max_connection", "max_stream", "total")

    def __init__(self, max_stream: int, max_connection: int) -> None:
        #: ``Config.max_stream_buffer`` and ``Config.max_connection_buffer``.
        self.max_stream = max_stream
        self.max_connection = max_connection
        #: Unread bytes of every stream together.
        self.total = 0
        # The streams over their own limit: made when the first goes over, as most
        # connections never have one, and an empty set would cost each of them memory.
        self._overfull: set[T] | None = None

    @property
    def overfull(self) -> Set[T]:
        """Streams holding more than ``max_stream`` unread bytes (under a blocking
        policy)."""
        return self._overfull if self._overfull is not None else frozenset()

    def mark_overfull(self, owner: T) -> None:
        """``owner`` holds more than ``max_stream`` unread bytes."""
        if self._overfull is None:
            self._overfull = set()
        self._overfull.add(owner)

    def take(self, buffer: ReceiveBuffer, owner: T, max_bytes: int | None) -> bytes:
        """Up to ``max_bytes`` of ``owner``'s unread bytes (its ``buffer``, not empty)."""
        data = buffer.take(max_bytes)
        self.total -= len(data)
        if self._overfull and buffer.size <= self.max_stream:
            self._overfull.discard(owner)
        return data

    def drop(self, buffer: ReceiveBuffer, owner: T) -> int:
        """Drop all of ``owner``'s unread bytes (its ``buffer``); how many there were."""
        dropped = buffer.discard()
        if dropped:
            self.total -= dropped
            if self._overfull:
                self._overfull.discard(owner)
        return dropped

    def over_limits(self) -> bool:
        """True while the reader must not read: a stream is over its limit, or all
        streams together are over the connection's."""
        return bool(self._overfull) or self.total > self.max_connection


class ReceiveBuffer:
    """One stream's unread bytes, in the order they arrived."""

    __slots__ = ("_chunks", "_offset", "size")

    def __init__(self) -> None:
        # A list, not a deque: an empty deque takes over 600 bytes, and a stream holds
        # few pieces (small ones are merged; the budget bounds the rest).  None while
        # there are none: an idle stream holds no list.
        self._chunks: list[bytes | bytearray | memoryview] | None = None
        self._offset = 0  # bytes of _chunks[0] already handed out
        #: Unread bytes.
        self.size = 0

    def append(self, data: bytes | memoryview) -> None:
        """Store one received piece."""
        chunks = self._chunks
        if chunks is None:
            self._chunks = [data]
        elif chunks and len(data) < _MERGE_BELOW and len(chunks[-1]) < _MERGE_BELOW:
            last = chunks[-1]
            if type(last) is not bytearray:
                last = chunks[-1] = bytearray(last)
            last += data
        else:
            chunks.append(data)
        self.size += len(data)

    def take(self, max_bytes: int | None) -> bytes:
        """Up to ``max_bytes`` (None: all) unread bytes, as one ``bytes``; the buffer
        must not be empty."""
        chunks = self._chunks
        assert chunks is not None  # (not empty)
        data: bytes | bytearray | memoryview
        if max_bytes is None or max_bytes >= self.size:
            if len(chunks) == 1:
                data = chunks[0][self._offset :] if self._offset else chunks[0]
            else:
                if self._offset:
                    chunks[0] = chunks[0][self._offset :]
                data = b"".join(chunks)
            self._chunks = None
            self._offset = 0
        else:
            pieces = []
            wanted = max_bytes
            while wanted:
                head = chunks[0]
                available = len(head) - self._offset
                if available <= wanted:
                    pieces.append(head[self._offset :] if self._offset else head)
                    del chunks[0]
                    self._offset = 0
                    wanted -= available
                else:
                    end = self._offset + wanted
                    pieces.append(head[self._offset : end])
                    if len(head) - end <= len(head) >> 1:
                        # The piece would be more than twice what is still counted:
                        # keep a copy of the rest instead (each copy at least halves
                        # it, so a piece read bit by bit is copied about once).
                        chunks[0] = memoryview(head)[end:].tobytes()
                        self._offset = 0
                    else:
                        self._offset = end
                    wanted = 0
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if type(data) is not bytes:
            data = bytes(data)  # a merged chunk
        self.size -= len(data)
        return data

    def own(self) -> None:
        """Replace every piece that is a view of a larger chunk with a copy of it."""
        chunks = self._chunks or []
        for i, chunk in enumerate(chunks):
            if type(chunk) is memoryview:
                chunks[i] = bytes(chunk)

    def discard(self) -> int:
        """Drop all unread bytes; return how many there were."""
        dropped = self.size
        if dropped:
            self._chunks = None
            self._offset = 0
            self.size = 0
        return dropped


@functools.cache
def prime_allocator() -> None:
    """Free one ``PRIME_BLOCK`` block, once per process (when the first muxer that
    allows it starts: ``Config.prime_allocator``), so that glibc's malloc keeps
    receive buffers in its heap instead of mapping each one afresh.

    glibc serves every block of 128 KiB or more with a fresh ``mmap`` and unmaps it
    when freed, until the program frees a larger mapped block: it then raises that
    threshold to the block's size and keeps twice as much free memory at the top of
    its heap.  A bulk receive allocates 256 KiB reads and joins of up to a stream's
    buffer, so without this it keeps going through fresh, page-faulted memory.
    ``bytes(n)`` is a ``calloc``, which touches no page of a fresh mapping, so this
    costs one ``mmap`` and one ``munmap``.  Other allocators simply allocate and free
    the block.
    """
    bytes(PRIME_BLOCK)
