"""An mplex echo client: three streams at once over one connection.

python examples/echo_client.py PORT
"""

import sys

import trio

import mplex


async def ask(muxer: mplex.Muxer, text: str) -> None:
    async with await muxer.open_stream(text) as stream:
        await stream.send_all(text.encode())
        await stream.send_eof()  # we are done sending; the server's echo ends with EOF
        reply = b""
        while data := await stream.receive_some():
            reply += data
        print(f"stream {stream.id}: sent {text!r}, got {reply.decode()!r}")


async def main(port: int) -> None:
    transport = await trio.open_tcp_stream("127.0.0.1", port)
    async with mplex.open_muxer(transport) as muxer, trio.open_nursery() as nursery:
        for text in ("one", "two", "three"):
            nursery.start_soon(ask, muxer, text)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
