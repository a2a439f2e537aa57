"""py-libp2p hosts over TCP on 127.0.0.1 using ``mplex.libp2p``: against each other
and against py-libp2p's own mplex, over noise and plaintext, both dial directions."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.host.ping import PingService
from libp2p.identity.identify.identify import ID as IDENTIFY
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.identity.update import update_peerstore_from_identify
from libp2p.network.stream.exceptions import StreamClosed, StreamEOF, StreamReset
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.utils.varint import read_length_prefixed_protobuf

import mplex
from mplex.libp2p import MplexMuxedConn
from tests.libp2p.hosts import ECHO, PAIRINGS, SECURITIES, host_pair

MATRIX = pytest.mark.parametrize("security", SECURITIES)
PAIRS = pytest.mark.parametrize("pairing", list(PAIRINGS))


async def echo_round(host: Any, peer: Any, payload: bytes) -> bytes:
    stream = await host.new_stream(peer.get_id(), [ECHO])
    await stream.write(payload)
    await stream.close()
    return bytes(await stream.read())


@MATRIX
@PAIRS
class TestHostPairs:
    @pytest.mark.host_interop("ping, both ways")
    async def test_ping(self, security: str, pairing: str) -> None:
        async with host_pair(security, pairing) as (a, b):
            with trio.fail_after(10):
                rtts = await PingService(a).ping(b.get_id(), ping_amt=3)
                back = await PingService(b).ping(a.get_id(), ping_amt=3)
            assert len(rtts) == 3 and len(back) == 3
            conn = a.get_network().get_connections(b.get_id())[0].muxed_conn
            assert isinstance(conn, MplexMuxedConn)

    @pytest.mark.host_interop("identify fills the peerstore")
    async def test_identify_fills_the_peerstore(self, security: str, pairing: str) -> None:
        async with host_pair(security, pairing) as (a, b):
            with trio.fail_after(10):
                stream = await a.new_stream(b.get_id(), [IDENTIFY])
                message = Identify()
                message.ParseFromString(await read_length_prefixed_protobuf(stream, use_varint_format=True))
            peerstore = a.get_peerstore()
            await update_peerstore_from_identify(peerstore, b.get_id(), message)
            assert str(ECHO) in peerstore.get_protocols(b.get_id())
            assert peerstore.addrs(b.get_id())

    @pytest.mark.host_interop("echo, 100 streams of 10 KB")
    async def test_echo_on_a_hundred_streams(self, security: str, pairing: str) -> None:
        async with host_pair(security, pairing) as (a, b):
            results: dict[int, bytes] = {}
            payloads = {}
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for index in range(100):
                        payloads[index] = os.urandom(10_000)

                        async def run(index: int = index) -> None:
                            results[index] = await echo_round(a, b, payloads[index])

                        nursery.start_soon(run)
            assert results == payloads

    @pytest.mark.host_interop("full duplex, 10 streams of 100 KB")
    async def test_full_duplex_streams_never_deadlock(self, security: str, pairing: str) -> None:
        # Our host writes 100 KB while it reads the echo, on ten streams at once.
        async with host_pair(security, pairing) as (a, b):
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for _ in range(10):
                        nursery.start_soon(self.duplex, a, b)

    @staticmethod
    async def duplex(a: Any, b: Any) -> None:
        payload = os.urandom(100_000)
        stream = await a.new_stream(b.get_id(), [ECHO])
        received = bytearray()

        async def read() -> None:
            while len(received) < len(payload):
                received.extend(await stream.read(65536))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            for start in range(0, len(payload), 1000):
                await stream.write(payload[start : start + 1000])
        await stream.close()
        assert received == payload


class TestStreamBehaviourThroughHosts:
    """Ours on both hosts, over noise: the behaviours py-libp2p's callers rely on."""

    async def test_read_to_end_and_half_close(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            payload = os.urandom(300_000)
            assert await echo_round(a, b, payload) == payload

    async def test_a_reset_reaches_the_peer(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            seen: list[BaseException] = []
            done = trio.Event()

            async def handler(stream: Any) -> None:
                try:
                    await stream.read(100)
                    await stream.read(100)
                except StreamReset as exc:
                    seen.append(exc)
                done.set()

            b.set_stream_handler("/reset/1", handler)
            stream = await a.new_stream(b.get_id(), ["/reset/1"])
            await stream.write(b"x")
            await stream.reset()
            with trio.fail_after(10):
                await done.wait()
            assert len(seen) == 1
            with pytest.raises((StreamReset, StreamClosed)):
                await stream.write(b"after")

    async def test_a_deadline_ends_a_read_that_gets_nothing(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            b.set_stream_handler("/silent/1", lambda stream: trio.sleep_forever())
            stream = await a.new_stream(b.get_id(), ["/silent/1"])
            stream.muxed_stream.set_deadline(0.2)
            with trio.fail_after(10), pytest.raises(Exception, match="timed out"):
                await stream.read(10)

    async def test_two_writers_on_one_stream_take_turns(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            stream = await a.new_stream(b.get_id(), [ECHO])
            size = 200_000
            received = bytearray()

            async def read() -> None:
                while len(received) < 2 * size:
                    received.extend(await stream.read(65536))

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read)
                    nursery.start_soon(stream.write, b"a" * size)
                    nursery.start_soon(stream.write, b"b" * size)
            assert bytes(received) in (b"a" * size + b"b" * size, b"b" * size + b"a" * size)

    async def test_a_peer_that_hangs_up_ends_our_streams_not_our_host(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            stream = await a.new_stream(b.get_id(), [ECHO])
            await stream.write(b"hello")
            assert await stream.read(5) == b"hello"
            await b.get_network().close_peer(a.get_id())
            with trio.fail_after(10), pytest.raises((StreamReset, StreamEOF)):
                while True:
                    await stream.read(100)
            # Our host is still whole: it connects again and serves.
            await a.connect(info_from_p2p_addr(b.get_addrs()[0]))
            assert await echo_round(a, b, b"again") == b"again"

    async def test_shutdown_with_open_streams_is_prompt(self) -> None:
        with trio.fail_after(20):
            async with host_pair("noise", "ours-ours") as (a, b):
                streams = [await a.new_stream(b.get_id(), [ECHO]) for _ in range(20)]
                for stream in streams:
                    await stream.write(b"pending")
                conn = a.get_network().get_connections(b.get_id())[0].muxed_conn
        assert conn.is_closed
        assert conn.muxer.end_reason in (mplex.EndReason.CLOSED, mplex.EndReason.PEER_CLOSED)


RESETS = TProtocol("/resets/1.0.0")


async def reset_at_once(stream: Any) -> None:
    await stream.reset()


class TestNetStreamHooks:
    """py-libp2p 0.8.1's ``NetStream`` asks a muxed stream for ``close_write()`` and
    ``is_closed`` when it has them; ours has both."""

    async def test_close_write_half_closes_and_the_reply_still_comes(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            with trio.fail_after(10):
                stream = await a.new_stream(b.get_id(), [ECHO])
                await stream.write(b"request")
                await stream.close_write()
                assert await stream.read() == b"request"  # the echo, then its end
                with pytest.raises(StreamEOF):
                    await stream.read()
            assert stream.muxed_stream.is_closed  # both sides closed it

    async def test_is_closed_tells_a_stream_the_peer_reset(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            b.set_stream_handler(RESETS, reset_at_once)
            with trio.fail_after(10):
                stream = await a.new_stream(b.get_id(), [RESETS])
                # Wait for the reset on the mplex stream itself, so that NetStream
                # learns of it only by asking its muxed stream.
                with pytest.raises(mplex.StreamReset):
                    while True:
                        await stream.muxed_stream.stream.receive_some()
            assert stream.is_closed

    async def test_an_open_stream_is_not_closed(self) -> None:
        async with host_pair("noise", "ours-ours") as (a, b):
            with trio.fail_after(10):
                stream = await a.new_stream(b.get_id(), [ECHO])
                await stream.write(b"x")
                assert await stream.read(1) == b"x"
            assert not stream.is_closed and not stream.muxed_stream.is_closed
            await stream.close_write()
            assert not stream.muxed_stream.is_closed  # the echo side may still send
