"""examples/libp2p_host.py runs and prints what it promises, in one process and in two."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "libp2p_host.py"


def check_dial_output(out: str) -> None:
    assert "ping: 3 replies" in out
    assert "echo: b'hello over mplex'" in out
    assert "muxer: MplexMuxedConn" in out


async def test_both_hosts_in_one_process() -> None:
    result = await trio.run_process(
        [sys.executable, str(EXAMPLE)], capture_stdout=True, capture_stderr=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    check_dial_output(result.stdout.decode())


async def test_a_listener_and_a_dialer_in_two_processes() -> None:
    async with trio.open_nursery() as nursery:
        listener: trio.Process = await nursery.start(
            lambda task_status: trio.run_process(
                [sys.executable, str(EXAMPLE), "listen"],
                stdout=subprocess.PIPE,
                check=False,
                task_status=task_status,
            )
        )
        try:
            assert listener.stdout is not None
            line = b""
            with trio.fail_after(30):
                while not line.endswith(b"\n"):
                    data = await listener.stdout.receive_some()
                    assert data, "the listener exited"
                    line += data
            with trio.fail_after(60):
                result = await trio.run_process(
                    [sys.executable, str(EXAMPLE), line.decode().strip()],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            assert result.returncode == 0, result.stderr.decode()
            check_dial_output(result.stdout.decode())
        finally:
            listener.terminate()
