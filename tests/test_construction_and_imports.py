"""How a muxer is built and what importing costs: the socket fast path is chosen at
construction and can be switched off; the generic path carries the same bytes;
importing costs no trio and touches no allocator until a muxer starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

import mplex

from .helpers import TRANSPORTS, read_all, tcp_streams

_TRIO_LAYER = [
    "mplex._trio.muxer",
    "mplex._trio.stream",
    "mplex._trio.serving",
    "mplex._trio.select",
    "mplex._trio.errors",
]


def _run(code: str, pycache: Path | None = None) -> Any:
    """Run ``code`` in a fresh interpreter; return what it printed, as JSON.

    With ``pycache``, modules are compiled there once beforehand, so that what the
    measured run allocates is what importing costs, not what compiling does."""
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
        warm = "import trio, trio.testing, mplex\n" + f"for name in {_TRIO_LAYER!r}: __import__(name)\n"
        subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


class TestTheFastPathIsAConstructionChoice:
    async def test_a_socket_stream_takes_the_fast_path_unless_switched_off(self) -> None:
        for fast, expected in [(True, True), (False, False)]:
            a, b = await tcp_streams()
            async with a, b:
                muxer = mplex.Muxer(a, mplex.Config(socket_fast_path=fast))
                assert muxer.uses_socket_fast_path is expected

    async def test_tls_over_a_socket_stream_takes_the_fast_path_unless_switched_off(self) -> None:
        for fast in (True, False):
            async with TRANSPORTS["tls"]() as (a, _b):
                assert mplex.Muxer(a, mplex.Config(socket_fast_path=fast)).uses_socket_fast_path is fast

    async def test_every_other_transport_takes_the_generic_path(self) -> None:
        for name in ("memory", "tcp-generic", "tls-generic"):
            async with TRANSPORTS[name]() as (a, _b):
                assert mplex.Muxer(a).uses_socket_fast_path is False, name

    async def test_both_paths_carry_the_same_bytes_both_ways(self) -> None:
        payload = bytes(range(256)) * 4099  # frames of every size class, split unevenly
        for fast in (True, False):
            a, b = await tcp_streams()
            config = mplex.Config(socket_fast_path=fast, max_send_frame_size=4096)
            async with mplex.open_muxer(a, config) as left, mplex.open_muxer(b, config) as right:
                assert left.uses_socket_fast_path is fast

                async def serve(right: mplex.Muxer = right) -> None:
                    stream = await right.accept_stream()
                    await stream.send_all(await read_all(stream))
                    await stream.send_eof()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(serve)
                    stream = await left.open_stream()
                    for start in range(0, len(payload), 7001):
                        await stream.send_all(payload[start : start + 7001])
                    await stream.send_eof()
                    with trio.fail_after(10):
                        assert await read_all(stream) == payload


class TestImportsCostNothing:
    def test_the_codec_and_the_facade_import_no_trio(self) -> None:
        loaded = _run(
            "import json, sys\n"
            "import mplex._engine.wire\n"
            "from mplex import Encoder, Decoder, Config, DialerNegotiation, encode_uvarint\n"
            "print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] == 'trio')))\n"
        )
        assert loaded == []

    def test_a_trio_layer_name_loads_the_trio_layer_and_shows_as_mplex(self) -> None:
        seen = _run(
            "import json, mplex\n"
            "mplex.open_muxer\n"
            "import mplex._trio.errors as errors\n"
            "print(json.dumps([repr(errors.StreamReset), 'StreamReset' in dir(mplex)]))\n"
        )
        assert seen == ["<class 'mplex.StreamReset'>", True]

    def test_a_program_that_imports_only_mplex_testing_sees_mplex_names(self) -> None:
        seen = _run(
            "import json, traceback, mplex.testing\n"
            "import mplex._trio.errors as errors\n"
            "try:\n"
            "    raise errors.StreamReset('reset', stream_id=0, by_peer=True)\n"
            "except Exception as exc:\n"
            "    print(json.dumps([traceback.format_exception_only(exc)[-1].strip()]))\n"
        )
        assert seen == ["mplex.StreamReset: reset"]

    def test_an_unknown_name_is_an_attribute_error(self) -> None:
        try:
            mplex.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
        except AttributeError as exc:
            assert "NoSuchName" in str(exc)
        else:
            raise AssertionError("mplex.NoSuchName did not raise")


def _peak_during(code: str) -> int:
    """Bytes allocated and freed again (traced peak minus what is still held) while
    ``code`` runs in a fresh interpreter that has imported all of mplex."""
    return int(
        _run(
            "import json, tracemalloc, trio, mplex\n"
            f"for name in {_TRIO_LAYER!r}: __import__(name)\n"
            "tracemalloc.start()\n"
            "base = tracemalloc.get_traced_memory()[0]\n"
            f"{code}\n"
            "current, peak = tracemalloc.get_traced_memory()\n"
            "print(json.dumps(peak - max(current, base)))\n"
        )
    )


_START_MUXERS = (
    "async def main(configs):\n"
    "    for config in configs:\n"
    "        a, b = trio.testing.memory_stream_pair()\n"
    "        async with mplex.open_muxer(a, config):\n"
    "            pass\n"
    "import trio.testing\n"
)


class TestTheAllocatorIsPrimedOnlyWhenAMuxerStarts:
    def test_importing_every_module_frees_no_large_block(self, tmp_path: Path) -> None:
        freed = int(
            _run(
                "import json, tracemalloc, trio, trio.testing\n"
                "tracemalloc.start()\n"
                "import mplex\n"
                f"for name in {_TRIO_LAYER!r}: __import__(name)\n"
                "current, peak = tracemalloc.get_traced_memory()\n"
                "print(json.dumps(peak - current))\n",
                tmp_path,
            )
        )
        assert freed < 1024 * 1024

    def test_a_muxer_primes_it_once_per_process(self) -> None:
        primed = _peak_during(_START_MUXERS + "trio.run(main, [mplex.Config()])")
        assert primed >= 2 * 1024 * 1024
        twice = _peak_during(
            _START_MUXERS
            + "trio.run(main, [mplex.Config()])\n"
            + "tracemalloc.reset_peak()\n"
            + "base = tracemalloc.get_traced_memory()[0]\n"
            + "trio.run(main, [mplex.Config()])"
        )
        assert twice < 1024 * 1024

    def test_config_prime_allocator_false_skips_it(self) -> None:
        skipped = _peak_during(_START_MUXERS + "trio.run(main, [mplex.Config(prime_allocator=False)] * 3)")
        assert skipped < 1024 * 1024
