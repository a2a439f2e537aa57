"""Drive a real peer (js-libp2p or py-libp2p) over one TCP connection, in either role.

The peer scripts (tests/interop/peer.mjs, tests/interop/pylibp2p_peer.py) and this
module speak the protocol described in tests/interop/README.md: on every stream, the
first byte chooses what the accepting side does, and a command stream (``C``) makes the
peer open streams to us.  ``Session`` is our side: it opens streams with a mode,
serves the streams the peer opens, and records what it saw on them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import mplex
from mplex._bench.runner import pylibp2p_python
from tests.helpers import read_all

ROOT = Path(__file__).resolve().parent.parent
INTEROP = ROOT / "tests" / "interop"
APP_PROTOCOL = "/interop/1.0.0"
PEERS = ("js-libp2p", "py-libp2p")
ROLES = ("we dial", "we listen")
#: How long any one exchange with a peer may take before the test fails.
TIMEOUT = 60


def peer_command(peer: str) -> list[str]:
    if peer == "js-libp2p":
        return ["node", str(INTEROP / "peer.mjs")]
    return [pylibp2p_python(), str(INTEROP / "pylibp2p_peer.py")]


_CYCLE = bytes((i * 31 + 7) & 0xFF for i in range(256))


def pattern(size: int) -> bytes:
    """Byte i is (31 i + 7) mod 256, as the peers compute it (it repeats every 256)."""
    return (_CYCLE * (size // 256 + 1))[:size]


async def read_to_end(stream: trio.abc.ReceiveStream) -> tuple[bytes, str]:
    """Read until the stream ends; return the bytes and how it ended."""
    chunks = []
    try:
        while data := await stream.receive_some():
            chunks.append(data)
    except mplex.StreamReset:
        return b"".join(chunks), "reset"
    except trio.BrokenResourceError as exc:
        return b"".join(chunks), f"broken: {exc!r}"
    return b"".join(chunks), "eof"


@dataclass
class Session:
    """Our side of one connection to a peer."""

    peer: str
    muxer: mplex.Muxer
    negotiate: bool
    #: What we saw on each stream the peer opened, in order of arrival.
    received: list[dict[str, Any]] = field(default_factory=list)
    #: Set each time ``received`` grows.
    changed: trio.Event = field(default_factory=trio.Event)

    async def open(self, mode: bytes, *, name: str | None = None) -> mplex.MplexStream:
        stream = await self.muxer.open_stream(name)
        if self.negotiate:
            await mplex.select_protocol(stream, [APP_PROTOCOL])
        await stream.send_all(mode)
        return stream

    async def command(self, **cmd: Any) -> dict[str, Any]:
        """Have the peer open streams to us; return its JSON report."""
        stream = await self.open(b"C")
        await stream.send_all(json.dumps(cmd).encode())
        await stream.send_eof()
        report: dict[str, Any] = json.loads(await read_all(stream))
        return report

    async def peer_log(self, wait_for: int) -> list[dict[str, Any]]:
        """The peer's event log, once it holds at least ``wait_for`` events."""
        stream = await self.open(b"L")
        await stream.send_all(str(wait_for).encode())
        await stream.send_eof()
        events: list[dict[str, Any]] = json.loads(await read_all(stream))["events"]
        return events

    async def wait_received(self, count: int) -> list[dict[str, Any]]:
        while len(self.received) < count:
            self.changed = trio.Event()
            await self.changed.wait()
        return self.received

    def record(self, **what: Any) -> None:
        self.received.append(what)
        self.changed.set()

    async def serve(self, stream: mplex.MplexStream) -> None:
        """Our behaviour on a stream the peer opened (the same modes as the peers')."""
        seen: dict[str, Any] = {"id": stream.id, "name": stream.name, "initiator": stream.is_initiator}
        try:
            if self.negotiate:
                seen["protocol"] = await mplex.accept_protocol(stream, [APP_PROTOCOL])
            mode = await stream.receive_some(1)
            seen["mode"] = mode.decode()
            if mode == b"E":
                while data := await stream.receive_some():
                    await stream.send_all(data)
                await stream.send_eof()
            elif mode == b"T":
                data, seen["end"] = await read_to_end(stream)
                seen["bytes"], seen["intact"] = len(data), data == pattern(len(data))
            elif mode == b"R":
                size = int.from_bytes(await read_exactly(stream, 4), "big")
                await stream.send_all(pattern(size))
                stream.reset()
            elif mode == b"N":
                await stream.send_all(stream.name.encode())
                await stream.send_eof()
            elif mode == b"G":
                seen["text"] = (await read_all(stream)).decode()
        except (trio.BrokenResourceError, mplex.MplexError) as exc:
            seen["error"] = exc
            stream.reset()  # as an application would: the peer must not wait on us
        self.record(**seen)


async def read_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise EOFError(f"stream ended after {len(data)} of {size} bytes")
        data += chunk
    return data


async def _read_ready_line(process: trio.Process) -> int:
    assert process.stdout is not None
    line = b""
    with trio.fail_after(30):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            if not chunk:
                raise RuntimeError(f"peer exited before it was ready: {line!r}")
            line += chunk
    assert line.startswith(b"READY "), line
    return int(line.split()[1])


@contextlib.asynccontextmanager
async def connect(
    peer: str,
    role: str,
    *,
    negotiate: bool = False,
    greet: bool = False,
    library_defaults: bool = False,
    config: mplex.Config | None = None,
    serve: bool = True,
) -> AsyncIterator[Session]:
    """Start ``peer``, connect to it in ``role``, and run our muxer until the block ends.

    On exit our muxer closes the connection and the peer exits.
    """
    flags = ["--negotiate"] * negotiate + ["--greet"] * greet + ["--defaults"] * library_defaults
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with trio.open_nursery() as nursery:
        listeners: list[trio.SocketListener] = []
        if role == "we dial":
            command = [*peer_command(peer), "listen", *flags]
        else:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            command = [*peer_command(peer), "dial", "--port", str(port), *flags]
        process: trio.Process = await nursery.start(
            lambda task_status: trio.run_process(  # type: ignore[misc]
                command, stdout=subprocess.PIPE, env=env, check=False, task_status=task_status
            )
        )
        with trio.fail_after(30):
            if role == "we dial":
                transport: trio.SocketStream = await trio.open_tcp_stream(
                    "127.0.0.1", await _read_ready_line(process)
                )
            else:
                transport = await listeners[0].accept()
                await listeners[0].aclose()
            if negotiate:
                if role == "we dial":
                    await mplex.select_protocol(transport, [mplex.PROTOCOL_ID])
                else:
                    await mplex.accept_protocol(transport, [mplex.PROTOCOL_ID])

        async with mplex.open_muxer(transport, config) as muxer, trio.open_nursery() as streams:
            session = Session(peer, muxer, negotiate)
            if serve:

                async def accept_all() -> None:
                    # A lost connection ends the loop; the test's own streams say why.
                    with contextlib.suppress(trio.BrokenResourceError):
                        async for stream in muxer:
                            streams.start_soon(session.serve, stream)

                streams.start_soon(accept_all)
            yield session
            streams.cancel_scope.cancel()
        with trio.fail_after(TIMEOUT):
            await process.wait()
