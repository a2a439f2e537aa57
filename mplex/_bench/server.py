"""The server side of a benchmark run (see ``mplex._bench.peer``): one TCP connection
on 127.0.0.1, served until the client hangs up.

Per stream (mplex) or per connection (raw), the first byte the client sends chooses
what the server does: ``S`` sink (read to EOF, answer with the byte count, close),
``L`` counted sink (an 8-byte length, then that many bytes, answered with the count:
for a raw TLS connection, which has no half-close) or ``E`` echo (send back whatever
arrives, close at EOF).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import trio

import mplex
from mplex._bench.channel import emit, receive_exactly, secured, tls_context


async def serve_stream(stream: trio.abc.Stream) -> None:
    try:
        await serve_stream_modes(stream)
    except trio.BrokenResourceError:
        pass  # the client went away mid-stream: that ends this stream, not the server


async def serve_stream_modes(stream: trio.abc.Stream) -> None:
    mode = await stream.receive_some(1)
    if mode == b"S":
        count = 0
        while data := await stream.receive_some():
            count += len(data)
        await stream.send_all(count.to_bytes(8, "big"))
    elif mode == b"L":
        left = int.from_bytes(await receive_exactly(stream, 8), "big")
        count = 0
        while count < left and (data := await stream.receive_some()):
            count += len(data)
        await stream.send_all(count.to_bytes(8, "big"))
    elif mode == b"E":
        while data := await stream.receive_some():
            await stream.send_all(data)
    await stream.aclose()


#: Stream limits raised for the idle-streams case; every other limit is the default.
MANY_STREAMS = mplex.Config(max_inbound_streams=20_000, max_outbound_streams=20_000, accept_backlog=20_000)


async def serve_mplex(transport: trio.abc.Stream, config: mplex.Config = MANY_STREAMS) -> None:
    async with mplex.open_muxer(transport, config) as muxer, trio.open_nursery() as nursery:
        # A client that hangs up with our last frames unread makes its kernel reset the
        # connection: the case is over by then (the client checks its own results).
        with contextlib.suppress(trio.BrokenResourceError):
            async for stream in muxer:
                nursery.start_soon(serve_stream, stream)


async def serve_floor(transport: trio.abc.Stream) -> None:
    """Decode Message frames one by one; answer with the byte count at EOF."""
    count = 0
    pending: bytes | bytearray = b""
    while data := await transport.receive_some(256 * 1024):
        data = pending + data if pending else data
        pos, end = 0, len(data)
        while True:
            parsed = _frame_at(data, pos, end)
            if parsed is None:
                break
            start, stop = parsed
            count += stop - start
            pos = stop
        pending = data[pos:]
    await transport.send_all(count.to_bytes(8, "big"))


def _frame_at(data: bytes | bytearray, pos: int, end: int) -> tuple[int, int] | None:
    """A plain per-frame decode: two varints, then the body's bounds."""
    values = []
    for _ in range(2):
        value = shift = 0
        while True:
            if pos >= end:
                return None
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        values.append(value)
    stop = pos + values[1]
    return (pos, stop) if stop <= end else None


async def serve(impl: str, tls: bool, fast_path: bool = True) -> None:
    context = tls_context(server_side=True) if tls else None
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    print(f"READY {port}", flush=True)
    cpu = time.process_time()  # from here on: serving (start-up and imports left out)
    async with trio.open_nursery() as nursery:
        if impl == "raw":
            # One connection per client stream; serve until the client says done.
            async def handle(tcp: trio.SocketStream) -> None:
                conn = await secured(tcp, context, server_side=True)
                if await conn.receive_some(1) == b"Q":
                    nursery.cancel_scope.cancel()
                    return
                await serve_stream_raw(conn)

            nursery.start_soon(trio.serve_listeners, handle, listeners)
        else:
            conn = await secured(await listeners[0].accept(), context, server_side=True)
            if impl == "mplex":
                await serve_mplex(conn, dataclasses.replace(MANY_STREAMS, socket_fast_path=fast_path))
            else:
                await serve_floor(conn)
            nursery.cancel_scope.cancel()
    emit(role="server", cpu_seconds=time.process_time() - cpu)


async def serve_stream_raw(conn: trio.abc.Stream) -> None:
    """A raw connection: the first byte was consumed by the dispatcher; read the mode."""
    await serve_stream(conn)
