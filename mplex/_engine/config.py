"""Limits and policies of one mplex connection (sans-IO).

Every number that bounds memory or work is a field here, with its reason.  A
``Config`` is frozen and validated when built, so a bad value fails at start-up,
not in the middle of a transfer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from .wire import MAX_MESSAGE_SIZE

__all__ = ["Config", "SlowReaderPolicy"]

SlowReaderPolicy = Literal["block", "reset", "block-then-reset"]
"""What to do when a stream's reader falls behind: see ``Config.slow_reader_policy``."""
_POLICIES = ("block", "reset", "block-then-reset")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """The limits of one mplex connection.  Every field has a safe default.

    Fields (the comment above each field in the source gives the reason for its default):

    * ``max_message_size``: largest frame body accepted (1 MiB, at most 1 GiB); more closes
      the connection.
    * ``max_send_frame_size``: largest frame body sent (64 KiB); longer writes are split.
    * ``send_high_water``: queued outbound bytes before senders wait (256 KiB).
    * ``max_stream_buffer``: unread bytes per stream before the slow-reader policy (1 MiB).
    * ``max_connection_buffer``: unread bytes of all streams together (16 MiB).
    * ``slow_reader_policy``: ``"block"`` (default), ``"reset"`` or ``"block-then-reset"``.
    * ``slow_reader_timeout``: seconds ``"block-then-reset"`` waits (5).
    * ``max_inbound_streams`` / ``max_outbound_streams``: open streams each way (1024).
    * ``accept_backlog``: streams waiting for ``accept_stream`` (1024).
    * ``accept_grace``: seconds unaccepted streams may hold up the reader (0.1).
    * ``max_stream_name_size``: longest stream name we send, and bytes of a peer's kept (1024).
    * ``max_flush_delay``: longest a frame waits when the program never idles (2 ms).
    * ``close_timeout``: seconds ``aclose()`` may spend flushing, and that the input
      may stay silent after a failed write before the connection ends (5).
    * ``handshake_timeout``: seconds the transport's handshake (TLS) may take when the
      muxer starts (15).
    * ``abuse_window``, ``max_unknown_stream_frames``, ``max_refused_streams``,
      ``max_resets_received``, ``max_ignored_frames``: abuse budgets per sliding window
      (10 s; 1,000; 10,000; 10,000; 10,000); going over one closes the connection with
      a ``ProtocolError``.  Frames for finished streams count as ignored frames.
    * ``frames_per_yield``: frames the reader dispatches before it yields (1024).
    * ``socket_fast_path``: drive a ``trio.SocketStream``'s descriptor directly, or
      the one under a ``trio.SSLStream`` (True).
    * ``prime_allocator``: tune glibc's malloc for large buffers when the first muxer
      starts (True).

    Raises ``TypeError`` when a value has the wrong type (integer fields take ``int``
    only, switches ``bool``) and ``ValueError`` when it is out of range; the message names the field.
    """

    #: Largest frame body accepted.  A frame declaring more is a protocol error that
    #: closes the connection, detected before any body byte is buffered.  1 MiB is the
    #: spec's "up to 1MiB per message" and what go, rust and js enforce.
    max_message_size: int = MAX_MESSAGE_SIZE

    #: Largest frame body we send; longer writes are split.  64 KiB keeps the per-frame
    #: cost negligible for bulk data while letting other streams' frames interleave
    #: (go uses 4076 bytes, rust 8 KiB, js 1 MiB).  Never above 1 MiB.
    max_send_frame_size: int = 64 * 1024

    #: Unsent bytes the connection queues before ``send_all`` waits and ``send_nowait``
    #: raises ``trio.WouldBlock``.  256 KiB is a few socket buffers' worth: enough to
    #: keep the transport busy, small enough that a new frame waits little behind it.
    send_high_water: int = 256 * 1024

    #: Unread bytes one stream may hold before the slow-reader policy applies.
    #: 1 MiB absorbs bursts without letting one stream eat the connection budget.
    max_stream_buffer: int = 1024 * 1024

    #: Unread bytes all streams of the connection may hold together (including
    #: streams still waiting in the accept backlog).  Above it the reader stops
    #: reading the transport until readers catch up: one knob for the worst case.
    max_connection_buffer: int = 16 * 1024 * 1024

    #: What happens when a stream's unread data passes ``max_stream_buffer``:
    #: ``"block"`` stops reading the transport until that stream is read (TCP pushes
    #: back, nothing is lost); ``"reset"`` resets that stream and drops its excess;
    #: ``"block-then-reset"`` blocks up to ``slow_reader_timeout`` seconds, then resets.
    slow_reader_policy: SlowReaderPolicy = "block"

    #: Seconds the reader waits for a slow stream under ``"block-then-reset"``
    #: (go-mplex waits 5 s).
    slow_reader_timeout: float = 5.0

    #: Streams the peer may have open at once; a NewStream beyond it is answered with
    #: a Reset of that stream only.  1024 matches js-libp2p's historical default.  0
    #: refuses every inbound stream (a program that only dials).
    max_inbound_streams: int = 1024

    #: Streams we may have open at once; ``open_stream`` waits for a slot beyond it.
    #: A stream holds its slot until this side closes or resets it (or it ends): a
    #: peer that never closes its side cannot starve ``open_stream``.
    max_outbound_streams: int = 1024

    #: Inbound streams that may wait for ``accept_stream``; a NewStream beyond it is
    #: answered with a Reset of that stream only.  A peer may open a burst of streams
    #: in one packet before our acceptor runs, so the default equals
    #: ``max_inbound_streams``: a waiting stream costs a small object (its data counts
    #: against ``max_connection_buffer``).  go queues 16 and js v12 10, and both lose
    #: streams to ordinary bursts.
    accept_backlog: int = 1024

    #: Seconds the reader waits, when only streams nobody has accepted hold it up (over
    #: ``max_stream_buffer``, or pushing the connection over ``max_connection_buffer``)
    #: and no task is in ``accept_stream``, before it resets them: a program that
    #: never accepts (it only dials) stalls at most this long per flooded stream, and a
    #: server's accept loop, back in ``accept_stream`` within microseconds, never loses
    #: a stream to it.
    accept_grace: float = 0.1

    #: Seconds ``Muxer.aclose()`` spends flushing what was queued before it closes the
    #: transport anyway (a peer that never reads would otherwise hold it open).
    close_timeout: float = 5.0

    #: Seconds a muxer's start may spend in its transport's handshake (TLS over
    #: ``trio.SSLStream``): a peer that connects and never starts its handshake must
    #: not hold a connection, or a ``max_connections`` place, for ever.  go-libp2p's
    #: upgrader allows 15 s too.  Transports without a handshake skip it.
    handshake_timeout: float = 15.0

    #: Longest stream name, in bytes.  ``open_stream`` refuses a longer one with
    #: ``ValueError`` before anything is taken or sent (names are for debugging only;
    #: libp2p sends the stream number); of a peer's name this much is kept and the rest
    #: read and dropped.  Our names must also fit one frame (``max_send_frame_size``).
    max_stream_name_size: int = 1024

    #: Longest time, in seconds, a queued frame waits for the writer when the program
    #: never goes idle.  Normally frames leave as soon as every task is blocked; this
    #: bounds the delay when some other task keeps the scheduler busy.
    max_flush_delay: float = 0.002

    #: Abuse budgets, each counted over a sliding window of ``abuse_window`` seconds;
    #: going over one closes the connection with a ``ProtocolError`` naming it.
    abuse_window: float = 10.0

    #: Frames for streams that never existed (frames for streams that finished count
    #: against ``max_ignored_frames``).  A legitimate peer sends none; 1,000 per window
    #: leaves room for a peer with bugs.
    max_unknown_stream_frames: int = 1_000

    #: NewStream frames refused because a stream limit or the accept backlog was full.
    #: An honest but eager peer opens a burst beyond our limits before the first Reset
    #: reaches it (3,000 requests at once against the 1,024 streams allowed refuse
    #: about 2,000): each refusal costs us one Reset frame, so such a burst must not
    #: take the requests already in flight down with the connection.  Ten times the
    #: stream limit still ends a peer that keeps opening what it is told to reset.
    max_refused_streams: int = 10_000

    #: Resets from the peer.  Resets are ordinary (every cancelled request sends one),
    #: so the budget is high: it only stops open-and-reset storms.
    max_resets_received: int = 10_000

    #: Frames that change nothing: zero-length Messages, repeated Closes, data after
    #: the peer's own Close, and any frame for a stream that has finished (a few cross
    #: a close or reset; a flood of them is an attack).  Each costs the event loop more
    #: than the two bytes of wire it takes, so a flood of them is a cheap attack.
    #: (Adjacent Message frames of one stream in one read count once.)
    max_ignored_frames: int = 10_000

    #: Most frames the reader dispatches before it lets other tasks run.  One read can
    #: hold a hundred thousand tiny frames; without a bound, another connection's ping
    #: would wait for all of them.  (Adjacent Message frames of one stream count once.)
    frames_per_yield: int = 1024

    #: Over a ``trio.SocketStream`` on POSIX, or a ``trio.SSLStream`` over one, read and
    #: write the socket's descriptor directly (``os.read``/``os.write``/``os.writev``,
    #: only ever non-blocking; TLS records through the stream's own ``ssl.SSLObject``
    #: once it has done the handshake) instead of through the stream's methods: one
    #: scheduler pass less per message.  False runs the generic path that every other
    #: transport (noise, memory) runs.
    socket_fast_path: bool = True

    #: When the first muxer of the process starts, allocate and free one 2 MiB block:
    #: glibc's malloc then keeps large receive buffers in its heap instead of mapping
    #: each one afresh (bulk receives fault far fewer pages).  It changes the process's
    #: allocator behaviour, as any program that frees such a block does; False skips it.
    prime_allocator: bool = True

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in _SWITCHES:
                if type(value) is not bool:
                    raise TypeError(f"Config.{field.name} must be True or False, got {value!r}")
            elif field.name != "slow_reader_policy":
                _check_number(field.name, field.type, value)
        if self.max_send_frame_size > MAX_MESSAGE_SIZE:
            raise ValueError(
                f"Config.max_send_frame_size must be at most {MAX_MESSAGE_SIZE} (1 MiB), "
                f"the largest frame every peer accepts; got {self.max_send_frame_size}"
            )
        if not isinstance(self.slow_reader_policy, str) or self.slow_reader_policy not in _POLICIES:
            raise ValueError(
                f"Config.slow_reader_policy must be one of {_POLICIES}, got {self.slow_reader_policy!r}"
            )
        if self.max_message_size > LARGEST_MESSAGE_SIZE:
            raise ValueError(
                f"Config.max_message_size must be at most {LARGEST_MESSAGE_SIZE} (1 GiB): a peer may "
                f"make us hold one whole body that large; got {self.max_message_size}"
            )
        if self.max_connection_buffer < self.max_stream_buffer:
            raise ValueError("Config.max_connection_buffer must be >= max_stream_buffer")


#: The most ``Config.max_message_size`` may allow.
LARGEST_MESSAGE_SIZE = 1 << 30

#: Fields that are on/off switches.
_SWITCHES = frozenset({"socket_fast_path", "prime_allocator"})
#: Fields that may be 0: a program that refuses every inbound stream.
_MAY_BE_ZERO = frozenset({"max_inbound_streams"})


def _check_number(name: str, kind: object, value: object) -> None:
    """Integer fields take an ``int`` (not a bool), the others a finite real number;
    all are positive (or, for the fields in ``_MAY_BE_ZERO``, non-negative)."""
    if kind in ("int", int):
        if type(value) is bool or not isinstance(value, int):
            raise TypeError(f"Config.{name} must be an int, got {value!r} ({type(value).__name__})")
    elif type(value) is bool or not isinstance(value, int | float):
        raise TypeError(f"Config.{name} must be a number of seconds, got {value!r} ({type(value).__name__})")
    elif not math.isfinite(value):
        raise ValueError(f"Config.{name} must be finite, got {value!r}")
    if name in _MAY_BE_ZERO:
        if value < 0:
            raise ValueError(f"Config.{name} must be 0 or more, got {value!r}")
    elif not value > 0:
        raise ValueError(f"Config.{name} must be positive, got {value!r}")
