"""What both sides of a benchmark run share: TLS set-up, exact reads, and the JSON line
each process ends with (with its peak RSS)."""

from __future__ import annotations

import json
import os
import resource
import socket
import ssl
from typing import Any

import trio


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used, from ``/proc``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_rss(pid: int) -> int:
    """Resident bytes of process ``pid``, from ``/proc``."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def current_rss() -> int:
    return process_rss(os.getpid())


def emit(**fields: Any) -> None:
    fields["peak_rss"] = peak_rss()
    print(json.dumps(fields), flush=True)


def nodelay(stream: trio.SocketStream) -> None:
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)


def tls_context(server_side: bool) -> ssl.SSLContext:
    """TLS 1.3 only.  The server's certificate comes from a throwaway trustme CA; the
    client does not verify it (the benchmark measures the channel, not the PKI)."""
    if server_side:
        import trustme  # noqa: PLC0415  (only the TLS cases need it)

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


async def secured(
    conn: trio.SocketStream, context: ssl.SSLContext | None, server_side: bool
) -> trio.abc.Stream:
    """``conn`` itself, or TLS over it with the handshake done (so no case times it)."""
    nodelay(conn)
    if context is None:
        return conn
    stream = trio.SSLStream(conn, context, server_side=server_side)
    await stream.do_handshake()
    return stream


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        data = await stream.receive_some(size - len(got))
        if not data:
            raise RuntimeError(f"the stream ended after {len(got)} of {size} bytes")
        got += data
    return bytes(got)


async def read_to_eof(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while data := await stream.receive_some():
        chunks.append(data)
    return b"".join(chunks)
