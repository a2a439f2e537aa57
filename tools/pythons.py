"""Run the library's tests on every supported CPython but the main one (`make test`).

The supported versions are the classifiers in pyproject.toml. Each one found gets its
own venv (.venv-py3.X) with the pinned test dependencies, and runs the tests that need
nothing outside the library (`-m "not external"`); the main interpreter has already run
the whole suite. The first of them runs on the oldest supported trio (TRIO_MIN), the
others on the newest. A supported version that is not found is said; under CI=true it
fails the run. The last lines say which interpreters ran what.

    python3 tools/pythons.py --trio-min 0.27.0 --main-venv .venv
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def supported_versions() -> list[str]:
    """The CPython versions pyproject.toml's classifiers name, oldest first."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    return sorted(set(found), key=lambda v: int(v.split(".")[1]))


def find_python(version: str) -> str | None:
    """An interpreter of ``version``: python3.X on PATH if it runs, else pyenv's."""
    candidates = [shutil.which(f"python{version}")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        prefix = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True, check=False)
        if prefix.returncode == 0:
            prefixes = prefix.stdout.strip().split(":")
            candidates += [str(Path(p) / "bin" / f"python{version}") for p in prefixes]
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def prepared_venv(python: str, version: str, trio: str | None) -> Path:
    """.venv-py3.X with the test extra and constraints.txt (and ``trio``, if given);
    rebuilt when pyproject.toml, constraints.txt or the trio wanted change."""
    env_dir = ROOT / f".venv-py{version}"
    wanted = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "constraints.txt").read_bytes() + str(trio).encode()
    ).hexdigest()
    stamp = env_dir / ".installed"
    if stamp.exists() and stamp.read_text() == wanted:
        return env_dir
    shutil.rmtree(env_dir, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(env_dir)], check=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    extra = [f"trio=={trio}"] if trio else []
    subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[test]", *extra], check=True)
    stamp.write_text(wanted)
    return env_dir


def describe(env_dir: Path) -> str:
    """'CPython 3.X.Y, trio Z' for the venv's interpreter."""
    script = "import platform, trio; print(platform.python_version(), trio.__version__)"
    done = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", script], capture_output=True, text=True, check=True
    )
    python, trio = done.stdout.split()
    return f"CPython {python}, trio {trio}"


def library_tests(env_dir: Path) -> tuple[str, int]:
    """Run the tests that need nothing outside the library; a summary line, the status."""
    label = describe(env_dir)
    print(f"== the library's tests on {label}", flush=True)
    command = [
        str(env_dir / "bin" / "python"),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not external",
    ]
    status = subprocess.run(command, cwd=ROOT, check=False).returncode
    return f"{label}: the library's tests ({'passed' if status == 0 else 'FAILED'})", status


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--trio-min", required=True, help="the oldest supported trio")
    options.add_argument("--main-venv", required=True, help="the venv that ran the whole suite")
    args = options.parse_args()
    main_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = {v: find_python(v) for v in supported_versions() if v != main_version}
    summary = [f"{describe(Path(args.main_venv))}: the whole suite"]
    status = 0
    # The first other Python runs the oldest trio; with none, the main Python does.
    pythons = [(v, p) for v, p in found.items() if p is not None] or [(main_version, sys.executable)]
    for position, (version, python) in enumerate(pythons):
        env_dir = prepared_venv(python, version, args.trio_min if position == 0 else None)
        line, returncode = library_tests(env_dir)
        summary.append(line)
        status = status or returncode
    print("\nmake test ran on:")
    for line in summary:
        print(f"  {line}")
    missing = [v for v, python in found.items() if python is None]
    if missing:
        in_ci = bool(os.environ.get("CI"))
        print(f"  not found: CPython {', '.join(missing)} ({'fails the CI run' if in_ci else 'not tested'})")
        status = status or int(in_ci)
    return status


if __name__ == "__main__":
    sys.exit(main())
