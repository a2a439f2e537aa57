"""A chat over several named streams of one connection (both peers in this program).

Alice opens one stream per channel; Bob accepts them, and knows each channel by the
stream's name.  Messages on different channels never mix.
"""

import trio

import mplex


async def alice(muxer: mplex.Muxer) -> None:
    channels = {name: await muxer.open_stream(name) for name in ("general", "random")}
    await channels["general"].send_all(b"hello everyone\n")
    await channels["random"].send_all(b"did you see the cat?\n")
    await channels["general"].send_all(b"meeting at noon\n")
    for stream in channels.values():
        await stream.aclose()


async def bob(muxer: mplex.Muxer) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(listen, await muxer.accept_stream())


async def listen(stream: mplex.MplexStream) -> None:
    text = b""
    while data := await stream.receive_some():
        text += data
    for line in text.decode().splitlines():
        print(f"#{stream.name}: {line}")


async def main() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    async with (
        mplex.open_muxer(client) as left,
        mplex.open_muxer(server) as right,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(alice, left)
        nursery.start_soon(bob, right)


if __name__ == "__main__":
    trio.run(main)
