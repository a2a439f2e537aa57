"""An mplex echo server: every stream a client opens gets its bytes back.

python examples/echo_server.py [PORT]      (default: a free port, printed)

``mplex.serve_tcp`` runs a muxer per connection and ``echo`` per inbound stream.  A
client that sends garbage, resets its streams or drops the connection ends only its
own streams or connection; the server goes on serving everyone else.
"""

import logging
import sys
from functools import partial

import trio

import mplex


async def echo(stream: mplex.MplexStream) -> None:
    # serve_tcp closes the stream when this returns (and resets it if this raises).
    while data := await stream.receive_some():
        await stream.send_all(data)


async def main(port: int) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(mplex.serve_tcp, echo, port, host="127.0.0.1"))
        print(f"listening on 127.0.0.1:{listeners[0].socket.getsockname()[1]}", flush=True)


if __name__ == "__main__":
    # Why each connection ended, one line each (INFO for failures, DEBUG for the rest).
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    except* KeyboardInterrupt:
        pass  # Ctrl-C: stop serving
