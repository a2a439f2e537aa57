"""TLS over a socket on the fast path: the muxer drives the ``trio.SSLStream``'s
records itself.  Records the kernel takes only part of leave whole and in order,
however the writes of the sending tasks and the writer interleave; the end of the
input means what it means to ``trio.SSLStream``; and both paths agree."""

from __future__ import annotations

import os
import socket

import pytest
import trio

import mplex
from tests.helpers import PlainStream, read_all, tcp_streams, tls_over

PATHS = {
    "fast": tls_over,  # an SSLStream over a SocketStream: the socket path
    "generic": lambda a, b: tls_over(PlainStream(a), PlainStream(b)),  # through its methods
}


async def echo(stream: mplex.MplexStream) -> None:
    await stream.send_all(await read_all(stream))
    await stream.send_eof()


@pytest.mark.parametrize("path", list(PATHS))
async def test_records_cut_by_small_kernel_buffers_arrive_whole_and_in_order_both_ways(path: str) -> None:
    """Kernel buffers of 4 KiB cut nearly every write of 20 concurrent requests of
    up to 200 KiB: each comes back intact."""
    a, b = await PATHS[path](*await tcp_streams(buffer_size=4096))
    payloads = [os.urandom(size) for size in (1, 100, 5000, 17_000, 200_000) * 4]
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mplex.serve_connection, echo, b)
            async with mplex.open_muxer(a) as client:
                assert client.uses_socket_fast_path is (path == "fast")
                answers: dict[int, bytes] = {}

                async def request(index: int) -> None:
                    async with await client.open_stream() as stream:
                        await stream.send_all(payloads[index])
                        await stream.send_eof()
                        answers[index] = await read_all(stream)

                async with trio.open_nursery() as requests:
                    for index in range(len(payloads)):
                        requests.start_soon(request, index)
            nursery.cancel_scope.cancel()
    assert [answers[index] == payload for index, payload in enumerate(payloads)] == [True] * len(payloads)


@pytest.mark.parametrize("path", list(PATHS))
async def test_a_peer_that_cuts_the_connection_without_close_notify_breaks_it(path: str) -> None:
    """As ``trio.SSLStream`` (not ``https_compatible``) has it: the end of the input
    without ``close_notify`` is a failure of the transport, on both paths."""
    tcp_a, tcp_b = await tcp_streams()
    a, _b = await PATHS[path](tcp_a, tcp_b)
    with trio.fail_after(10):
        async with mplex.open_muxer(a) as muxer:
            stream = await muxer.open_stream()
            tcp_b.socket.shutdown(socket.SHUT_RDWR)  # the TCP connection ends, TLS does not
            with pytest.raises(mplex.ConnectionLost):
                await stream.receive_some()
            assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
    tcp_b.socket.close()


@pytest.mark.parametrize("path", list(PATHS))
async def test_a_peer_that_closes_with_close_notify_ends_the_input(path: str) -> None:
    """``close_notify``, then the end of the TCP input: the peer closed."""
    a, b = await PATHS[path](*await tcp_streams())
    with trio.fail_after(10):
        async with mplex.open_muxer(a) as muxer:
            stream = await muxer.open_stream()
            await b.aclose()
            with pytest.raises(mplex.ConnectionLost):
                await stream.receive_some()
            assert muxer.end_reason is mplex.EndReason.PEER_CLOSED
