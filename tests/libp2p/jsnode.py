"""A js-libp2p node (tests/interop/libp2p_node.mjs) in a child process, driven by
JSON lines.  It needs node and ``make``'s npm install: without them it fails."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import trio

SCRIPT = Path(__file__).resolve().parent.parent / "interop" / "libp2p_node.mjs"


class JsNode:
    """The node's messages so far, and a way to send it commands."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        self._buffer = b""
        self.id = ""
        self.addr = ""

    async def wait_for(self, test: Callable[[dict[str, Any]], bool], timeout: float = 20) -> dict[str, Any]:
        """The first message (seen already or still to come) that passes ``test``."""
        with trio.fail_after(timeout):
            seen = 0
            while True:
                for message in self.messages[seen:]:
                    if "error" in message:
                        raise RuntimeError(f"the js node failed: {message['error']}")
                    if test(message):
                        return message
                seen = len(self.messages)
                await self._read_more()

    async def command(self, reply_key: str, **command: Any) -> Any:
        """Send one command; return the value of its reply's ``reply_key``."""
        start = len(self.messages)
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(command).encode() + b"\n")
        message = await self.wait_for(lambda m: reply_key in m and self.messages.index(m) >= start)
        return message[reply_key]

    async def _read_more(self) -> None:
        assert self.process.stdout is not None
        data = await self.process.stdout.receive_some()
        if not data:
            raise RuntimeError(f"the js node exited (code {self.process.poll()})")
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        self.messages += [json.loads(line) for line in lines if line.strip()]


@contextlib.asynccontextmanager
async def js_node(*args: str) -> AsyncIterator[JsNode]:
    """Run a js-libp2p node for the block (``--yamux`` for yamux instead of mplex)."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("these tests need node (and `make`'s npm install in tests/interop)")
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            lambda task_status: trio.run_process(
                [node, str(SCRIPT), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                check=False,
                task_status=task_status,
            )
        )
        peer = JsNode(process)
        try:
            ready = await peer.wait_for(lambda m: "ready" in m)
            peer.id, peer.addr = ready["id"], ready["addrs"][0]
            yield peer
        finally:
            assert process.stdin is not None
            with trio.move_on_after(10) as waiting:
                await process.stdin.aclose()  # the node stops at the end of its input
                await process.wait()
            if waiting.cancelled_caught:
                process.kill()
