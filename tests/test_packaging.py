"""The distribution builds, and the wheel works in a clean virtual environment."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile
import venv
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
        assert any(name.endswith("/LICENSE") for name in sdist.getnames())
    metadata = zipfile.ZipFile(wheels[0]).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert b"License-Expression: MIT" in metadata
    assert b"Programming Language :: Python :: 3.13" in metadata
    # Extras take ranges; the exact pins of `make test` live in constraints.txt.
    specs = [line.split(b";")[0] for line in metadata.splitlines() if line.startswith(b"Requires-Dist:")]
    assert specs and not any(b"==" in spec for spec in specs)
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", str(wheels[0])], check=True, timeout=600)
    version = subprocess.run(
        [python, "-c", "import mplex; print(mplex.__version__, mplex.PROTOCOL_ID)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the installed package must be what imports
    )
    assert version.stdout.split() == [_version(), "/mplex/6.7.0"]
    help_text = subprocess.run(
        [env_dir / "bin" / "mplex", "--help"], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    assert "decode" in help_text.stdout
    version_text = subprocess.run(
        [env_dir / "bin" / "mplex", "--version"], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    assert version_text.stdout.split() == ["mplex", _version(), "(/mplex/6.7.0)"]


def _version() -> str:
    text = (ROOT / "mplex" / "__init__.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]
