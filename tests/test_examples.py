"""Every example in examples/ runs and prints what it promises."""

from __future__ import annotations

import pathlib
import re
import signal
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def run(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


#: Runs an example with Ctrl-C's usual meaning, whatever SIGINT disposition was
#: inherited: a job started in the background by a non-interactive shell ignores SIGINT,
#: and so would the server, which the test stops with SIGINT.
WITH_DEFAULT_SIGINT = (
    "import runpy, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def test_echo_server_and_client() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", WITH_DEFAULT_SIGINT, str(EXAMPLES / "echo_server.py")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        assert banner.startswith("listening on 127.0.0.1:")
        lines = run("echo_client.py", banner.rsplit(":", 1)[1].strip()).splitlines()
        assert sorted(re.sub(r"stream \d+", "stream N", line) for line in lines) == [
            "stream N: sent 'one', got 'one'",
            "stream N: sent 'three', got 'three'",
            "stream N: sent 'two', got 'two'",
        ]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
        assert server.stdout is not None
        server.stdout.close()


def test_chat_keeps_channels_apart() -> None:
    lines = run("chat.py").splitlines()
    assert [line for line in lines if line.startswith("#general")] == [
        "#general: hello everyone",
        "#general: meeting at noon",
    ]
    assert [line for line in lines if line.startswith("#random")] == ["#random: did you see the cat?"]


def test_request_response_answers_every_request() -> None:
    assert run("request_response.py").splitlines() == [f"request {n} -> REQUEST {n}" for n in range(10)]


def test_slow_reader_policies_behave_as_documented() -> None:
    lines = run("slow_reader.py").splitlines()
    assert re.fullmatch(r"block +A: all 400000 bytes arrived; B: echo of b'ping' waited behind A", lines[0])
    assert re.fullmatch(
        r"reset +A: reset after 0 bytes \(our policy\); B: echo of b'ping' at once", lines[1]
    )
    assert re.fullmatch(
        r"block-then-reset +A: reset after 0 bytes \(our policy\); B: echo of b'ping' waited behind A",
        lines[2],
    )
