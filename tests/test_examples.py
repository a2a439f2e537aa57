"""Every example in examples/ runs and prints what it promises."""

from __future__ import annotations

import contextlib
import pathlib
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

import mplex

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


@contextlib.contextmanager
def echo_server(log: IO[str] | None = None) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """examples/echo_server.py in a child process, its stderr to ``log``; yields it and
    its port."""
    server = subprocess.Popen(
        [sys.executable, "-c", WITH_DEFAULT_SIGINT, str(EXAMPLES / "echo_server.py")],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        assert banner.startswith("listening on 127.0.0.1:"), banner
        yield server, int(banner.rsplit(":", 1)[1])
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
        assert server.stdout is not None
        server.stdout.close()


def check_echo_client(port: int) -> None:
    lines = run("echo_client.py", str(port)).splitlines()
    assert sorted(re.sub(r"stream \d+", "stream N", line) for line in lines) == [
        "stream N: sent 'one', got 'one'",
        "stream N: sent 'three', got 'three'",
        "stream N: sent 'two', got 'two'",
    ]


def test_echo_server_and_client() -> None:
    with echo_server() as (_, port):
        check_echo_client(port)


def frame(stream_id: int, flag: mplex.Flag, data: bytes = b"") -> bytes:
    return mplex.Encoder().frame(stream_id, flag, data)


def attack(port: int, payload: bytes, *, rst: bool = False) -> None:
    """Connect, send ``payload``, then hang up: with RST if ``rst`` (SO_LINGER 0)
    while the server still has echoes to send, else by reading until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        if rst:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass


MID_TRANSFER = b"".join(  # five streams, each 1 MiB of echo requested, never read
    frame(n, mplex.Flag.NEW_STREAM) + frame(n, mplex.Flag.MESSAGE_INITIATOR, bytes(1 << 20)) for n in range(5)
)


def test_the_echo_server_survives_any_client_and_serves_the_next() -> None:
    attacks = {
        "an HTTP request": (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", False),
        "random bytes": (random.Random(7).randbytes(4096), False),
        "a reset stream": (
            frame(0, mplex.Flag.NEW_STREAM)
            + frame(0, mplex.Flag.MESSAGE_INITIATOR, b"x" * 1000)
            + frame(0, mplex.Flag.RESET_INITIATOR),
            False,
        ),
        "RST while streams are mid-transfer": (MID_TRANSFER, True),
    }
    with tempfile.TemporaryFile("w+") as log_file:
        with echo_server(log_file) as (server, port):
            for name, (payload, rst) in attacks.items():
                attack(port, payload, rst=rst)
                assert server.poll() is None, f"the server died after {name}"
                check_echo_client(port)  # a good client is served after each attack
        log_file.seek(0)
        log = log_file.read()
    assert "Traceback" not in log
    # One line per failed connection says why it ended (INFO, as the example configures).
    assert log.count("connection ended") >= 2, log


def test_chat_keeps_channels_apart() -> None:
    lines = run("chat.py").splitlines()
    assert [line for line in lines if line.startswith("#general")] == [
        "#general: hello everyone",
        "#general: meeting at noon",
    ]
    assert [line for line in lines if line.startswith("#random")] == ["#random: did you see the cat?"]


def test_tls_serves_and_names_a_certificate_mismatch() -> None:
    assert run("tls.py").splitlines() == [
        "hello over TLS",
        "the TLS handshake failed: TLS: certificate verify failed (IP address mismatch, certificate is "
        "not valid for '127.0.0.1'.)",
    ]


def test_request_response_answers_every_request() -> None:
    assert run("request_response.py").splitlines() == [f"request {n} -> REQUEST {n}" for n in range(10)]


def test_slow_reader_policies_behave_as_documented() -> None:
    lines = run("slow_reader.py").splitlines()
    assert re.fullmatch(r"block +A: all 400000 bytes arrived; B: echo of b'ping' waited behind A", lines[0])
    assert re.fullmatch(r"reset +A: reset after 0 bytes \(our policy\); B: echo of b'ping' at once", lines[1])
    assert re.fullmatch(
        r"block-then-reset +A: reset after 0 bytes \(our policy\); B: echo of b'ping' waited behind A",
        lines[2],
    )


def test_testing_a_protocol_runs_its_tests() -> None:
    assert run("testing_a_protocol.py").splitlines() == [
        "test_a_known_key_gets_its_value: passed",
        "test_an_unknown_key_gets_a_reset: passed",
    ]


def test_the_libp2p_example_without_the_extra_says_which_to_install() -> None:
    # Without py-libp2p (hidden from the import system here, whatever is installed).
    hidden = (
        "import runpy, sys\n"
        "sys.modules['multiaddr'] = None\n"
        "sys.modules['libp2p'] = None\n"
        f"runpy.run_path({str(EXAMPLES / 'libp2p_host.py')!r}, run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", hidden], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "this example runs py-libp2p hosts: pip install 'trio-mplex[libp2p]'"
