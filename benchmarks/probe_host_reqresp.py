"""Where a request's time goes between py-libp2p hosts with our mplex.

    .venv-bench/bin/python -m benchmarks.probe_host_reqresp [--muxer ours|mplex|yamux]

Runs the suite's "host request/response" workload (100 workers x 20 requests, each
``host.new_stream`` + 32 B + half-close + 32 B reply to EOF, TCP + noise) against a
host server in a child process, twice: once plain, for the client's CPU per request,
and once under ``cProfile``, whose own time per function is summed by where the
function lives: our mplex (``mplex/``), py-libp2p (``libp2p/``, ``multiaddr``, its
noise and multistream-select), trio (the scheduler both run on), and the rest.
cProfile slows small Python functions more than C calls, so the shares are a guide to
where the time goes, not a measurement of each layer's cost.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import subprocess
import sys
import time

import multiaddr
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr

from benchmarks.libp2p_host_peer import DONE, LOOPBACK, connect, make_host, reqresp

WORKERS, EACH = 100, 20


def where(path: str) -> str:
    if "site-packages/libp2p/" in path or "multiaddr" in path or "base58" in path:
        return "py-libp2p (host, multistream-select, noise, swarm, its muxers)"
    if "/mplex/" in path:
        return "our mplex (mplex/)"
    if "/trio/" in path or "outcome" in path:
        return "trio (scheduler, both layers' I/O)"
    return "the rest (CPython, crypto, imports)"


async def run_client(address: str, muxer: str, profile: cProfile.Profile | None) -> float:
    host = make_host(muxer)
    async with host.run(listen_addrs=[LOOPBACK]):
        peer = info_from_p2p_addr(multiaddr.Multiaddr(address))
        await connect(host, peer)
        if profile is not None:
            profile.enable()
        cpu = time.process_time()
        await reqresp(host, peer.peer_id, WORKERS, EACH)
        cpu = time.process_time() - cpu
        if profile is not None:
            profile.disable()
        done = await host.new_stream(peer.peer_id, [DONE])
        await done.close()
    return cpu / (WORKERS * EACH)


def against_a_server(muxer: str, profile: cProfile.Profile | None) -> float:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    command = [sys.executable, "-m", "benchmarks.libp2p_host_peer", "server", "--muxer", muxer]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        address = server.stdout.readline().split()[2]
        return trio.run(run_client, address, muxer, profile)
    finally:
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probe_host_reqresp")
    parser.add_argument("--muxer", choices=["ours", "mplex", "yamux"], default="ours")
    muxer = parser.parse_args().muxer
    plain = against_a_server(muxer, None)
    what = f"{WORKERS} x {EACH} requests through py-libp2p hosts ({muxer})"
    print(f"{what}: client CPU {plain * 1e6:.0f} us a request")
    profile = cProfile.Profile()
    against_a_server(muxer, profile)
    shares: collections.Counter[str] = collections.Counter()
    for (path, _, _), (_, _, own, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        shares[where(path)] += own
    total = sum(shares.values())
    print("the client's own time under cProfile, by where the code lives:")
    for name, seconds in shares.most_common():
        print(f"  {name:64} {100 * seconds / total:4.0f}%")


if __name__ == "__main__":
    main()
