"""The server side of a benchmark run (see ``mplex._bench.peer``): one TCP connection
on 127.0.0.1, served until the client hangs up.

Per stream (mplex) or per connection (raw), the first byte the client sends chooses
what the server does: ``S`` sink (read to EOF, answer with the byte count, close),
``L`` counted sink (an 8-byte length, then that many bytes, answered with the count:
for a raw TLS connection, which has no half-close) or ``E`` echo (send back whatever
arrives, close at EOF).
"""

from __future__ import annotations

import dataclasses
import time

import trio

import mplex

from .channel import emit, secured, tls_context


async def serve_stream(stream: trio.abc.Stream) -> None:
    """One stream (or raw connection), closed at the end."""
    try:
        await serve_stream_modes(stream)
    except trio.BrokenResourceError:
        pass  # the client went away mid-stream: that ends this stream, not the server
    await stream.aclose()


async def serve_stream_modes(stream: trio.abc.Stream) -> None:
    """What the first byte asks for.  The mode comes out of the first chunk read, as
    the js peer takes it, so no mode costs a read of its own."""
    first = await stream.receive_some()
    mode, rest = first[:1], first[1:]
    if mode == b"S":
        count = len(rest)
        while data := await stream.receive_some():
            count += len(data)
        await stream.send_all(count.to_bytes(8, "big"))
    elif mode == b"L":
        head = rest
        while len(head) < 8:
            if not (data := await stream.receive_some()):
                raise RuntimeError("the stream ended inside the length")
            head += data
        left, count = int.from_bytes(head[:8], "big"), len(head) - 8
        while count < left and (data := await stream.receive_some()):
            count += len(data)
        await stream.send_all(count.to_bytes(8, "big"))
    elif mode == b"E":
        if rest:
            await stream.send_all(rest)
        while data := await stream.receive_some():
            await stream.send_all(data)


#: Stream limits raised for the idle-streams case; every other limit is the default.
MANY_STREAMS = mplex.Config(max_inbound_streams=20_000, max_outbound_streams=20_000, accept_backlog=20_000)


async def serve_mplex(transport: trio.abc.Stream, config: mplex.Config = MANY_STREAMS) -> None:
    """The library's own server loop: a handler per stream, closed when it returns."""
    await mplex.serve_connection(serve_stream_modes, transport, config=config)


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
    """A raw connection: the first byte was consumed by the dispatcher; then as a stream."""
    await serve_stream(conn)
