"""What a busy guard costs per call: two boolean flags (what the streams use) against
trio's ConflictDetector idiom, a context manager (``with self._guard:``).

    python -m benchmarks.probe_busy_guard
"""

from __future__ import annotations

import timeit
from types import TracebackType

import trio


class Guard:
    """The idiom: one object per direction; entering it while held raises."""

    __slots__ = ("held", "message")

    def __init__(self, message: str) -> None:
        self.held = False
        self.message = message

    def __enter__(self) -> None:
        if self.held:
            raise trio.BusyResourceError(self.message)
        self.held = True

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.held = False


class Sender:
    def __init__(self) -> None:
        self._send_busy = False
        self._guard = Guard("another task is sending on this stream")

    def with_flags(self) -> None:
        if self._send_busy:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._send_busy = True
        try:
            pass
        finally:
            self._send_busy = False

    def with_guard(self) -> None:
        with self._guard:
            pass


def main() -> None:
    sender = Sender()
    for _ in range(3):
        flags = min(timeit.repeat(sender.with_flags, number=1_000_000, repeat=5)) * 1000
        guard = min(timeit.repeat(sender.with_guard, number=1_000_000, repeat=5)) * 1000
        print(f"flags {flags:4.0f} ns a call, guard {guard:4.0f} ns a call")


if __name__ == "__main__":
    main()
