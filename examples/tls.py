"""mplex over TLS: a server on trio.SSLListener, a client over trio.open_ssl_over_tcp_stream.

The certificates come from trustme, a throwaway certificate authority for tests
(`pip install trustme`); a real server loads its own (`context.load_cert_chain`).

    python examples/tls.py

The TLS handshake happens as a muxer starts, so a certificate that does not match the
name the client dials fails at `async with mplex.open_muxer(...)`, once, with the
`ssl` error as the cause: the second half of this program shows that mistake.
"""

from __future__ import annotations

import ssl
import sys
from functools import partial

import trio

import mplex

try:
    import trustme
except ImportError:
    sys.exit("this example makes its test certificates with trustme: pip install trustme")


async def echo(stream: mplex.MplexStream) -> None:
    while data := await stream.receive_some():
        await stream.send_all(data)


async def main() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)

    async with trio.open_nursery() as nursery:
        # TLS listeners: plain TCP listeners, each wrapped in trio.SSLListener.
        tcp_listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = tcp_listeners[0].socket.getsockname()[1]  # 0 above picked a free port
        tls_listeners = [trio.SSLListener(listener, server_context) for listener in tcp_listeners]
        await nursery.start(partial(mplex.serve_listeners, echo, tls_listeners))

        # The client dials the name the certificate was issued for.
        transport = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=client_context)
        async with mplex.open_muxer(transport) as muxer:
            stream = await muxer.open_stream()
            await stream.send_all(b"hello over TLS")
            await stream.send_eof()
            reply = b""
            while data := await stream.receive_some():
                reply += data
            print(reply.decode())

        # The common first mistake: a certificate for another name than the one dialled.
        only_localhost = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(only_localhost)
        tcp_listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = tcp_listeners[0].socket.getsockname()[1]
        tls_listeners = [trio.SSLListener(listener, only_localhost) for listener in tcp_listeners]
        await nursery.start(partial(mplex.serve_listeners, echo, tls_listeners))
        transport = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=client_context)
        try:
            async with mplex.open_muxer(transport) as muxer:
                await muxer.open_stream()
        except mplex.ConnectionLost as exc:  # raised once, before the block ran
            print(exc)

        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
