"""What a busy guard costs per call: a boolean flag checked, set and cleared inline,
against trio's ``ConflictDetector`` idiom (``with guard:``), which the streams use
(``mplex._guard.ConflictGuard``).

    python -m benchmarks.probe_busy_guard
"""

from __future__ import annotations

import timeit

import trio

from mplex._guard import ConflictGuard


class Sender:
    def __init__(self) -> None:
        self._send_busy = False
        self._guard = ConflictGuard("another task is sending on this stream")

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
