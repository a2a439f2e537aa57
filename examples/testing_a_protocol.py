"""Testing a protocol of your own with ``mplex.testing.open_muxer_pair``.

The protocol: the client opens a stream per lookup, sends a key and half-closes; the
server answers with the value, or with nothing and a reset for an unknown key.  The
tests below drive both ends in one process, without a socket; run them with pytest and
pytest-trio (``trio_mode = true``), or as this program, which runs each once.
"""

import trio

import mplex
import mplex.testing

TABLE = {b"alice": b"+1 555 0100", b"bob": b"+1 555 0199"}


async def serve_lookups(stream: mplex.MplexStream) -> None:
    key = b""
    while data := await stream.receive_some():
        key += data
    if key in TABLE:
        await stream.send_all(TABLE[key])
        await stream.aclose()
    else:
        stream.reset()


async def lookup(muxer: mplex.Muxer, key: bytes) -> bytes | None:
    stream = await muxer.open_stream("lookup")
    await stream.send_all(key)
    await stream.send_eof()
    value = b""
    try:
        while data := await stream.receive_some():
            value += data
    except mplex.StreamReset:
        return None
    return value


async def serve(muxer: mplex.Muxer) -> None:
    """The server's side: a task per lookup, until the connection ends."""
    async with trio.open_nursery() as nursery:
        async for stream in muxer:
            nursery.start_soon(serve_lookups, stream)


async def test_a_known_key_gets_its_value() -> None:
    async with mplex.testing.open_muxer_pair() as (client, server), trio.open_nursery() as nursery:
        nursery.start_soon(serve, server)
        assert await lookup(client, b"alice") == b"+1 555 0100"
        assert await lookup(client, b"bob") == b"+1 555 0199"
        nursery.cancel_scope.cancel()


async def test_an_unknown_key_gets_a_reset() -> None:
    async with mplex.testing.open_muxer_pair() as (client, server), trio.open_nursery() as nursery:
        nursery.start_soon(serve, server)
        assert await lookup(client, b"carol") is None
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    for test in (test_a_known_key_gets_its_value, test_an_unknown_key_gets_a_reset):
        trio.run(test)
        print(f"{test.__name__}: passed")
