"""mplex for trio: many independent byte streams over one connection.

A pure-Python implementation of the libp2p mplex stream multiplexer
(``/mplex/6.7.0``) for trio.  Quick start::

    async with mplex.open_muxer(transport_stream) as muxer:
        stream = await muxer.open_stream()
        await stream.send_all(b"hello")
        await stream.send_eof()
        reply = await stream.receive_some()

The sans-IO core (``Encoder``, ``Decoder``, ``Flag``, ``Frame``, the varint helpers)
never imports trio and can drive any I/O framework; so do the multistream-select
machines (``DialerNegotiation``, ``ListenerNegotiation``), whose trio helpers
``select_protocol`` and ``accept_protocol`` agree on ``/mplex/6.7.0`` (or any protocol)
before a connection or stream is used.
"""

from __future__ import annotations

from ._codec import MAX_MESSAGE_SIZE as MAX_MESSAGE_SIZE
from ._codec import MAX_STREAM_ID as MAX_STREAM_ID
from ._codec import PROTOCOL_ID as PROTOCOL_ID
from ._codec import Decoder as Decoder
from ._codec import Encoder as Encoder
from ._codec import Flag as Flag
from ._codec import Frame as Frame
from ._config import Config as Config
from ._config import SlowReaderPolicy as SlowReaderPolicy
from ._errors import ConnectionLost as ConnectionLost
from ._errors import EndReason as EndReason
from ._errors import MuxerClosed as MuxerClosed
from ._errors import StreamReset as StreamReset
from ._exceptions import FrameTooLargeError as FrameTooLargeError
from ._exceptions import InvalidVarintError as InvalidVarintError
from ._exceptions import MplexError as MplexError
from ._exceptions import ProtocolError as ProtocolError
from ._exceptions import UnknownFlagError as UnknownFlagError
from ._multistream import MAX_PROTOCOL_MESSAGE_SIZE as MAX_PROTOCOL_MESSAGE_SIZE
from ._multistream import MULTISTREAM_PROTOCOL_ID as MULTISTREAM_PROTOCOL_ID
from ._multistream import DialerNegotiation as DialerNegotiation
from ._multistream import ListenerNegotiation as ListenerNegotiation
from ._multistream import NegotiationError as NegotiationError
from ._multistream import ProtocolNotSupportedError as ProtocolNotSupportedError
from ._muxer import Muxer as Muxer
from ._muxer import MuxerStats as MuxerStats
from ._muxer import open_muxer as open_muxer
from ._negotiation import accept_protocol as accept_protocol
from ._negotiation import select_protocol as select_protocol
from ._serve import StreamHandler as StreamHandler
from ._serve import serve_connection as serve_connection
from ._serve import serve_listeners as serve_listeners
from ._serve import serve_tcp as serve_tcp
from ._stream import MplexStream as MplexStream
from ._varint import decode_uvarint as decode_uvarint
from ._varint import encode_uvarint as encode_uvarint

__version__ = "0.1.0"

__all__ = [
    "MAX_MESSAGE_SIZE",
    "MAX_PROTOCOL_MESSAGE_SIZE",
    "MAX_STREAM_ID",
    "MULTISTREAM_PROTOCOL_ID",
    "PROTOCOL_ID",
    "Config",
    "ConnectionLost",
    "Decoder",
    "DialerNegotiation",
    "Encoder",
    "EndReason",
    "Flag",
    "Frame",
    "FrameTooLargeError",
    "InvalidVarintError",
    "ListenerNegotiation",
    "MplexError",
    "MplexStream",
    "Muxer",
    "MuxerClosed",
    "MuxerStats",
    "NegotiationError",
    "ProtocolError",
    "ProtocolNotSupportedError",
    "SlowReaderPolicy",
    "StreamHandler",
    "StreamReset",
    "UnknownFlagError",
    "__version__",
    "accept_protocol",
    "decode_uvarint",
    "encode_uvarint",
    "open_muxer",
    "select_protocol",
    "serve_connection",
    "serve_listeners",
    "serve_tcp",
]


def _show_public_names_as_mplex() -> None:
    """Tracebacks and reprs say ``mplex.StreamReset``, not the private module it is
    defined in (as trio does for its own names)."""
    for name in __all__:
        value = globals()[name]
        if callable(value) and getattr(value, "__module__", "").startswith("mplex."):
            value.__module__ = "mplex"


_show_public_names_as_mplex()
