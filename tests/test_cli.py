"""The `mplex` command, run as a user would: as a subprocess, output checked."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from mplex import MULTISTREAM_PROTOCOL_ID, PROTOCOL_ID, Encoder, Flag
from mplex._cli import output
from mplex._engine.multistream import encode_message

MPLEX = [sys.executable, "-m", "mplex"]


def run(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the command; stdin goes in as raw bytes (captures are binary)."""
    done = subprocess.run([*MPLEX, *args], input=stdin, capture_output=True, timeout=timeout, check=False)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def stop(server: subprocess.Popen[str]) -> None:
    server.send_signal(signal.SIGINT)
    server.wait(timeout=10)
    for pipe in (server.stdout, server.stderr):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def served(mode: str, *options: str) -> Iterator[str]:
    """An `mplex serve` in ``mode`` for the block; its port."""
    server = subprocess.Popen(
        [*MPLEX, "serve", "--mode", mode, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().rsplit(":", 1)[1].strip()
    finally:
        stop(server)


def capture() -> bytes:
    e = Encoder()
    return (
        e.frame(0, Flag.NEW_STREAM, b"chat")
        + e.frame(0, Flag.MESSAGE_INITIATOR, b"hello there")
        + e.frame(0, Flag.MESSAGE_RECEIVER, b"hi")
        + e.frame(0, Flag.CLOSE_INITIATOR)
        + e.frame(300, Flag.RESET_RECEIVER)
    )


class TestDecode:
    def test_a_capture_becomes_a_table_of_frames(self, tmp_path: pathlib.Path) -> None:
        path = tmp_path / "capture.bin"
        path.write_bytes(capture())
        result = run("decode", str(path))
        assert result.returncode == 0, result.stderr
        for expected in (
            "5 frames",
            "NEW_STREAM",
            "MESSAGE_INITIATOR",
            "hello there",
            "RESET_RECEIVER",
            "300",
        ):
            assert expected in result.stdout
        assert result.stderr == ""

    def test_hex_on_stdin(self) -> None:
        result = run("decode", "--hex", stdin=capture().hex(" ").encode())
        assert result.returncode == 0, result.stderr
        assert "CLOSE_INITIATOR" in result.stdout

    def test_a_malformed_capture_says_where_and_why_it_stops(self) -> None:
        bad = capture() + b"\x07\x00"
        result = run("decode", "-", stdin=bad)
        assert result.returncode == 1
        assert "5 frames" in result.stdout  # everything before the error is shown
        assert result.stderr.strip() == (
            f"mplex decode: stops at byte {len(capture())}: frame for stream 0 has the undefined flag 7"
        )

    def test_an_oversized_length_is_reported_before_its_body(self) -> None:
        result = run("decode", "--hex", stdin=b"02 81 80 40")
        assert result.returncode == 1
        assert "1048577 body bytes, over the limit of 1048576" in result.stderr

    def test_a_truncated_capture_is_noted(self) -> None:
        result = run("decode", "-", stdin=capture()[:-2])  # half of the last header
        assert result.returncode == 0
        assert "ends inside a frame starting at byte" in result.stderr
        assert "(1 bytes of it present)" in result.stderr

    def test_a_missing_file_is_one_line(self) -> None:
        result = run("decode", "/nonexistent/capture.bin")
        assert result.returncode == 1
        assert (
            result.stderr.strip()
            == "mplex decode: cannot read /nonexistent/capture.bin: No such file or directory"
        )

    def test_a_leading_multistream_handshake_is_skipped_and_said(self) -> None:
        messages = (MULTISTREAM_PROTOCOL_ID, "/yamux/1.0.0", PROTOCOL_ID)
        handshake = b"".join(encode_message(m) for m in messages)
        result = run("decode", "-", stdin=handshake + capture())
        assert result.returncode == 0, result.stderr
        assert "5 frames" in result.stdout
        assert f"\n{len(handshake)} " in result.stdout  # offsets count from the capture's start
        assert result.stderr.strip() == (
            f"note: skipped the multistream-select handshake, bytes 0-{len(handshake) - 1}: "
            f"{MULTISTREAM_PROTOCOL_ID}, /yamux/1.0.0, {PROTOCOL_ID}"
        )

    def test_a_handshake_that_never_agrees_on_mplex_is_one_line(self) -> None:
        handshake = encode_message(MULTISTREAM_PROTOCOL_ID) + encode_message("/yamux/1.0.0")
        result = run("decode", "-", stdin=handshake)
        assert result.returncode == 1
        assert result.stderr.strip() == (
            "mplex decode: the capture starts with multistream-select, but the handshake "
            f"({MULTISTREAM_PROTOCOL_ID}, /yamux/1.0.0) stops before {PROTOCOL_ID} is agreed (see --offset)"
        )

    def test_offset_starts_where_it_is_told(self) -> None:
        result = run("decode", "--offset", "4", "-", stdin=b"junk" + capture())
        assert result.returncode == 0, result.stderr
        assert "5 frames in" in result.stdout and "from byte 4" in result.stdout
        past = run("decode", "--offset", "99", "-", stdin=b"junk")
        assert past.returncode == 1
        assert past.stderr.strip() == "mplex decode: --offset 99 is past the end of the capture (4 bytes)"

    def test_output_into_a_pipe_is_plain_text(self) -> None:
        # rich is installed in the test venv; a pipe still gets no box drawing.
        result = run("decode", "-", stdin=capture())
        assert result.returncode == 0
        assert not set("─━┃│┏╭") & set(result.stdout)
        header = result.stdout.splitlines()[1].split()
        assert header == ["offset", "stream", "sent", "by", "flag", "length", "data"]

    def test_a_reader_that_goes_away_ends_it_quietly(self) -> None:
        e = Encoder()
        big = b"".join(e.frame(i % 7, Flag.MESSAGE_INITIATOR, b"x" * 20) for i in range(50_000))
        done = subprocess.run(
            f"{sys.executable} -m mplex decode - | head -n 1",
            shell=True,
            input=big,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.stdout.decode().startswith("50000 frames")
        assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr


class TestServeAndDial:
    @pytest.mark.parametrize("mode", ["echo", "discard", "source"])
    def test_dial_a_served_port(self, mode: str) -> None:
        server = subprocess.Popen(
            [*MPLEX, "serve", "--port", "0", "--mode", mode, "--size", "5000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            banner = server.stdout.readline()
            assert banner.startswith(f"mplex: serving {mode} on 127.0.0.1:")
            port = banner.rsplit(":", 1)[1].strip()
            args = ["dial", "127.0.0.1", port, "--streams", "20", "--size", "30000", "--json"]
            if mode == "echo":
                args.append("--verify")
            result = run(*args)
            assert result.returncode == 0, result.stderr
            report = json.loads(result.stdout)
            assert report["streams"] == 20
            assert report["errors"] == 0
            assert report["mismatches"] == 0
            expected = {"echo": 20 * 30000, "discard": 0, "source": 20 * 5000}[mode]
            assert report["bytes_received"] == expected
        finally:
            stop(server)
        assert server.returncode == 130  # Ctrl-C, as for every subcommand

    def test_negotiate_agrees_on_mplex_before_the_streams(self) -> None:
        server = subprocess.Popen([*MPLEX, "serve", "--negotiate"], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = server.stdout.readline().rsplit(":", 1)[1].strip()
            result = run("dial", "127.0.0.1", port, "--negotiate", "--streams", "5", "--verify", "--json")
            assert result.returncode == 0, result.stderr
            report = json.loads(result.stdout)
            assert (report["errors"], report["mismatches"], report["bytes_received"]) == (0, 0, 5 * 65536)
            # Without negotiation the server reads our first frame as a malformed message,
            # and hangs up: the dial reports failed streams instead of data.
            plain = run("dial", "127.0.0.1", port, "--streams", "1", "--json")
            assert json.loads(plain.stdout)["errors"] > 0
        finally:
            stop(server)

    def test_negotiate_with_a_peer_that_does_not_negotiate_is_one_line(self) -> None:
        server = subprocess.Popen([*MPLEX, "serve"], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = server.stdout.readline().rsplit(":", 1)[1].strip()
            result = run("dial", "127.0.0.1", port, "--negotiate", "--connect-timeout", "5")
            assert result.returncode == 1
            assert result.stderr.startswith("mplex dial: cannot negotiate /mplex/6.7.0: no answer within 5 s")
            assert len(result.stderr.strip().splitlines()) == 1
        finally:
            stop(server)

    def test_dial_prints_a_table_by_default(self) -> None:
        server = subprocess.Popen([*MPLEX, "serve"], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = server.stdout.readline().rsplit(":", 1)[1].strip()
            result = run("dial", "127.0.0.1", port, "--streams", "3", "--verify")
            assert result.returncode == 0, result.stderr
            assert "mismatches" in result.stdout
            assert "bytes_received" in result.stdout
        finally:
            stop(server)

    def test_an_unreachable_peer_is_one_line_and_status_one(self) -> None:
        result = run("dial", "127.0.0.1", "1", "--connect-timeout", "5")
        assert result.returncode == 1
        assert result.stderr.startswith("mplex dial: cannot connect to 127.0.0.1:1:")
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr

    def test_a_verify_that_fails_is_one_line_that_says_why(self) -> None:
        with served("discard") as port:
            result = run("dial", "127.0.0.1", port, "--streams", "3", "--verify")
        assert result.returncode == 1
        assert result.stdout == ""  # no table of a failed run
        assert result.stderr.strip() == (
            "mplex dial: 3 of 3 streams did not echo what they sent (received 0 of 196608 bytes: "
            "the peer sent nothing back; is it an echo server?)"
        )

    def test_a_verify_that_fails_says_so_in_json_too(self) -> None:
        with served("discard") as port:
            result = run("dial", "127.0.0.1", port, "--streams", "2", "--verify", "--json")
        assert result.returncode == 1
        report = json.loads(result.stdout)
        assert (report["mismatches"], report["failure"].split(" (")[0]) == (
            2,
            "2 of 2 streams did not echo what they sent",
        )
        assert len(result.stderr.strip().splitlines()) == 1

    def test_timeout_bounds_a_peer_that_never_answers(self) -> None:
        with socket.socket() as silent:  # accepts (in the kernel's backlog) and never reads
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            port = str(silent.getsockname()[1])
            result = run("dial", "127.0.0.1", port, "--streams", "2", "--size", "1000", "--timeout", "1")
        assert result.returncode == 1
        assert result.stderr.strip() == (
            "mplex dial: no result within 1 s (sent 2000 of 2000 bytes, received 0); --timeout sets the limit"
        )

    def test_a_negotiating_peer_dialed_without_negotiate_gets_the_hint(self) -> None:
        with served("echo", "--negotiate") as port:
            result = run("dial", "127.0.0.1", port, "--streams", "2")
        assert result.returncode == 1
        assert result.stdout == ""
        [line] = result.stderr.strip().splitlines()
        assert (
            line
            == "mplex dial: the peer speaks multistream-select first, as libp2p peers do: add --negotiate"
        )

    def test_the_payload_is_streamed_so_memory_stays_bounded(self) -> None:
        # 20 streams x 10 MB each way: made up front, the payload alone would be 200 MB.
        with served("echo") as port:
            dial = [*MPLEX, "dial", "127.0.0.1", port, "--streams", "20", "--size", "10000000", "--verify"]
            measure = (
                "import resource, subprocess, sys; "
                f"done = subprocess.run({dial!r}, stdout=subprocess.DEVNULL); "
                "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
            )
            result = subprocess.run(
                [sys.executable, "-c", measure], capture_output=True, text=True, timeout=300, check=False
            )
        status, peak_kib = map(int, result.stdout.split())
        assert status == 0, result.stderr
        assert peak_kib < 100 * 1024, f"peak RSS {peak_kib} KiB"

    def test_verbose_works_after_the_subcommand_too(self) -> None:
        with served("echo") as port:
            result = run("dial", "127.0.0.1", port, "--streams", "1", "--size", "10", "-v")
        assert result.returncode == 0, result.stderr
        assert "NEW_STREAM" in result.stderr

    def test_the_report_says_its_rate_counts_both_directions(self) -> None:
        with served("echo") as port:
            result = run("dial", "127.0.0.1", port, "--streams", "1", "--json")
        assert "mb_per_s_both_directions" in json.loads(result.stdout)


def test_without_rich_tables_are_plain_text_with_their_title(monkeypatch: pytest.MonkeyPatch) -> None:
    from mplex._cli import output

    monkeypatch.setitem(sys.modules, "rich.console", None)  # as if rich were not installed
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # rich would be used on a terminal
    lines: list[str] = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: lines.append(" ".join(map(str, a))))
    output.print_table("2 frames", ["a", "bb"], [["1", "22"], ["333", "4"]], plain=False)
    assert lines == ["2 frames", "a    bb\n1    22\n333  4"]


class TestArguments:
    @pytest.mark.parametrize(
        "args",
        [
            ["dial", "127.0.0.1", "80", "--streams", "0"],
            ["dial", "127.0.0.1", "99999"],
            ["dial", "127.0.0.1", "80", "--connect-timeout", "-1"],
            ["dial", "127.0.0.1", "80", "--connect-timeout", "nan"],
            ["serve", "--mode", "x"],
            [],
        ],
    )
    def test_bad_arguments_exit_with_two(self, args: list[str]) -> None:
        result = run(*args)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert "usage: mplex" in result.stderr

    def test_help_shows_the_defaults(self) -> None:
        result = run("dial", "--help")
        assert result.returncode == 0
        text = " ".join(result.stdout.split())
        for default in ("(default: 10)", "(default: 65536)", "seconds for the whole dial (default: 60.0)"):
            assert default in text

    def test_help_lists_every_command(self) -> None:
        result = run("--help")
        assert result.returncode == 0
        for command in ("decode", "serve", "dial", "bench"):
            assert command in result.stdout


def test_bench_runs_the_headline_case_with_a_table() -> None:
    env = {**os.environ}
    result = subprocess.run(
        [*MPLEX, "bench", "--quick"], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mplex send_nowait" in result.stdout
    assert "framing floor" in result.stdout
    assert "[1/" in result.stderr  # the progress display


def test_bench_json_is_machine_readable() -> None:
    result = subprocess.run(
        [*MPLEX, "bench", "--quick", "--json"], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads(result.stdout)
    assert "mplex send_nowait" in saved["cases"]["32B"]["results"]


def interrupted(args: list[str], *, ready: str, stream: str = "stderr") -> subprocess.CompletedProcess[str]:
    """Start the command, wait for ``ready`` on ``stream``, press Ctrl-C; what it left."""
    process = subprocess.Popen(
        [*MPLEX, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        pipe = process.stdout if stream == "stdout" else process.stderr
        assert pipe is not None
        seen = ""
        while ready not in seen:
            piece = pipe.read(1)
            assert piece, f"the command ended before {ready!r}: {seen!r}"
            seen += piece
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, seen + out, err)


class TestCtrlC:
    """Ctrl-C ends every subcommand with status 130 and nothing on stderr."""

    def test_serve(self) -> None:
        result = interrupted(["serve"], ready="serving", stream="stdout")
        assert (result.returncode, result.stderr) == (130, "")

    def test_dial(self) -> None:
        with socket.socket() as silent:  # accepts (in the kernel's backlog) and never reads
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            port = str(silent.getsockname()[1])
            result = interrupted(["-v", "dial", "127.0.0.1", port, "--streams", "1"], ready="NEW_STREAM")
        assert result.returncode == 130
        assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr

    def test_decode_waiting_for_its_input(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        class Interrupted:  # Ctrl-C while decode waits in the read of its capture
            def read(self) -> bytes:
                raise KeyboardInterrupt

        monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": Interrupted()})())
        from mplex._cli import main

        assert main(["decode", "-"]) == 130
        assert capsys.readouterr() == ("", "")

    def test_bench(self) -> None:
        result = interrupted(["bench", "32B"], ready="[1/")
        assert result.returncode == 130
        assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr


class TestMessagesInTheUsersTerms:
    def test_a_port_that_is_not_a_number(self) -> None:
        result = run("dial", "127.0.0.1", "notaport")
        assert result.returncode == 2
        assert "'notaport' is not a TCP port" in result.stderr
        assert "_port" not in result.stderr

    def test_port_zero_cannot_be_dialled(self) -> None:
        result = run("dial", "127.0.0.1", "0")
        assert result.returncode == 2
        assert "argument port: port 0 cannot be dialled (a TCP port from 1 to 65535)" in result.stderr

    @pytest.mark.parametrize("option", ["--streams", "--size", "--seed", "--timeout"])
    def test_a_number_that_is_not_a_number(self, option: str) -> None:
        result = run("dial", "127.0.0.1", "80", option, "many")
        assert result.returncode == 2
        assert f"argument {option}: 'many' is not a" in result.stderr
        assert "invalid" not in result.stderr

    def test_one_frame_is_one_frame(self) -> None:
        result = run("decode", "--plain", "-", stdin=Encoder().frame(0, Flag.NEW_STREAM, b"x"))
        assert result.returncode == 0
        assert result.stdout.startswith("1 frame in 3 bytes\n")

    def test_an_unknown_bench_case_exits_two_and_lists_the_cases(self) -> None:
        result = run("bench", "nosuchcase", "--quick")
        assert result.returncode == 2
        assert result.stdout == ""
        assert "no case named 'nosuchcase'" in result.stderr
        for name in ("32B", "latency", "TLS bulk 64 KiB"):
            assert name in result.stderr

    def test_quick_bench_passes_no_verdicts(self) -> None:
        result = run("bench", "--quick", "latency", timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "not judged" in result.stdout
        assert not [line for line in result.stdout.splitlines() if line.endswith((" met", " MISSED"))]


class TestJsonAlways:
    """``dial --json`` prints one JSON object whatever happens, with the table's types."""

    def test_an_unreachable_peer(self) -> None:
        result = run("dial", "127.0.0.1", "1", "--json", "--connect-timeout", "5")
        assert result.returncode == 1
        report = json.loads(result.stdout)
        assert report["failure"].startswith("cannot connect to 127.0.0.1:1:")
        assert report["errors"] == 0

    def test_a_failed_negotiation(self) -> None:
        with served("echo") as port:
            result = run("dial", "127.0.0.1", port, "--negotiate", "--json", "--connect-timeout", "2")
        assert result.returncode == 1
        report = json.loads(result.stdout)
        assert report["failure"].startswith("cannot negotiate /mplex/6.7.0")

    def test_the_fields_have_the_types_of_the_table(self) -> None:
        with served("echo") as port:
            table = run("dial", "127.0.0.1", port, "--streams", "2", "--plain")
            report = json.loads(run("dial", "127.0.0.1", port, "--streams", "2", "--json").stdout)
        shown = dict(line.split(None, 1) for line in table.stdout.splitlines()[1:] if line.strip())
        assert set(shown) == set(report) - {"failure"}
        timings = {"seconds", "mb_per_s_both_directions"}  # differ from run to run
        for key, value in report.items():
            if key == "failure":
                assert value is None
            elif key in timings:
                assert isinstance(value, float) and float(shown[key]) >= 0, key
            else:
                assert isinstance(value, bool | int) and str(value) == shown[key], key


class TestWhatThePeerSent:
    """``--capture FILE`` keeps what the peer sent, in the format ``decode`` reads, and
    a peer that is not mplex at all is named for what it speaks."""

    def test_dial_and_serve_capture_what_they_received(self, tmp_path: pathlib.Path) -> None:
        with served("echo", "--capture", str(tmp_path / "server")) as port:
            result = run(
                "dial",
                "127.0.0.1",
                port,
                "--streams",
                "2",
                "--size",
                "10",
                "--capture",
                str(tmp_path / "dial"),
            )
            assert result.returncode == 0, result.stderr
        from_client = run("decode", "--plain", str(tmp_path / "server.1"))
        assert from_client.stdout.splitlines()[0] == "6 frames in 44 bytes"  # 2 opens, 2 messages, 2 closes
        from_server = run("decode", "--plain", str(tmp_path / "dial"))
        assert from_server.stdout.splitlines()[0] == "4 frames in 28 bytes"  # 2 echoes, 2 closes

    def test_dialling_a_text_protocol_says_the_peer_does_not_speak_mplex(self) -> None:
        server = subprocess.Popen([sys.executable, "-c", HTTP_SERVER], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = server.stdout.readline().strip()
            result = run("dial", "127.0.0.1", port, "--streams", "2")
        finally:
            server.kill()
            server.wait(timeout=10)
            assert server.stdout is not None
            server.stdout.close()
        assert result.returncode == 1
        assert result.stderr.strip() == (
            "mplex dial: the peer does not speak mplex (it speaks a text protocol: it sent "
            "b'HTTP/1.1 400 Bad Request')"
        )


#: An HTTP server that answers anything with 400 (on 127.0.0.1; prints its port).
HTTP_SERVER = """
import socket
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 400 Bad Request\\r\\nContent-Length: 0\\r\\n\\r\\n")
    conn.close()
"""


@pytest.mark.external  # rich, the cli extra, which the other Pythons' venvs leave out
def test_a_rich_table_without_headers_has_no_empty_header_row(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    output.print_table("report", ["", ""], [["streams", "2"]], plain=False)
    lines = screen.getvalue().splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith(("┌", "┏", "╭")))
    assert "streams" in lines[top + 1]


async def test_a_long_dial_shows_its_progress_on_a_terminal(mock_clock: Any) -> None:
    import trio

    from mplex._cli.dial import Report, show_progress

    mock_clock.autojump_threshold = 0
    screen = io.StringIO()
    report = Report(streams=1, bytes_sent=1500, bytes_received=700)
    with trio.move_on_after(2.5):
        await show_progress(report, 3000, screen)
    lines = screen.getvalue().split("\r")
    assert lines[1:3] == ["sent 1,500 of 3,000 bytes, received 700"] * 2
    assert lines[-1] == "" and lines[-2].strip() == ""  # cleared at the end
