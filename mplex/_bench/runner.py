"""Running the suite's cases: each run's server and client as processes of their own
(this library's peer, the js peers, py-libp2p's), interleaved, with a progress line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .cases import Case, Run

#: The source checkout's benchmarks/ folder (js and py-libp2p baselines, RESULTS.md),
#: when this package runs from a checkout; absent in an installed wheel.
CHECKOUT = Path(__file__).resolve().parents[2] / "benchmarks"
JS_PEER = CHECKOUT / "js" / "peer.mjs"
JS_NODE = CHECKOUT.parent / "tests" / "interop" / "libp2p_node.mjs"


def peer_command(role: str, run: Run, port: int = 0, addr: str = "", server_pid: int = 0) -> list[str]:
    """The command line of one side of ``run``; a client of the many-connections family
    reads the server's CPU and memory through ``server_pid``."""
    if run.impl.startswith("host-"):
        return host_command(role, run, addr)
    if run.impl == "js":
        command = ["node", str(JS_PEER), role]
        if role == "client":
            command += ["--port", str(port)]
            for key, value in run.args.items():
                command += [f"--{key}", str(value)]
            if "conns" in run.args:
                command += ["--server-pid", str(server_pid)]
        return command
    if run.impl == "pylibp2p":
        command = [pylibp2p_python(), "-m", "benchmarks.pylibp2p_peer", role]
    else:
        command = [sys.executable, "-m", "mplex._bench.peer", role, "--impl", _peer_impl(run.impl)]
    if port:
        command += ["--port", str(port)]
    for key, value in run.args.items():
        if role != "server" or key in SERVER_ARGS:
            command += [f"--{key}", str(value)]
    if role == "client" and "conns" in run.args:
        command += ["--server-pid", str(server_pid)]
    return command


#: The arguments of a run that its server needs too.
SERVER_ARGS = frozenset({"log-level", "tls", "fast-path", "conns"})


def host_command(role: str, run: Run, addr: str) -> list[str]:
    """A host-level peer: the js-libp2p node, or a py-libp2p host with ``--muxer``
    (``host-js-to-ours``: a py-libp2p host with ours serves, the js node dials it)."""
    if run.impl == "host-js" or (run.impl == "host-js-to-ours" and role == "client"):
        command = ["node", str(JS_NODE), f"--bench-{role}"]
    else:
        muxer = "ours" if run.impl == "host-js-to-ours" else run.impl.removeprefix("host-")
        command = [pylibp2p_python(), "-m", "benchmarks.libp2p_host_peer", role, "--muxer", muxer]
    if role == "client":
        command += ["--addr", addr]
        for key, value in run.args.items():
            command += [f"--{key}", str(value)]
    return command


def _peer_impl(impl: str) -> str:
    return "mplex" if impl in ("memory",) else impl


def last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise RuntimeError(f"no result in output:\n{text}")


def run_json(command: list[str], timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """Run a one-process measurement and return its JSON result line."""
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=True)
    return last_json(out.stdout)


def run_once(run: Run, timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT.parent)}
    if run.impl == "checkpoint":
        code = (
            "import time, trio\n"
            "async def main(n):\n"
            "    t = time.perf_counter()\n"
            "    for _ in range(n): await trio.lowlevel.checkpoint()\n"
            "    print('{\"seconds\": %r}' % (time.perf_counter() - t))\n"
            f"trio.run(main, {run.args['count']})\n"
        )
        return run_json([sys.executable, "-c", code], timeout, env)
    if run.impl == "memory":
        return run_json(peer_command("memory", run), timeout, env)
    server = subprocess.Popen(
        peer_command("server", run),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        if not ready.startswith("READY"):
            raise RuntimeError(
                f"server did not start: {ready!r} {server.stderr.read() if server.stderr else ''}"
            )
        fields = ready.split()  # READY <port> [<multiaddr>, from a libp2p host]
        port, addr = int(fields[1]), fields[2] if len(fields) > 2 else ""
        client = subprocess.run(
            peer_command("client", run, port, addr, server.pid),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        if client.returncode:
            raise RuntimeError(f"client failed: {client.stderr[-2000:]}")
        result = last_json(client.stdout)
        rest, problems = server.communicate(timeout=timeout)
        if server.returncode:
            raise RuntimeError(f"{run.label}: server failed: {problems[-3000:]}")
        served = last_json(rest)
        result["server_peak_rss"] = served["peak_rss"]
        if "cpu_seconds" in served:
            result.setdefault("server_cpu_seconds", served["cpu_seconds"])
        return result
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def run_or_give_up(run: Run, timeout: float) -> dict[str, Any]:
    """``run_once``; for a baseline that may not complete, its failure as a result."""
    if not run.gives_up_after:
        return run_once(run, timeout)
    try:
        return run_once(run, run.gives_up_after)
    except subprocess.TimeoutExpired:
        return {"failed": f"no result within {run.gives_up_after:g} s"}
    except RuntimeError as exc:
        return {"failed": str(exc).splitlines()[0][:100]}


class Progress:
    """A live progress line on stderr: a rich progress bar on a terminal when rich is
    installed, else one plain line per run (also what logs and pipes get)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.bar: Any = None
        if sys.stderr.isatty():
            try:
                from rich.console import Console  # noqa: PLC0415  (optional)
                from rich.progress import Progress as RichProgress  # noqa: PLC0415
            except ImportError:
                return
            self.bar = RichProgress(console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("benchmarks", total=total)
            self.bar.start()

    def step(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done - 1, description=label)
            return
        elapsed = time.monotonic() - self.started
        sys.stderr.write(f"[{self.done}/{self.total}] {elapsed:5.0f}s  {label}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def pylibp2p_python() -> str:
    """py-libp2p lives in its own venv (see the Makefile): $MPLEX_BENCH_PYLIBP2P_PYTHON,
    else the checkout's .venv-bench, else this interpreter."""
    default = CHECKOUT.parent / ".venv-bench" / "bin" / "python"
    return os.environ.get("MPLEX_BENCH_PYLIBP2P_PYTHON") or str(
        default if default.exists() else sys.executable
    )


def unavailable(run: Run) -> str | None:
    """Why a baseline cannot run here (it needs the source checkout's peers), or None."""
    if run.impl in ("js", "host-js", "host-js-to-ours"):
        if shutil.which("node") is None:
            return "node is not installed"
        if not (CHECKOUT.parent / "tests" / "interop" / "node_modules").is_dir():
            return "the js peer is not installed (run `make bench` in a source checkout)"
    if run.args.get("tls"):
        try:
            import trustme  # noqa: F401, PLC0415  (the TLS server's certificate)
        except ImportError:
            return "trustme is not installed (it makes the TLS server's certificate)"
    if run.impl == "pylibp2p" or (run.impl.startswith("host-") and run.impl != "host-js"):
        python = pylibp2p_python()
        probe = subprocess.run([python, "-c", "import libp2p"], capture_output=True, check=False)
        if probe.returncode or not (CHECKOUT / "pylibp2p_peer.py").is_file():
            return "py-libp2p is not installed (run `make bench` in a source checkout)"
    return None


def drop_unavailable(suite: list[Case], require: bool) -> list[str]:
    """Remove baselines that cannot run here; with ``require``, refuse instead."""
    notes = []
    for case in list(suite):
        for run in list(case.runs):
            reason = unavailable(run)
            if reason is None:
                continue
            if require:
                raise SystemExit(f"benchmarks: baseline {run.label!r} cannot run: {reason}")
            if run is case.runs[0]:  # our own row: without it the case compares nothing
                suite.remove(case)
                notes.append(f"{case.name}: left out: {reason}")
                break
            case.runs.remove(run)
            notes.append(f"{case.name}: {run.label} left out: {reason}")
    return notes


def run_suite(suite: list[Case], runs: int, timeout: float) -> None:
    progress = Progress(sum(len(c.runs) for c in suite) * runs)
    for case in suite:
        for _ in range(runs):  # interleave implementations: noise hits them alike
            for run in case.runs:
                progress.step(f"{case.name}: {run.label}")
                case.results.setdefault(run.label, []).append(run_or_give_up(run, timeout))
    progress.close()
