"""A py-libp2p host running our mplex against a real js-libp2p node (libp2p 3, TCP,
noise, @libp2p/mplex 12), in both dial directions."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import pytest
import trio
from libp2p.abc import INotifee
from libp2p.host.ping import PingService
from libp2p.identity.identify.identify import ID as IDENTIFY
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.identity.update import update_peerstore_from_identify
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.utils.varint import read_length_prefixed_protobuf

from mplex.libp2p import MplexMuxedConn
from tests.libp2p.hosts import ECHO, LOOPBACK, echo_handler, make_host
from tests.libp2p.jsnode import JsNode, js_node

DIRECTIONS = pytest.mark.parametrize("dialer", ["python", "js"])


class ConnectedTo(INotifee):
    """Sets `done` once the host's swarm has registered a connection to `peer`.

    The js node reports "dialed" as soon as its own side of the upgrade is done, which
    can be before the py-libp2p host has added the connection to its swarm.
    """

    def __init__(self, peer: ID) -> None:
        self.peer = peer
        self.done = trio.Event()

    async def connected(self, network: Any, conn: Any) -> None:
        if conn.muxed_conn.peer_id == self.peer:
            self.done.set()

    async def opened_stream(self, network: Any, stream: Any) -> None:
        pass

    async def closed_stream(self, network: Any, stream: Any) -> None:
        pass

    async def disconnected(self, network: Any, conn: Any) -> None:
        pass

    async def listen(self, network: Any, multiaddr: Any) -> None:
        pass

    async def listen_close(self, network: Any, multiaddr: Any) -> None:
        pass


@contextlib.asynccontextmanager
async def connected_to_js(dialer: str) -> AsyncIterator[tuple[Any, JsNode, ID]]:
    """(our py-libp2p host, the js node, the js node's peer id), connected."""
    host = make_host("noise", "ours")
    async with js_node() as node, host.run(listen_addrs=[LOOPBACK]):
        host.set_stream_handler(ECHO, echo_handler)
        js_id = ID.from_base58(node.id)
        registered = ConnectedTo(js_id)
        host.get_network().register_notifee(registered)
        with trio.fail_after(20):
            if dialer == "python":
                await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.addr)))
            else:
                assert await node.command("dialed", dial=str(host.get_addrs()[0])) == str(host.get_id())
            await registered.done.wait()
        [conn] = host.get_network().get_connections(js_id)
        assert isinstance(conn.muxed_conn, MplexMuxedConn)
        yield host, node, js_id


async def echo(host: Any, peer: ID, payload: bytes, *, duplex: bool) -> bytes:
    stream = await host.new_stream(peer, [ECHO])
    received = bytearray()

    async def read() -> None:
        while len(received) < len(payload):
            received.extend(await stream.read(65536))

    if duplex:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            for start in range(0, len(payload), 4096):
                await stream.write(payload[start : start + 4096])
    else:  # windowed: write it all, then read it all back
        await stream.write(payload)
        await read()
    await stream.close()
    return bytes(received)


@DIRECTIONS
class TestAgainstAJsLibp2pNode:
    @pytest.mark.host_interop("ping, both ways")
    async def test_ping_both_ways(self, dialer: str) -> None:
        async with connected_to_js(dialer) as (host, node, js_id):
            with trio.fail_after(20):
                assert len(await PingService(host).ping(js_id, ping_amt=3)) == 3
            # The node pinged us back: our host answered /ipfs/ping/1.0.0 over our mplex
            # (a failed ping comes back as an error reply, which fails the command).
            rtt = await node.command("pinged", ping=str(host.get_id()))
            assert isinstance(rtt, int | float) and not isinstance(rtt, bool)

    @pytest.mark.host_interop("identify fills the peerstore")
    async def test_identify_both_ways(self, dialer: str) -> None:
        async with connected_to_js(dialer) as (host, node, js_id):
            with trio.fail_after(20):
                stream = await host.new_stream(js_id, [IDENTIFY])
                message = Identify()
                message.ParseFromString(await read_length_prefixed_protobuf(stream, use_varint_format=True))
            await update_peerstore_from_identify(host.get_peerstore(), js_id, message)
            assert "/echo/1.0.0" in host.get_peerstore().get_protocols(js_id)
            ours = str(host.get_id())
            theirs = await node.wait_for(lambda m: m.get("identified") == ours)
            assert str(ECHO) in theirs["protocols"]

    @pytest.mark.host_interop("echo, {streams} x {size} B, {mode}")
    @pytest.mark.parametrize("size", [1_000, 100_000])
    @pytest.mark.parametrize("streams", [1, 100])
    @pytest.mark.parametrize("mode", ["windowed", "full duplex"])
    async def test_echo(self, dialer: str, size: int, streams: int, mode: str) -> None:
        async with connected_to_js(dialer) as (host, _, js_id):
            payloads = [os.urandom(size) for _ in range(streams)]
            results: dict[int, bytes] = {}

            async def one(index: int) -> None:
                results[index] = await echo(host, js_id, payloads[index], duplex=mode == "full duplex")

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for index in range(streams):
                        nursery.start_soon(one, index)
            assert [results[index] for index in range(streams)] == payloads
