"""How many scheduler passes a 32 B round trip between py-libp2p hosts costs.

Runs the host latency case (``benchmarks.libp2p_host_peer``, our mplex, TCP + noise,
two processes) with a trio Instrument in each, and prints task steps and I/O waits
per round trip for each side, with the tasks that took the most steps.

    .venv-bench/bin/python -m benchmarks.probe_host_passes [COUNT]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in each child: count steps and I/O waits, then hand over to the peer's main().
CHILD = """
import atexit, collections, runpy, sys, trio
counts = collections.Counter()
class Count(trio.abc.Instrument):
    def before_task_step(self, task):
        counts["task steps"] += 1
        counts["task " + task.name.rsplit(".", 1)[-1]] += 1
    def after_io_wait(self, timeout):
        counts["I/O waits"] += 1
run = trio.run
def instrumented(fn, *args, **kwargs):
    kwargs.setdefault("instruments", []).append(Count())
    return run(fn, *args, **kwargs)
trio.run = instrumented
count = int(sys.argv[-1])
def report():
    print("PASSES", {k: round(v / count, 1) for k, v in counts.most_common(6)}, file=sys.stderr)
atexit.register(report)
sys.argv = ["libp2p_host_peer", *sys.argv[1:-1]]
runpy.run_module("benchmarks.libp2p_host_peer", run_name="__main__")
"""


def main(count: int) -> None:
    python = sys.executable
    server = subprocess.Popen(
        [python, "-c", CHILD, "server", "--muxer", "ours", str(count)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    address = server.stdout.readline().split()[2]
    client = subprocess.run(
        [
            python,
            "-c",
            CHILD,
            "client",
            "--muxer",
            "ours",
            "--addr",
            address,
            "--case",
            "latency",
            "--count",
            str(count),
            str(count),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    _, server_err = server.communicate(timeout=60)
    for side, err in (("client", client.stderr), ("server", server_err)):
        line = next(line for line in err.splitlines() if line.startswith("PASSES"))
        print(f"{side}: per round trip {line.removeprefix('PASSES ')}")
    print(client.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
