"""Two py-libp2p hosts, TCP + noise, using this mplex: an echo protocol and a ping.

Needs the libp2p extra: pip install 'trio-mplex[libp2p]'

python examples/libp2p_host.py              # both hosts in this process
python examples/libp2p_host.py listen       # a host that serves /echo/1.0.0
python examples/libp2p_host.py MULTIADDR    # a host that dials one and echoes
"""

import sys

import trio

try:
    import multiaddr
    from libp2p import new_host
except ImportError:
    sys.exit("this example runs py-libp2p hosts: pip install 'trio-mplex[libp2p]'")
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_noise_key_pair
from libp2p.custom_types import TProtocol
from libp2p.host.ping import PingService
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE
from libp2p.security.noise.transport import Transport as Noise

import mplex
import mplex.libp2p

ECHO = TProtocol("/echo/1.0.0")


def make_host():
    key_pair = create_new_key_pair()
    noise = Noise(key_pair, noise_privkey=create_noise_key_pair().private_key)
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE: noise},
        # The one line that matters: py-libp2p negotiates /mplex/6.7.0 and builds our
        # MplexMuxedConn for it.  muxer_options(mplex.Config(...)) sets limits.
        muxer_opt=mplex.libp2p.muxer_options(mplex.Config(max_stream_buffer=1 << 20)),
    )


async def echo(stream):
    try:
        while True:
            await stream.write(await stream.read(65536))
    except StreamEOF:
        await stream.close()


async def listen():
    host = make_host()
    async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        host.set_stream_handler(ECHO, echo)
        print(host.get_addrs()[0], flush=True)
        await trio.sleep_forever()


async def dial(address):
    host = make_host()
    async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        peer = info_from_p2p_addr(multiaddr.Multiaddr(address))
        await host.connect(peer)
        rtts = await PingService(host).ping(peer.peer_id, ping_amt=3)
        print(f"ping: {len(rtts)} replies")
        stream = await host.new_stream(peer.peer_id, [ECHO])
        await stream.write(b"hello over mplex")
        await stream.close()  # a half-close: the echo still comes back
        print(f"echo: {await stream.read()!r}")
        conn = host.get_network().get_connections(peer.peer_id)[0].muxed_conn
        print(f"muxer: {type(conn).__name__}, {conn.muxer.stats.frames_received} frames received")


async def both():
    listener = make_host()
    async with listener.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        listener.set_stream_handler(ECHO, echo)
        await dial(str(listener.get_addrs()[0]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        trio.run(both)
    elif sys.argv[1] == "listen":
        trio.run(listen)
    else:
        trio.run(dial, sys.argv[1])
