"""What the measuring tools share: child processes, CPU time and task steps."""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

#: The source checkout the tools run from.
CHECKOUT = Path(__file__).resolve().parent.parent


def python(
    *args: str, checkout: Path = CHECKOUT, under: Sequence[str] = (), **popen: object
) -> subprocess.Popen[str]:
    """``python ARGS`` in a child process that imports ``checkout``'s code first (run
    ``under`` a tool such as ``valgrind``, if given)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"}
    command = [*under, sys.executable, *args]
    return subprocess.Popen(command, cwd=checkout, env=env, text=True, **popen)  # type: ignore[call-overload,no-any-return]


@contextlib.contextmanager
def server(*args: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A child ``python ARGS`` that prints ``... PORT`` as its first line; killed on exit
    unless it ended by itself."""
    child = python(*args, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        yield child, int(child.stdout.readline().split()[1])
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


@dataclass
class Spent:
    """Wall and CPU seconds of this process over a ``spent()`` block."""

    wall: float = 0.0
    cpu: float = 0.0


@contextlib.contextmanager
def spent() -> Iterator[Spent]:
    """``with spent() as took:``; then ``took.wall`` and ``took.cpu``."""
    took = Spent()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield took
    finally:
        took.wall, took.cpu = time.perf_counter() - wall, time.process_time() - cpu


class TaskSteps(trio.abc.Instrument):
    """Task steps by group of task (``group(task name)``), I/O waits, and the seconds
    spent blocked in them."""

    def __init__(self, group: Callable[[str], str] = lambda name: "all") -> None:
        self.steps: collections.Counter[str] = collections.Counter()
        self.io_waits = 0
        self.blocked = 0.0
        self._group = group
        self._since = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[self._group(task.name)] += 1

    def before_io_wait(self, timeout: float) -> None:
        self.io_waits += 1
        self._since = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        self.blocked += time.perf_counter() - self._since

    @property
    def total(self) -> int:
        return sum(self.steps.values())


@contextlib.contextmanager
def counting(steps: TaskSteps) -> Iterator[TaskSteps]:
    """Count ``steps`` over the block (a trio instrument while it runs)."""
    trio.lowlevel.add_instrument(steps)
    try:
        yield steps
    finally:
        trio.lowlevel.remove_instrument(steps)


def mplex_task_group(name: str) -> str:
    """``reader``/``writer`` for a muxer's own tasks, ``program`` for every other."""
    return name.split(" ")[1] if name.startswith("mplex ") else "program"


def per(counts: dict[str, int] | collections.Counter[str], units: int) -> dict[str, float]:
    return {name: round(count / units, 1) for name, count in sorted(counts.items())}
