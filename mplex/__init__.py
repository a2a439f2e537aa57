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

import functools
import importlib
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._engine.config import Config as Config
    from ._engine.config import SlowReaderPolicy as SlowReaderPolicy
    from ._engine.decoder import Decoder as Decoder
    from ._engine.errors import FrameTooLargeError as FrameTooLargeError
    from ._engine.errors import InvalidVarintError as InvalidVarintError
    from ._engine.errors import MplexError as MplexError
    from ._engine.errors import ProtocolError as ProtocolError
    from ._engine.errors import UnknownFlagError as UnknownFlagError
    from ._engine.multistream import MAX_PROTOCOL_MESSAGE_SIZE as MAX_PROTOCOL_MESSAGE_SIZE
    from ._engine.multistream import MULTISTREAM_PROTOCOL_ID as MULTISTREAM_PROTOCOL_ID
    from ._engine.multistream import DialerNegotiation as DialerNegotiation
    from ._engine.multistream import ListenerNegotiation as ListenerNegotiation
    from ._engine.multistream import NegotiationError as NegotiationError
    from ._engine.multistream import ProtocolNotSupportedError as ProtocolNotSupportedError
    from ._engine.stats import MuxerStats as MuxerStats
    from ._engine.varint import decode_uvarint as decode_uvarint
    from ._engine.varint import encode_uvarint as encode_uvarint
    from ._engine.wire import MAX_MESSAGE_SIZE as MAX_MESSAGE_SIZE
    from ._engine.wire import MAX_STREAM_ID as MAX_STREAM_ID
    from ._engine.wire import PROTOCOL_ID as PROTOCOL_ID
    from ._engine.wire import Encoder as Encoder
    from ._engine.wire import Flag as Flag
    from ._engine.wire import Frame as Frame
    from ._trio.errors import ConnectionLost as ConnectionLost
    from ._trio.errors import EndReason as EndReason
    from ._trio.errors import MuxerClosed as MuxerClosed
    from ._trio.errors import StreamReset as StreamReset
    from ._trio.muxer import Muxer as Muxer
    from ._trio.muxer import open_muxer as open_muxer
    from ._trio.select import accept_protocol as accept_protocol
    from ._trio.select import select_protocol as select_protocol
    from ._trio.serving import IDLE_HANDLER_TASKS as IDLE_HANDLER_TASKS
    from ._trio.serving import LOGGED_HANDLER_ERRORS as LOGGED_HANDLER_ERRORS
    from ._trio.serving import NEGOTIATION_TIMEOUT as NEGOTIATION_TIMEOUT
    from ._trio.serving import StreamHandler as StreamHandler
    from ._trio.serving import serve_connection as serve_connection
    from ._trio.serving import serve_listeners as serve_listeners
    from ._trio.serving import serve_tcp as serve_tcp
    from ._trio.stream import MplexStream as MplexStream
    from ._trio.writer_task import WRITER_IDLES_FOR as WRITER_IDLES_FOR

__version__ = "0.1.0"

#: ``from <home> import <name> as <name>`` in the block above: the one list of the
#: public names and where each lives.
_PUBLIC_IMPORT = re.compile(r"^    from (\.[\w.]+) import (\w+) as \2$", re.MULTILINE)


@functools.cache
def _homes() -> dict[str, str]:
    """Each public name and its module, read from the ``TYPE_CHECKING`` block above
    (once, on first use): the public API is written in one place."""
    source = __loader__.get_source(__name__)  # type: ignore[name-defined]
    if source is None:  # a loader without sources (some freezers): the file itself
        with open(__file__, encoding="utf-8") as file:
            source = file.read()
    return {name: home for home, name in _PUBLIC_IMPORT.findall(source)}


#: Public submodules ``mplex.<name>`` imports on first use (``mplex.libp2p`` needs the
#: ``libp2p`` extra, so it is imported only by name: ``import mplex.libp2p``).
_SUBMODULES = frozenset({"testing"})


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is used."""
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name == "__all__":
        return [*sorted(_homes()), "__version__"]
    home = _homes().get(name)
    if home is None:
        raise AttributeError(f"module 'mplex' has no attribute {name!r}")
    importlib.import_module(home, __name__)
    _publish_loaded()
    return globals()[name]


def _publish_loaded() -> None:
    """Publish every public name whose module is loaded by now (the trio layer loads
    several), so that an error raised before its name is looked up still shows as
    mplex's.  The public submodules (``mplex.testing``, ``mplex.libp2p``) call it too:
    a program that imports only one of them sees ``mplex.StreamReset`` as well."""
    for name, home in _homes().items():
        module = sys.modules.get(__name__ + home)
        if module is not None and name not in globals():
            _publish(name, getattr(module, name))


def __dir__() -> list[str]:
    """The public names only (not this module's own imports)."""
    return sorted({*_homes(), "__version__"} | _SUBMODULES)


def _publish(name: str, value: Any) -> None:
    """Cache ``value`` as ``mplex.<name>``; tracebacks and reprs then say
    ``mplex.StreamReset``, not the private module it is defined in (as trio does)."""
    if callable(value) and getattr(value, "__module__", "").startswith("mplex."):
        value.__module__ = "mplex"
    globals()[name] = value
