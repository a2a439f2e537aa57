"""An mplex echo server: every stream a client opens gets its bytes back.

python examples/echo_server.py [PORT]      (default: a free port, printed)
"""

import sys

import trio

import mplex


async def echo(stream: mplex.MplexStream) -> None:
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data)


async def serve_connection(transport: trio.SocketStream) -> None:
    # One muxer per TCP connection; one task per stream, in this connection's nursery.
    async with mplex.open_muxer(transport) as muxer, trio.open_nursery() as nursery:
        async for stream in muxer:
            nursery.start_soon(echo, stream)


async def main(port: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    print(f"listening on 127.0.0.1:{listeners[0].socket.getsockname()[1]}", flush=True)
    await trio.serve_listeners(serve_connection, listeners)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
