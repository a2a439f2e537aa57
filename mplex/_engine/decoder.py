"""The incremental mplex Decoder (sans-IO).

Theory of operation of the Decoder
----------------------------------
``feed()`` takes whatever chunk the transport produced and returns every frame that
chunk completes.  State carried between calls is small and explicit:

* ``_tail``: up to 17 bytes of a header/length prefix cut by a chunk boundary;
* ``_need``/``_pieces``/``_head``: the body of one frame whose prefix is known, still
  being collected.  Large pieces are kept as they came (the body is joined once, when
  complete: one copy); small ones are appended to one bytearray, so a frame spread
  over many tiny chunks costs its bytes, not an object per chunk.

The declared length is checked against ``max_message_size`` the moment the length
varint is complete, before a single body byte is kept, so a peer cannot make us
buffer more than ``max_message_size`` plus one prefix, whatever it declares.

With ``coalesce=True`` adjacent Message frames of the same stream (same header) in one
chunk come out as one frame whose data is their concatenation.  Frame boundaries carry
no meaning inside an mplex stream, and merging is what lets the muxer hand a reader of
32-byte frames thousands of them per wake-up instead of one.
"""

from __future__ import annotations

from .errors import FrameTooLargeError, ProtocolError, UnknownFlagError
from .runs import RUN_BODY_LIMIT, same_shape_run
from .varint import decode_uvarint
from .wire import MAX_MESSAGE_SIZE, MAX_PREFIX_BYTES, Flag, Frame

__all__ = ["Decoder", "RawFrame"]

RawFrame = tuple[int, bytes | memoryview]
"""(header, body): the Decoder's internal, allocation-light frame form.  The body is
a view of the fed chunk only for a decoder made with ``views=True``."""


class Decoder:
    """Incremental mplex frame decoder.

    Feed it chunks of any size with ``feed()``; it returns the frames they complete.
    It raises ``ProtocolError`` (or a subclass) for input that breaks the protocol;
    after that the decoder must not be used again.
    """

    # fmt: off
    __slots__ = (
        "_have", "_head", "_need", "_offset", "_pieces", "_rest", "_tail", "coalesce",
        "frames_decoded", "frames_per_feed", "max_message_size", "views"
    )
    # fmt: on

    def __init__(
        self,
        max_message_size: int = MAX_MESSAGE_SIZE,
        *,
        coalesce: bool = False,
        frames_per_feed: int | None = None,
        views: bool = False,
    ) -> None:
        if max_message_size < 0:
            raise ValueError("max_message_size must not be negative")
        if frames_per_feed is not None and frames_per_feed < 1:
            raise ValueError("frames_per_feed must be at least 1")
        self.max_message_size = max_message_size
        self.coalesce = coalesce
        #: Most frames one ``feed_raw``/``resume_raw`` call decodes one by one (runs of
        #: equal Message frames taken whole count once); the rest of the chunk waits,
        #: unparsed, for ``resume_raw`` (``pending``).  None: no bound.  This bounds the
        #: work a caller does between two yields, whatever a peer packs into one chunk.
        self.frames_per_feed = frames_per_feed
        #: With ``views=True`` (``feed_raw`` and ``resume_raw`` only), the body of a
        #: Message frame of ``VIEW_AT`` bytes or more that lies whole in the fed chunk
        #: comes out as a view of the chunk, not a copy: a receiver that joins what it
        #: takes then copies each byte once.  The view keeps the whole chunk alive.
        self.views = views
        self._rest: tuple[bytes, int, int] | None = None  # (chunk, position, its offset)
        #: Frames decoded so far (before any coalescing).
        self.frames_decoded = 0
        self._offset = 0  # stream offset of the start of the next fed chunk
        self._tail = b""
        self._need = 0  # body bytes still missing for the frame in progress
        self._head = 0  # that frame's header
        #: See ``_keep`` (None while there are none: an idle connection holds no list).
        self._pieces: list[bytes | bytearray | memoryview] | None = None
        self._have = 0  # bytes in _pieces

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        rest = 0 if self._rest is None else len(self._rest[0]) - self._rest[1]
        return len(self._tail) + self._have + rest

    @property
    def pending(self) -> bool:
        """True while part of a fed chunk waits for ``resume_raw`` (``frames_per_feed``)."""
        return self._rest is not None

    @property
    def offset(self) -> int:
        """How many bytes have been fed so far."""
        return self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Consume ``data`` and return the frames it completes, as ``Frame`` records.

        On a protocol error the exception's ``decoded`` attribute holds the frames
        that the same chunk completed before the error, so nothing valid is lost.
        """
        try:
            raw = self.feed_raw(data)
        except ProtocolError as exc:
            exc.decoded = _frames(exc.decoded)
            raise
        return _frames(raw)

    def feed_raw(self, data: bytes | bytearray | memoryview) -> list[RawFrame]:
        """Like ``feed()``, returning ``(header, body)`` tuples: cheaper on the hot path.

        With ``frames_per_feed`` set, it may stop early: then ``pending`` is True and
        ``resume_raw()`` must be called (until ``pending`` is False) before more data."""
        if self._rest is not None:
            raise RuntimeError("Decoder.resume_raw() first: part of the last chunk is pending")
        if type(data) is not bytes:
            data = bytes(data)
        base = self._offset
        self._offset = base + len(data)
        out: list[RawFrame] = []
        try:
            pos = 0
            if self._need:
                pos = self._continue_body(data, out)
                if self._need:
                    return out
            elif self._tail:
                pos = self._continue_prefix(data, out)
                if pos < 0:
                    return out
            if pos < len(data):
                self._scan(data, pos, base, out)
        except ProtocolError as exc:
            exc.decoded = out
            raise
        return out

    def resume_raw(self) -> list[RawFrame]:
        """The next frames of the chunk that ``feed_raw`` left ``pending``."""
        rest = self._rest
        if rest is None:
            return []
        self._rest = None
        data, pos, base = rest
        out: list[RawFrame] = []
        try:
            self._scan(data, pos, base, out)
        except ProtocolError as exc:
            exc.decoded = out
            raise
        return out

    def body_header(self, data: bytes | bytearray | memoryview) -> int:
        """The header of the frame whose body ``data`` continues without going past
        its end (the middle of a large frame, which a bulk transfer reads a chunk at a
        time), or -1.  Such a chunk may be kept (``absorb``) or handed on (``pass_on``)."""
        return self._head if 0 < len(data) <= self._need else -1

    def absorb(self, data: bytes | bytearray | memoryview) -> bool:
        """Keep ``data`` if it only continues the body of the frame in progress without
        completing it, and return True; otherwise do nothing and return False (then
        ``feed_raw(data)``).  The cheap path for the middle of a large frame, which
        a bulk transfer over TLS delivers one 16 KiB record at a time."""
        size = len(data)
        if type(data) is not bytes or not 0 < size < self._need:
            return False  # (a bytearray or a view would be copied by feed_raw first)
        self._offset += size
        self._need -= size
        if size >= _KEEP_AS_IS:  # _keep(data), inlined: a TLS record, kept as it is
            self._have += size
            if self._pieces is None:
                self._pieces = [data]
            else:
                self._pieces.append(data)
        else:
            self._keep(data)
        return True

    def pass_on(self, data: bytes) -> bytes | None:
        """Count ``data``, which ``body_header`` accepted, as the next bytes of the body
        in progress, which the caller hands on as they are (no copy); return the part
        of the body kept before them, joined, to hand on first (or None).  The frame
        ends here if ``data`` completes it."""
        kept = b"".join(self._pieces) if self._pieces else None
        self._pieces = None
        self._have = 0
        self._offset += len(data)
        self._need -= len(data)
        if not self._need:
            self.frames_decoded += 1
        return kept

    # -- internals ---------------------------------------------------------------------

    def _keep(self, data: bytes, start: int = 0, stop: int | None = None) -> None:
        """Keep ``data[start:stop]`` for the body in progress: as it is (or a view) when
        it is large and at least a quarter of ``data``, else copied into the last piece."""
        piece: bytes | memoryview = data
        size = (len(data) if stop is None else stop) - start
        if start or stop is not None:
            piece = memoryview(data)[start:stop]
        self._have += size
        pieces = self._pieces
        if pieces is None:
            pieces = self._pieces = []
        if size >= _KEEP_AS_IS and 4 * size >= len(data):
            pieces.append(piece)
        elif pieces and type(pieces[-1]) is bytearray:
            pieces[-1] += piece
        else:
            pieces.append(bytearray(piece))

    def _continue_body(self, data: bytes, out: list[RawFrame]) -> int:
        need = self._need
        if len(data) < need:
            self._keep(data)
            self._need = need - len(data)
            return len(data)
        # The body's last piece is joined at once, so a view of it pins nothing.
        last = memoryview(data)[:need] if need < len(data) else data
        pieces = self._pieces
        if pieces is None:
            body = bytes(last)
        else:
            pieces.append(last)
            body = b"".join(pieces)
            self._pieces = None
        self._have = 0
        self._need = 0
        self.frames_decoded += 1
        out.append((self._head, body))
        return need

    def _continue_prefix(self, data: bytes, out: list[RawFrame]) -> int:
        """Finish a prefix split across chunks; return where to resume in ``data`` (-1: not yet)."""
        tail = self._tail
        probe = tail + data[:MAX_PREFIX_BYTES]
        parsed = self._parse_prefix(probe, 0, self._offset - len(data) - len(tail))
        if parsed is None:
            self._tail = probe
            return -1
        header, length, body_start = parsed
        self._tail = b""
        pos = body_start - len(tail)  # body_start > len(tail): the tail alone was incomplete
        end = pos + length
        if end <= len(data):
            self.frames_decoded += 1
            out.append((header, data[pos:end]))
            return end
        self._head = header
        self._need = end - len(data)
        self._keep(data, pos)
        return len(data)

    def _parse_prefix(self, data: bytes, pos: int, base: int) -> tuple[int, int, int] | None:
        """Parse header and length at ``pos``: (header, length, body_start) or None."""
        parsed = decode_uvarint(data, pos)
        if parsed is None:
            return None
        header, after = parsed
        if header & 7 == 7:
            raise UnknownFlagError(header >> 3, offset=base + pos)
        parsed = decode_uvarint(data, after)
        if parsed is None:
            return None
        length, body_start = parsed
        if length > self.max_message_size:
            raise FrameTooLargeError(length, self.max_message_size, offset=base + pos)
        return header, length, body_start

    def _scan(self, data: bytes, pos: int, base: int, out: list[RawFrame]) -> None:
        """Decode every frame in ``data[pos:]``; keep what is left for the next feed."""
        n = len(data)
        limit = self.max_message_size
        coalesce = self.coalesce
        append = out.append
        run_header = -1  # header of the run of Message frames being merged
        run: list[bytes] = []
        count = 0
        steps_left = self.frames_per_feed or -1
        views = self.views
        whole: memoryview | None = None  # ``data`` as a view, once a body needs one
        try:
            while pos < n:
                if not steps_left:
                    self._rest = (data, pos, base)  # the caller yields, then resumes
                    return
                steps_left -= 1
                # Fast path: a header of up to three bytes (stream ids below 262,144)
                # and a length of up to three (bodies below 2 MiB), read inline;
                # anything else, or an encoding to reject, takes _parse_prefix.
                h = data[pos]
                p = pos + 1
                start = -1
                if h >= 0x80:
                    p = n  # unless a minimal two- or three-byte header follows
                    if pos + 2 < n:  # (and at least a length byte after it)
                        b = data[pos + 1]
                        if 0 < b < 0x80:
                            h = (h & 0x7F) | b << 7
                            p = pos + 2
                        elif b >= 0x80 and pos + 3 < n and 0 < (c := data[pos + 2]) < 0x80:
                            h = (h & 0x7F) | (b & 0x7F) << 7 | c << 14
                            p = pos + 3
                if p < n and h & 7 != 7:
                    length = data[p]
                    if length < 0x80:
                        start = p + 1
                    elif p + 1 < n and 0 < (b := data[p + 1]) < 0x80:
                        length = (length & 0x7F) | b << 7
                        start = p + 2
                    elif p + 2 < n and b >= 0x80 and 0 < (c := data[p + 2]) < 0x80:
                        length = (length & 0x7F) | (b & 0x7F) << 7 | c << 14
                        start = p + 3
                if start >= 0:
                    if length > limit:
                        raise FrameTooLargeError(length, limit, offset=base + pos)
                else:
                    parsed = self._parse_prefix(data, pos, base)
                    if parsed is None:
                        self._tail = data[pos:]
                        return
                    h, length, start = parsed
                end = start + length
                if end > n:
                    self._head = h
                    self._need = end - n
                    self._keep(data, start)
                    return
                count += 1
                frame_start = pos
                pos = end
                if coalesce and length < VIEW_AT and (h & 7 == 1 or h & 7 == 2):
                    if h != run_header:
                        if run:
                            append((run_header, run[0] if len(run) == 1 else b"".join(run)))
                            run = []
                        if end >= n or data[end] != data[frame_start]:
                            # The next frame has another header (its first byte differs):
                            # a lone message, the request/response case, needs no run.
                            run_header = -1
                            append((h, data[start:end]))
                            continue
                        run_header = h
                    run.append(data[start:end])
                    # The next frame has the same prefix: a run of one stream's equal
                    # writes (the many-small-messages case).  Take it whole, in C.
                    if 0 < length <= RUN_BODY_LIMIT:
                        prefix = data[frame_start:start]
                        if data.startswith(prefix, end):
                            taken = same_shape_run(data, end, n, prefix, end - frame_start)
                            if taken:
                                run.append(taken[0])
                                count += taken[1]
                                pos = end + taken[1] * (end - frame_start)
                    continue
                if run:
                    append((run_header, run[0] if len(run) == 1 else b"".join(run)))
                    run_header = -1
                    run = []
                if views and length >= VIEW_AT and (h & 7 == 1 or h & 7 == 2):
                    if whole is None:
                        whole = memoryview(data)
                    append((h, whole[start:end]))
                else:
                    append((h, data[start:end]))
        finally:
            self.frames_decoded += count
            if run:
                append((run_header, run[0] if len(run) == 1 else b"".join(run)))


def _frames(raw: list[RawFrame]) -> list[Frame]:
    return [Frame(h >> 3, Flag(h & 7), body if type(body) is bytes else bytes(body)) for h, body in raw]


#: Message bodies this large are never merged with their neighbours (merging would
#: copy them), and with ``views=True`` come out as views of their chunk.
VIEW_AT = 16 * 1024

#: A piece of a body in progress this large (and at least a quarter of its chunk: a
#: view pins the whole chunk until the body is complete) is kept as it came, not
#: copied: the body is joined once it is complete.
_KEEP_AS_IS = 4096
