"""py-libp2p hosts on 127.0.0.1 for the host-level tests, with either mplex."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_noise_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.mplex.mplex import Mplex

import mplex
import mplex.libp2p

ECHO = TProtocol("/echo/1.0.0")
LOOPBACK = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
SECURITIES = ["noise", "plaintext"]
#: Which mplex each host of a pair runs, and which of them dials.
PAIRINGS = {
    "ours-ours": ("ours", "ours", "a"),
    "ours-dials-theirs": ("ours", "theirs", "a"),
    "theirs-dials-ours": ("ours", "theirs", "b"),
}


def make_host(security: str, muxer: str, config: mplex.Config | None = None) -> Any:
    key_pair = create_new_key_pair()
    if security == "noise":
        noise_key = create_noise_key_pair().private_key
        sec_opt: dict[Any, Any] = {NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=noise_key)}
    else:
        sec_opt = {TProtocol(PLAINTEXT_PROTOCOL_ID): InsecureTransport(key_pair)}
    muxers: Any = (
        mplex.libp2p.muxer_options(config) if muxer == "ours" else {TProtocol(mplex.PROTOCOL_ID): Mplex}
    )
    return new_host(key_pair=key_pair, sec_opt=sec_opt, muxer_opt=muxers)


async def echo_handler(stream: Any) -> None:
    """Echo until the peer's end of stream, then close (a sequential loop, which
    py-libp2p's own mplex can serve too)."""
    try:
        while True:
            await stream.write(await stream.read(65536))
    except StreamEOF:
        pass
    await stream.close()


@contextlib.asynccontextmanager
async def host_pair(
    security: str, pairing: str, config: mplex.Config | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """(host a, host b), connected; a runs our mplex; both serve ECHO."""
    muxer_a, muxer_b, dialer = PAIRINGS[pairing]
    a, b = make_host(security, muxer_a, config), make_host(security, muxer_b, config)
    async with a.run(listen_addrs=[LOOPBACK]), b.run(listen_addrs=[LOOPBACK]):
        for host in (a, b):
            host.set_stream_handler(ECHO, echo_handler)
        near, far = (a, b) if dialer == "a" else (b, a)
        with trio.fail_after(10):
            await near.connect(info_from_p2p_addr(far.get_addrs()[0]))
        yield a, b
