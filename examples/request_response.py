"""Request/response with one stream per request (both peers in this program).

The client sends a request and half-closes; the server answers and closes.  Ten
requests run at once over one connection, each on its own stream.
"""

import trio
import trio.testing

import mplex


async def handle(stream: mplex.MplexStream) -> None:
    request = b""
    while data := await stream.receive_some():  # until the client's send_eof
        request += data
    await stream.send_all(request.upper())
    # serve_connection closes the stream when the handler returns.


async def request(muxer: mplex.Muxer, text: str, answers: dict[str, str]) -> None:
    async with await muxer.open_stream() as stream:
        await stream.send_all(text.encode())
        await stream.send_eof()
        answer = b""
        while data := await stream.receive_some():
            answer += data
        answers[text] = answer.decode()


async def main() -> None:
    a, b = trio.testing.memory_stream_pair()  # any trio.abc.Stream works as a transport
    answers: dict[str, str] = {}
    async with trio.open_nursery() as nursery:
        # The server's side: a muxer over b, and handle() for every stream the client
        # opens, until the connection ends.
        nursery.start_soon(mplex.serve_connection, handle, b)
        async with mplex.open_muxer(a) as client, trio.open_nursery() as requests:
            for n in range(10):
                requests.start_soon(request, client, f"request {n}", answers)
        # Closing the client's muxer ends the connection, and serve_connection returns.
    for text in sorted(answers):
        print(f"{text} -> {answers[text]}")


if __name__ == "__main__":
    trio.run(main)
