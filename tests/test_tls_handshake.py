"""Over ``trio.SSLStream`` the handshake happens as the muxer starts: a failure is raised
once, from the ``async with`` (or ``nursery.start(muxer.run)``), named as a TLS handshake
failure with the ``ssl`` error as its cause; never to every waiting stream, never lost
by a program that sends and leaves; and ``Config.handshake_timeout`` bounds a peer that
never starts its handshake, on every side, serving included."""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing

import mplex
from tests.helpers import read_all, tcp_streams, tls_contexts


def localhost_only() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(client, server) contexts whose certificate names ``localhost`` only."""
    return tls_contexts("localhost")


async def serve_tls(server: trio.SSLStream[trio.abc.Stream], received: list[bytes]) -> None:
    """A server muxer over ``server``: keeps what each stream sent."""

    async def keep(stream: mplex.MplexStream) -> None:
        received.append(await read_all(stream))

    await mplex.serve_connection(keep, server)


async def test_a_certificate_for_another_name_fails_once_from_the_block() -> None:
    """The common first mistake: a certificate for ``localhost`` dialled as 127.0.0.1."""
    client_context, server_context = localhost_only()
    a, b = await tcp_streams()
    client = trio.SSLStream(a, client_context, server_hostname="127.0.0.1")
    server = trio.SSLStream(b, server_context, server_side=True)
    opened: list[mplex.MplexStream] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_tls, server, [])
        with trio.fail_after(10), pytest.raises(mplex.ConnectionLost) as caught:
            async with mplex.open_muxer(client) as muxer:
                opened.append(await muxer.open_stream())  # never reached
    assert opened == []  # the block never ran
    assert str(caught.value).startswith("the TLS handshake failed: TLS: certificate verify failed (")
    assert caught.value.reason is mplex.EndReason.TRANSPORT_FAILED
    root: BaseException | None = caught.value
    while root is not None and root.__cause__ is not None:
        root = root.__cause__
    assert isinstance(root, ssl.SSLCertVerificationError)
    assert "IP address mismatch" in str(root)


async def test_a_failed_handshake_raises_from_nursery_start() -> None:
    client_context, server_context = localhost_only()
    a, b = await tcp_streams()
    muxer = mplex.Muxer(trio.SSLStream(a, client_context, server_hostname="127.0.0.1"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_tls, trio.SSLStream(b, server_context, server_side=True), [])
        with trio.fail_after(10), pytest.raises(mplex.ConnectionLost, match="TLS handshake failed"):
            await nursery.start(muxer.run)
    assert muxer.closed


async def test_both_ends_started_together_handshake_and_deliver() -> None:
    client_context, server_context = tls_contexts()
    a, b = await tcp_streams()
    client = trio.SSLStream(a, client_context, server_hostname="127.0.0.1")
    server = trio.SSLStream(b, server_context, server_side=True)
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_tls, server, received)
        with trio.fail_after(10):
            async with mplex.open_muxer(client) as muxer:
                stream = await muxer.open_stream()
                await stream.send_all(b"over TLS")
                await stream.send_eof()
                while not received:
                    await trio.testing.wait_all_tasks_blocked()
    assert received == [b"over TLS"]


@pytest.mark.parametrize("timeout", [None, 3.0], ids=["default", "3 s"])
async def test_a_client_that_never_starts_its_handshake_is_let_go(
    mock_clock: trio.testing.MockClock, timeout: float | None
) -> None:
    """On by default, at most 30 s (go-libp2p's upgrader allows 15 s)."""
    mock_clock.autojump_threshold = 0
    config = mplex.Config() if timeout is None else mplex.Config(handshake_timeout=timeout)
    assert config.handshake_timeout <= 30
    _, server_context = tls_contexts()
    silent, ours = trio.testing.memory_stream_pair()
    server = trio.SSLStream(ours, server_context, server_side=True)

    async def never_called(stream: mplex.MplexStream) -> None:
        raise AssertionError("no stream can arrive")

    started = trio.current_time()
    muxer = await mplex.serve_connection(never_called, server, config=config)
    assert muxer is not None
    assert config.handshake_timeout <= trio.current_time() - started < config.handshake_timeout + 1
    assert muxer.end_reason is mplex.EndReason.TRANSPORT_FAILED
    limit = f"did not finish within {config.handshake_timeout:g} s (Config.handshake_timeout)"
    assert limit in str(muxer.end_error)
    del silent
