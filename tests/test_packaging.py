"""The distribution builds, and the wheel works in a clean virtual environment."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import venv
import zipfile

import pytest

# Builds through the package index.
pytestmark = pytest.mark.external

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The fresh venv sees only what was installed into it (an inherited PYTHONPATH could
# make pip think the package is already there).
CLEAN_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def test_wheel_and_sdist_build_and_the_wheel_installs_and_runs(tmp_path: pathlib.Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheels = list(dist.glob("trio_mplex-*.whl"))
    assert len(wheels) == 1
    assert len(list(dist.glob("trio_mplex-*.tar.gz"))) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "mplex/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    with tarfile.open(next(dist.glob("trio_mplex-*.tar.gz"))) as sdist:
        shipped = sdist.getnames()
        assert any(name.endswith("/LICENSE") for name in shipped)
        # The documentation's programs: the py-libp2p guide shows this one whole.
        assert any(name.endswith("/examples/libp2p_host.py") for name in shipped)
    metadata = zipfile.ZipFile(wheels[0]).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert b"License-Expression: MIT" in metadata
    assert b"Author: The trio-mplex authors" in metadata
    for label in (b"Documentation", b"Source", b"Changelog", b"Issues"):
        assert b"Project-URL: " + label + b", https://" in metadata
    assert b"Programming Language :: Python :: 3.13" in metadata
    # Extras take ranges; the exact pins of `make test` live in constraints.txt.
    specs = [line.split(b";")[0] for line in metadata.splitlines() if line.startswith(b"Requires-Dist:")]
    assert specs and not any(b"==" in spec for spec in specs)
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheels[0])], check=True, timeout=600, env=CLEAN_ENV
    )
    version = subprocess.run(
        [python, "-c", "import mplex; print(mplex.__version__, mplex.PROTOCOL_ID)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the installed package must be what imports
        env=CLEAN_ENV,
    )
    assert version.stdout.split() == [_version(), "/mplex/6.7.0"]
    _every_readme_command_works(env_dir / "bin" / "mplex", tmp_path)
    _the_sdist_installs_and_runs(next(dist.glob("trio_mplex-*.tar.gz")), tmp_path)
    _the_sdist_tests_collect_and_run(next(dist.glob("trio_mplex-*.tar.gz")), tmp_path)


def _the_sdist_installs_and_runs(sdist: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """pip builds the sdist into a fresh venv, and the command it installs runs."""
    env_dir = tmp_path / "sdist-venv"
    venv.create(env_dir, with_pip=True)
    install = [env_dir / "bin" / "python", "-m", "pip", "install", "-q", str(sdist)]
    subprocess.run(install, check=True, timeout=600, env=CLEAN_ENV)
    done = subprocess.run(
        [env_dir / "bin" / "mplex", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=CLEAN_ENV,
        check=True,
    )
    assert done.stdout.split() == ["mplex", _version(), "(/mplex/6.7.0)"]
    decode = subprocess.run(
        [env_dir / "bin" / "mplex", "decode", "--hex"],
        input="00 01 30",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=CLEAN_ENV,
        check=False,
    )
    assert (decode.returncode, decode.stdout.splitlines()[0]) == (0, "1 frame in 3 bytes")


def _every_readme_command_works(mplex: pathlib.Path, cwd: pathlib.Path) -> None:
    """Each command the README lists, run for real from the installed wheel."""

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [mplex, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=300,
            check=False,
            env=CLEAN_ENV,
        )

    assert run("--version").stdout.split() == ["mplex", _version(), "(/mplex/6.7.0)"]
    assert "decode" in run("--help").stdout
    server = subprocess.Popen(
        [mplex, "serve", "--port", "0", "--mode", "echo"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().rsplit(":", 1)[1].strip()
        dial = run("dial", "127.0.0.1", port, "--streams", "100", "--size", "100000", "--verify")
        assert dial.returncode == 0, dial.stderr
        assert "verified" in dial.stdout and "mismatches" in dial.stdout
    finally:
        server.send_signal(signal.SIGINT)
        stopped = server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
    assert stopped == 130  # Ctrl-C, quietly
    decode = run("decode", "--hex", stdin="00 01 30 02 02 68 69 07 00")
    assert decode.returncode == 1
    assert (
        decode.stderr.strip() == "mplex decode: stops at byte 7: frame for stream 0 has the undefined flag 7"
    )
    bench = run("bench", "--quick")
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert "mplex send_nowait" in bench.stdout and "framing floor" in bench.stdout
    # The baselines that need a checkout are left out, and said to be.
    assert "js-libp2p mplex left out: the js peer is not installed" in bench.stdout
    assert not list(cwd.glob("*.json"))  # and an installed package saves nothing unasked


def _the_sdist_tests_collect_and_run(sdist: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A packager's view: the unpacked sdist's tests collect, and run without the checkout."""
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "sdist", filter="data")
    [tree] = (tmp_path / "sdist").iterdir()
    for needed in (
        "tests/helpers.py",
        "tests/peers.py",
        "tests/conftest.py",
        "spec/vectors.json",
        "docs/conf.py",
    ):
        assert (tree / needed).is_file(), needed
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    collected = subprocess.run(
        [*pytest, "--collect-only", "-q"], cwd=tree, capture_output=True, text=True, timeout=300, check=False
    )
    assert collected.returncode == 0, collected.stdout[-3000:]
    assert "error" not in collected.stdout.splitlines()[-1]
    where = "import mplex, pathlib; print(pathlib.Path(mplex.__file__).parent.parent)"
    imported = subprocess.run(
        [sys.executable, "-c", where], cwd=tree, capture_output=True, text=True, check=True
    )
    assert pathlib.Path(imported.stdout.strip()) == tree  # the sdist's own package, not the checkout's
    some = ["tests/test_codec.py", "tests/test_varint.py", "tests/test_docs.py", "tests/test_readme.py"]
    ran = subprocess.run(
        [*pytest, "-q", "-m", "not external", *some],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:]


def _version() -> str:
    text = (ROOT / "mplex" / "__init__.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]
