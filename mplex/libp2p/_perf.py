"""The perf protocol inside py-libp2p hosts: ``mplex perf --libp2p``, and the pieces
that let this library's perf client and server run over py-libp2p's streams.

``NetStreamPerf`` adapts a py-libp2p stream to ``mplex._cli.perf_protocol.PerfStream``;
``serve_perf(host)`` answers ``/perf/1.0.0`` on a host with this library's server, and
``measure(host, address, upload, download)`` runs its client against any perf peer
(py-libp2p's own ``PerfService`` included).
"""

from __future__ import annotations

import argparse
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_noise_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE
from libp2p.security.noise.transport import Transport as Noise

from .._cli.perf_protocol import (
    PERF_PROTOCOL_ID,
    PerfResult,
    measurements,
    median_run,
    perf_client,
    perf_server,
)
from ._conn import muxer_options

__all__ = ["NetStreamPerf", "make_host", "measure", "perf_command", "serve_perf"]

PERF = TProtocol(PERF_PROTOCOL_ID)


class NetStreamPerf:
    """``PerfStream`` over a py-libp2p stream (``read`` ends with ``b""``)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    async def write(self, data: bytes) -> None:
        await self.stream.write(data)

    async def read(self, max_bytes: int) -> bytes:
        try:
            return bytes(await self.stream.read(max_bytes))
        except StreamEOF:
            return b""

    async def close_write(self) -> None:
        await self.stream.close_write()


def make_host() -> Any:
    """A py-libp2p host over TCP and noise that muxes with this mplex."""
    key_pair = create_new_key_pair()
    noise = Noise(key_pair, noise_privkey=create_noise_key_pair().private_key)
    return new_host(key_pair=key_pair, sec_opt={NOISE: noise}, muxer_opt=muxer_options())


def serve_perf(host: Any) -> None:
    """Answer ``/perf/1.0.0`` on ``host`` with this library's perf server."""

    async def handle(stream: Any) -> None:
        try:
            await perf_server(NetStreamPerf(stream))
        except Exception:  # a peer that breaks off: its stream only
            await stream.reset()

    host.set_stream_handler(PERF, handle)


async def measure(host: Any, address: str, upload: int, download: int) -> PerfResult:
    """One perf run from ``host`` to the peer at ``address`` (a multiaddr with /p2p/)."""
    peer = info_from_p2p_addr(multiaddr.Multiaddr(address))
    await host.connect(peer)
    stream = await host.new_stream(peer.peer_id, [PERF])
    try:
        return await perf_client(NetStreamPerf(stream), upload, download)
    finally:
        await stream.close()


async def perf_command(args: argparse.Namespace) -> int:
    """``mplex perf --libp2p``: serve, or run the measurements and print JSON lines."""
    host = make_host()
    listen = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
    if args.run_server:
        ip, _, port = args.server_address.rpartition(":")
        listen = multiaddr.Multiaddr(f"/ip4/{ip}/tcp/{port}")
    async with host.run(listen_addrs=[listen]):
        if args.run_server:
            serve_perf(host)
            print(f"mplex: serving {PERF_PROTOCOL_ID} on {host.get_addrs()[0]}", flush=True)
            await trio.sleep_forever()
        for upload, download, runs in measurements(args.upload_bytes, args.download_bytes):
            done = [await measure(host, args.server_address, upload, download) for _ in range(runs)]
            print(median_run(done).json_line(), flush=True)
    return 0
